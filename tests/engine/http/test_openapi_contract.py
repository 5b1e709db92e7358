"""/openapi.json against the live server: every status a route answers is documented, the documented ranges are
the ones validation enforces (a value just outside is refused, one just inside taken), and what the document
allows or refuses is what the server does. bench/schema_fuzz.py runs the same question with schemathesis."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.conftest import MODEL, extra_server

V1, V2 = "/v1/chat/completions", "/api/v2/chat/completions"
PV1 = "/v1/{project_id}/deployments/{deployment_id}/chat/completions"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def doc(live: Any) -> dict[str, Any]:
    with live.client() as http:
        return http.get("/openapi.json").json()


def schema(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return doc["components"]["schemas"][name]


def validator(doc: dict[str, Any], target: dict[str, Any]) -> Draft202012Validator:
    """`target` (a schema of the document, or a $ref into it) with the document as root, so its $refs resolve."""
    return Draft202012Validator({**doc, **target})


def documented(doc: dict[str, Any], path: str, method: str, response: httpx.Response) -> dict[str, Any]:
    """The documented response of this status; its JSON body must meet the documented schema."""
    responses = doc["paths"][path][method]["responses"]
    assert str(response.status_code) in responses, (path, response.status_code, sorted(responses))
    entry = responses[str(response.status_code)]
    content = entry["content"]["application/json"]["schema"]
    errors = [e.message for e in validator(doc, content).iter_errors(response.json())]
    assert not errors, (path, response.status_code, errors, response.text[:300])
    return entry


def refused_when(doc: dict[str, Any], name: str, body: dict[str, Any]) -> list[str]:
    return [e["description"] for e in schema(doc, name)["x-refused-when"] if validator(doc, e).is_valid(body)]


def test_every_route_documents_the_statuses_it_answers(doc: dict[str, Any]) -> None:
    paths = doc["paths"]
    expected = {
        ("/v1/models", "get"): {"200", "401", "503"},
        ("/v1/models/{model_id}", "get"): {"200", "401", "404", "503"},
        (V1, "post"): {"200", "401", "403", "413", "422", "429", "500", "503"},
        ("/v1/completions", "post"): {"200", "401", "403", "413", "422", "429", "500", "503"},
        (V2, "post"): {"200", "400", "401", "403", "413", "429", "500"},
        (PV1, "post"): {"200", "400", "401", "404", "413", "429", "500"},
    }
    assert {(p, m) for p, ops in paths.items() for m in ops} == set(expected)
    for (path, method), statuses in expected.items():
        op = paths[path][method]
        assert set(op["responses"]) == statuses, path
        assert op["security"], path
    assert "HTTPValidationError" not in doc["components"]["schemas"]  # FastAPI's 422, which no route answers


def test_model_routes_answer_as_documented(doc: dict[str, Any], http: httpx.Client) -> None:
    listing = http.get("/v1/models")
    documented(doc, "/v1/models", "get", listing)
    card = http.get(f"/v1/models/{MODEL}")
    documented(doc, "/v1/models/{model_id}", "get", card)
    assert card.json()["id"] == MODEL
    missing = http.get("/v1/models/no-such-model")
    assert missing.status_code == 404
    documented(doc, "/v1/models/{model_id}", "get", missing)


def test_credential_failures_answer_as_documented(doc: dict[str, Any], live: Any) -> None:
    with extra_server(live.settings, live.service, api_keys=["right"], pangu_auth_tokens=["right"]) as http:
        for path, method in (
            ("/v1/models", "get"),
            ("/v1/models/{model_id}", "get"),
            (V1, "post"),
            (V2, "post"),
            (PV1, "post"),
            ("/v1/completions", "post"),
        ):
            url = path.format(model_id=MODEL, project_id="p", deployment_id="d")
            for headers in ({}, {"Authorization": "Bearer wrong", "X-Auth-Token": "wrong"}):
                r = http.request(method, url, headers=headers, json={"model": MODEL, "messages": HI})
                assert r.status_code == 401, (path, headers, r.text)
                documented(doc, path, method, r)


def test_document_while_the_model_loads(doc: dict[str, Any], live: Any) -> None:
    """Before the model is known the document still answers, with the caps but no model name; it is not kept."""
    with extra_server(live.settings) as http:
        r = http.get("/openapi.json")
        assert r.status_code == 200
        props = r.json()["components"]["schemas"]["ChatCompletionRequest"]["properties"]
        assert "enum" not in props["model"] and _bounds(props["n"])["maximum"] == live.settings.max_n
        loading = http.get("/v1/models")
        assert loading.status_code == 503
        documented(doc, "/v1/models", "get", loading)


def _bounds(prop: dict[str, Any]) -> dict[str, float]:
    branch = prop["anyOf"][0] if "anyOf" in prop else prop
    return {k: branch[k] for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") if k in branch}


def test_request_schemas_carry_the_ranges_and_server_limits(doc: dict[str, Any], live: Any) -> None:
    props = schema(doc, "ChatCompletionRequest")["properties"]
    assert _bounds(props["temperature"]) == {"minimum": 0.0, "maximum": 2.0}
    assert _bounds(props["top_p"]) == {"exclusiveMinimum": 1e-6, "maximum": 1.0}
    assert _bounds(props["max_tokens"]) == {"minimum": 1, "maximum": 2147483647}
    assert _bounds(props["n"]) == {"minimum": 1, "maximum": live.settings.max_n}
    assert props["model"]["enum"] == [MODEL]
    assert props["tools"]["anyOf"][0]["maxItems"] == 128
    v2 = schema(doc, "PanguV2ChatCompletionRequest")["properties"]
    assert _bounds(v2["temperature"]) == {"exclusiveMinimum": 0, "maximum": 1}
    assert _bounds(v2["n"])["maximum"] == 2


def _outside_inside(key: str, bound: float, integer: bool) -> tuple[float, float]:
    """A value just outside the documented bound `key` and one just inside it."""
    low = key in ("minimum", "exclusiveMinimum")
    if integer:
        step = -1 if low else 1
        return (bound, bound - step) if key.startswith("exclusive") else (bound + step, bound)
    near = math.nextafter(bound, -math.inf if low else math.inf)  # the next float beyond the bound
    away = math.nextafter(bound, math.inf if low else -math.inf)  # the next float inside it
    return (bound, away) if key.startswith("exclusive") else (near, bound)


EDGES = [
    (V1, "ChatCompletionRequest", "temperature", "minimum"),
    (V1, "ChatCompletionRequest", "temperature", "maximum"),
    (V1, "ChatCompletionRequest", "top_p", "exclusiveMinimum"),
    (V1, "ChatCompletionRequest", "top_p", "maximum"),
    (V1, "ChatCompletionRequest", "max_tokens", "minimum"),
    (V1, "ChatCompletionRequest", "max_tokens", "maximum"),
    (V1, "ChatCompletionRequest", "n", "maximum"),
    (V1, "ChatCompletionRequest", "repetition_penalty", "exclusiveMinimum"),
    (V2, "PanguV2ChatCompletionRequest", "temperature", "exclusiveMinimum"),
    (V2, "PanguV2ChatCompletionRequest", "temperature", "maximum"),
]


@pytest.mark.parametrize(("path", "name", "field", "key"), EDGES, ids=lambda v: str(v).rsplit("/", 1)[-1])
def test_documented_bounds_are_the_enforced_ones(
    doc: dict[str, Any], http: httpx.Client, path: str, name: str, field: str, key: str
) -> None:
    prop = schema(doc, name)["properties"][field]
    branch = prop["anyOf"][0] if "anyOf" in prop else prop
    outside, inside = _outside_inside(key, branch[key], branch["type"] == "integer")
    check = validator(doc, {"$ref": f"#/components/schemas/{name}"})
    # max_completion_tokens wins over max_tokens (§2.2): every request generates one token, whatever max_tokens says
    base = {"model": MODEL, "messages": HI, "max_completion_tokens": 1}
    if field in ("n",):
        base["temperature"] = 1.0
    refused, taken = {**base, field: outside}, {**base, field: inside}
    if field.startswith("max_"):
        refused.pop("max_completion_tokens")
        taken = {**base, "max_tokens": inside}
    assert not check.is_valid(refused) and check.is_valid(taken), (field, outside, inside)
    r = http.post(path, json=refused)
    assert r.status_code == (422 if path == V1 else 400), (field, outside, r.text)
    documented(doc, path, "post", r)
    r = http.post(path, json=taken)
    assert r.status_code == 200, (field, inside, r.text)
    documented(doc, path, "post", r)


# Bodies whose fate the document states: allowed by the schema (and by no x-refused-when entry) means 200.
BODIES = [
    ({"messages": [{"role": "user", "content": "hi"}]}, True),
    ({"messages": [{"role": "user"}]}, False),  # a user message needs content
    ({"messages": [{"role": "user", "content": ""}]}, False),
    ({"messages": [{"role": "tool", "content": "42"}]}, False),  # a tool message needs tool_call_id
    (
        {"messages": [{"role": "assistant", "content": "hi"}, {"role": "tool", "content": "", "tool_call_id": "c"}]},
        True,
    ),
    ({"messages": HI, "stream_options": {"include_usage": True}}, False),  # only with stream
    ({"messages": HI, "logprobs": False, "top_logprobs": 2}, False),
    ({"messages": HI, "tool_choice": "required"}, False),  # needs tools
    ({"messages": HI, "chat_template": "/etc/passwd"}, False),  # a path, not a template
    ({"messages": HI, "chat_template_kwargs": {"messages": []}}, False),  # a reserved key
    ({"messages": HI, "stop": ["x" * 1025]}, False),
    ({"messages": HI, "model": "another-model"}, False),
    ({"messages": HI, "n": 2, "temperature": 0}, False),  # an x-refused-when combination
    ({"messages": HI, "n": 2, "best_of": 2, "temperature": 0.7}, True),
]


@pytest.mark.parametrize(("body", "allowed"), BODIES, ids=[str(i) for i in range(len(BODIES))])
def test_what_the_document_allows_the_server_takes(
    doc: dict[str, Any], http: httpx.Client, body: dict[str, Any], allowed: bool
) -> None:
    body = {"model": MODEL, "max_tokens": 1, **body}
    name = "ChatCompletionRequest"
    in_schema = validator(doc, {"$ref": f"#/components/schemas/{name}"}).is_valid(body)
    assert (in_schema and not refused_when(doc, name, body)) == allowed, body
    r = http.post(V1, json=body)
    assert (r.status_code == 200) == allowed, (body, r.status_code, r.text[:200])
    documented(doc, V1, "post", r)
