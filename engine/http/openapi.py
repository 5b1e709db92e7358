"""The OpenAPI document's chat routes: request bodies, responses and credentials as the routes really take them.

The chat routes read the raw body themselves (413 before parsing, 422/400 bodies of their own), so FastAPI cannot
infer their schemas; they are attached here from the one pydantic request model, with each route's differences
(§2.1, §2.2, §2.5): `model` required on /v1 and V2 only, `stream` also a string on Pangu routes, `role` optional
on V1, and the narrower Pangu ranges when `pangu_strict_limits` is on.
"""

from __future__ import annotations

import copy
from typing import Any

from engine.config import Settings
from engine.protocol.pangu import MAX_MESSAGES
from engine.protocol.request import ChatCompletionRequest, Route

REF = "#/components/schemas/{model}"
SCHEMA_NAMES: dict[Route, str] = {
    "v1": "ChatCompletionRequest",
    "pangu_v2": "PanguV2ChatCompletionRequest",
    "pangu_v1": "PanguV1ChatCompletionRequest",
}
SECURITY: dict[Route, list[dict[str, list[str]]]] = {
    "v1": [{"BearerKey": []}],
    "pangu_v2": [{"BearerKey": []}],
    "pangu_v1": [{"PanguAuthToken": []}, {"PanguAppCode": []}],
}
_V1_ERROR = {"type": "object", "required": ["error", "error_type"],
             "properties": {"error": {"type": "string"}, "error_type": {"type": "string"}}}  # fmt: skip
_ERRORS: dict[Route, dict[str, Any]] = {
    "v1": _V1_ERROR,
    "pangu_v2": {
        "type": "object",
        "required": ["error", "id"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "type", "message"],
                "properties": {k: {"type": "string"} for k in ("code", "type", "message")},
            },  # fmt: skip
            "id": {"type": "string"},
        },
    },
    "pangu_v1": {
        "type": "object",
        "required": ["error_code", "error_msg", "details"],
        "properties": {
            "error_code": {"type": "string"},
            "error_msg": {"type": "string"},
            "details": {"type": "array", "items": _V1_ERROR},
        },  # fmt: skip
    },
}
_STATUSES: dict[Route, dict[str, str]] = {
    "v1": {"401": "Missing or wrong credentials", "413": "Body too large", "422": "Invalid request",
           "429": "Too many concurrent requests from this client", "503": "Loading, draining or queue full"},
    "pangu_v2": {"400": "Invalid request (PANGU.0010, .3278, .3320, .3321)", "401": "PANGU.0011 / PANGU.0012",
                 "413": "Body too large (PANGU.0010)", "429": "Queue or client limit (PANGU.3267)",
                 "500": "Inner service exception (PANGU.0031)"},
}  # fmt: skip
_STATUSES["pangu_v1"] = {**_STATUSES["pangu_v2"], "404": "Deployment does not exist (PANGU.3254)"}


def request_schemas(settings: Settings) -> dict[str, Any]:
    """Component schemas: the three route variants of the request and the models they reference."""
    base = ChatCompletionRequest.model_json_schema(ref_template=REF)
    defs: dict[str, Any] = base.pop("$defs", {})
    v1 = copy.deepcopy(base)
    v1["title"] = SCHEMA_NAMES["v1"]
    v1["required"] = ["model", "messages"]
    v2 = copy.deepcopy(v1)
    v2["title"] = SCHEMA_NAMES["pangu_v2"]
    v2["properties"]["stream"] = {
        "anyOf": [{"type": "boolean"}, {"type": "string", "pattern": "^([Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee])$"}],
        "default": False,
        "description": "A boolean, or the string 'true' / 'false' (any case) as the Pangu examples send it.",
    }
    if settings.pangu_strict_limits:
        props = v2["properties"]
        props["messages"]["maxItems"] = MAX_MESSAGES
        for name in ("temperature", "top_p"):
            props[name]["anyOf"][0] = {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
        props["n"]["description"] = "1 or 2 without stream, 1 with stream."
    v2["properties"]["n"].setdefault("description", "Must be 1 when stream is true.")
    pv1 = copy.deepcopy(v2)
    pv1["title"] = SCHEMA_NAMES["pangu_v1"]
    pv1["required"] = ["messages"]
    pv1["properties"]["model"]["description"] = "Ignored: the deployment in the path chooses the model."
    message = copy.deepcopy(defs["Message"])
    message["title"] = "PanguV1Message"
    message["required"] = []
    message["properties"]["role"]["description"] = "Optional on this route; absent means 'user'."
    pv1["properties"]["messages"]["items"] = {"$ref": REF.format(model="PanguV1Message")}
    defs["PanguV1Message"] = message
    for name, schema in (("v1", v1), ("pangu_v2", v2), ("pangu_v1", pv1)):
        defs[SCHEMA_NAMES[name]] = schema  # type: ignore[index]
    for route in ("v1", "pangu_v2", "pangu_v1"):
        defs[f"{SCHEMA_NAMES[route]}Error"] = _ERRORS[route]  # type: ignore[index]
    return defs


def route_extra(route: Route, summary: str) -> dict[str, Any]:
    """`openapi_extra` of one chat route: its request body, its responses and its credentials."""
    name = SCHEMA_NAMES[route]
    error = {"application/json": {"schema": {"$ref": REF.format(model=f"{name}Error")}}}
    ok = {
        "description": "A chat.completion object, or with `stream` an SSE stream of chat.completion.chunk events.",
        "content": {"application/json": {"schema": {"type": "object"}}, "text/event-stream": {"schema": {"type": "string"}}},
    }  # fmt: skip
    responses: dict[str, Any] = {"200": ok}
    responses.update({code: {"description": text, "content": error} for code, text in _STATUSES[route].items()})
    return {
        "summary": summary,
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": REF.format(model=name)}}},
        },
        "responses": responses,
        "security": SECURITY[route],
    }


def install(app: Any, settings: Settings) -> None:
    """Extend FastAPI's generated document with the request schemas and the security schemes."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = generate()
            components = doc.setdefault("components", {})
            components.setdefault("schemas", {}).update(request_schemas(settings))
            components["securitySchemes"] = {
                "BearerKey": {"type": "http", "scheme": "bearer", "description": "One of --api-keys."},
                "PanguAuthToken": {"type": "apiKey", "in": "header", "name": "X-Auth-Token"},
                "PanguAppCode": {"type": "apiKey", "in": "header", "name": "X-Apig-AppCode"},
            }
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi
