"""The OpenAPI document: request bodies, responses and credentials as the routes really take and answer them.

The chat routes read the raw body themselves (413 before parsing, 422/400 bodies of their own), so FastAPI cannot
infer their schemas; they are attached here from the one pydantic request model, with each route's differences
(§2.1, §2.2, §2.5): `model` required on /v1 and V2 only, `stream` also a string on Pangu routes, `role` optional
on V1, and the narrower Pangu ranges when `pangu_strict_limits` is on. openapi_rules.py adds what validation
refuses beyond the fields' own types and ranges (per-role message rules, cross-field rules, server caps and, once
the model is loaded, its name and input modalities); openapi_responses.py lists every status a route answers.
The document is rebuilt until the model has loaded, then kept.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from engine.config import HttpSettings
from engine.http.openapi_responses import (
    CHAT_ERROR_SCHEMAS,
    COMPLETION_SCHEMAS,
    ERROR_SCHEMAS,
    SSE_EVENT,
    SUCCESS_SCHEMAS,
    chat_responses,
    model_responses,
)
from engine.http.openapi_rules import (
    Deployment,
    message_variants,
    null_means_absent,
    ref,
    tighten_defs,
    tighten_request,
)
from engine.protocol.completions import DEFAULT_MAX_TOKENS, MAX_LOGPROBS, MAX_PROMPTS, SHARED_FIELDS
from engine.protocol.errors import ApiError, RequestValidationError
from engine.protocol.request import ChatCompletionRequest, Route, parse_chat_request

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
MODEL_PATHS = {"/v1/models": False, "/v1/models/{model_id}": True}


def deployment(settings: HttpSettings, service: Any = None) -> Deployment:
    """The server's caps, and the loaded model's facts when `service` (a ChatService) is given."""
    caps: dict[str, Any] = {
        "max_n": settings.max_n,
        "max_new_tokens": settings.max_new_tokens,
        "pangu_strict": settings.pangu_strict_limits,
    }
    if service is None:
        return Deployment(**caps)
    probe = parse_chat_request(
        {
            "model": service.served_name,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "probe"}}],
        }
    )
    try:
        service.tool_parser_for(probe)  # the check a request with tools meets (the model's own template)
        tools = True
    except RequestValidationError:
        tools = False
    return Deployment(
        **caps,
        model=service.served_name,
        modalities=tuple(service.input_modalities()),
        tools=tools,
        context_length=service.model.context_length,
    )


def request_schemas(settings: HttpSettings, service: Any = None) -> dict[str, Any]:
    """Component schemas: the three route variants of the request and the models they reference."""
    dep = deployment(settings, service)
    base = ChatCompletionRequest.model_json_schema(ref_template=REF)
    defs: dict[str, Any] = base.pop("$defs", {})
    tighten_defs(defs)
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
    pv1 = copy.deepcopy(v2)
    pv1["title"] = SCHEMA_NAMES["pangu_v1"]
    pv1["required"] = ["messages"]
    pv1["properties"]["model"]["description"] = "Ignored: the deployment in the path chooses the model."
    strict = dep.pangu_strict
    messages = {"Message": (v1, False, False), "PanguV1Message": (pv1, strict, True)}
    if strict:  # V2 messages are text only
        messages["PanguV2Message"] = (v2, True, False)
    for name, (schema, text_only, role_optional) in messages.items():
        message = copy.deepcopy(defs["Message"])
        message["title"] = name
        if role_optional:
            message["required"] = []
            message["properties"]["role"]["description"] = "Optional on this route; absent means 'user'."
        message["anyOf"] = message_variants(dep.modalities, text_only=text_only, role_optional=role_optional)
        defs[name] = message
        schema["properties"]["messages"]["items"] = ref(name)
    for route, schema in (("v1", v1), ("pangu_v2", v2), ("pangu_v1", pv1)):
        tighten_request(schema, dep, pangu=route != "v1")
        defs[SCHEMA_NAMES[route]] = schema  # type: ignore[index]
    defs["CompletionRequest"] = completion_schema(v1)
    for one in defs.values():
        null_means_absent(one)
    return {**defs, **ERROR_SCHEMAS, **SUCCESS_SCHEMAS, **COMPLETION_SCHEMAS}


def completion_schema(v1: dict[str, Any]) -> dict[str, Any]:
    """/v1/completions' request (docs/completions.md): the chat request's sampling fields as they are, and its own."""
    ids = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}}
    text = {"type": "string", "minLength": 1}
    props = {k: copy.deepcopy(v1["properties"][k]) for k in SHARED_FIELDS if k in v1["properties"]}
    props["max_tokens"]["default"] = DEFAULT_MAX_TOKENS
    props["prompt"] = {
        "anyOf": [
            text,
            {"type": "array", "minItems": 1, "maxItems": MAX_PROMPTS, "items": text},
            ids,
            {"type": "array", "minItems": 1, "maxItems": MAX_PROMPTS, "items": ids},
        ],
        "description": "A text (tokenized with the model's special tokens, no chat template), texts, token ids "
        "(each below the vocabulary size) or token-id arrays: one choice per prompt (times n), in order.",
    }
    props["echo"] = {"type": "boolean", "default": False, "description": "The prompt in front of the text."}
    props["logprobs"] = {
        "anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_LOGPROBS}, {"type": "null"}],
        "description": "The completions logprobs object with this many top tokens.",
    }
    props["suffix"] = {"type": "null", "description": "Refused (422): no fill-in-the-middle."}
    return {"title": "CompletionRequest", "type": "object", "required": ["model", "prompt"], "properties": props}


def completions_extra() -> dict[str, Any]:
    """`openapi_extra` of POST /v1/completions: the chat route's credentials and statuses, its own bodies."""
    responses = chat_responses("v1")
    responses["200"] = {
        "description": "A text_completion object, or with `stream` an SSE stream of text_completion events.",
        "content": {
            "application/json": {"schema": {"$ref": REF.format(model="Completion")}},
            "text/event-stream": {"schema": SSE_EVENT},
        },
    }
    return {
        "summary": "Completion (legacy; vLLM's /v1/completions)",
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": REF.format(model="CompletionRequest")}}},
        },
        "responses": responses,
        "security": SECURITY["v1"],
    }


def route_extra(route: Route, summary: str) -> dict[str, Any]:
    """`openapi_extra` of one chat route: its request body, its responses and its credentials."""
    assert route in CHAT_ERROR_SCHEMAS
    return {
        "summary": summary,
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": REF.format(model=SCHEMA_NAMES[route])}}},
        },
        "responses": chat_responses(route),
        "security": SECURITY[route],
    }


def _service_getter(app: Any) -> Callable[[], Any] | None:
    """How the app reaches its ChatService: its request policy's, else its metrics' getter (None while loading)."""
    for holder, name in (("policy", "service"), ("metrics", "get_service")):
        getter = getattr(getattr(app.state, holder, None), name, None)
        if getter is not None:
            return getter
    return None


def install(app: Any, settings: HttpSettings, service: Callable[[], Any] | None = None) -> None:
    """Extend FastAPI's generated document with the request schemas, every route's statuses and the security
    schemes. `service` returns the ChatService (raising ApiError while loading); by default the app's policy's."""
    generate = app.openapi

    def loaded() -> Any:
        getter = service or _service_getter(app)
        try:
            return getter() if getter is not None else None
        except ApiError:
            return None

    final: list[dict[str, Any]] = []  # the document once the model is known

    def openapi() -> dict[str, Any]:
        if final:
            return final[0]
        svc = loaded()
        app.openapi_schema = None  # FastAPI's own cache of what generate() builds
        doc = copy.deepcopy(generate())
        for path, one in MODEL_PATHS.items():
            for op in doc.get("paths", {}).get(path, {}).values():
                op["responses"] = model_responses(one)
                op["security"] = SECURITY["v1"]
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        if "HTTPValidationError" not in json.dumps(doc["paths"]):  # FastAPI's own 422, which no route answers
            schemas.pop("HTTPValidationError", None)
            schemas.pop("ValidationError", None)
        # Several models (--models-dir): no one model's name, media, tools or context is the server's; the document
        # states what any of them may take, and each model's /v1/models card what it takes itself.
        pool = getattr(getattr(app.state, "policy", None), "models", None)
        several = pool is not None and len(pool.candidates) > 1
        schemas.update(request_schemas(settings, None if several else svc))
        doc["components"]["securitySchemes"] = {
            "BearerKey": {"type": "http", "scheme": "bearer", "description": "One of --api-keys."},
            "PanguAuthToken": {"type": "apiKey", "in": "header", "name": "X-Auth-Token"},
            "PanguAppCode": {"type": "apiKey", "in": "header", "name": "X-Apig-AppCode"},
        }
        app.openapi_schema = doc
        if svc is not None:
            final.append(doc)
        return doc

    app.openapi = openapi
