"""Issue 31, item 15: /openapi.json says what the server does (schemathesis' question, asked without it).

The old document let a schema-driven client down three ways: it said boolean where the server takes null too
(`"sampler_logprobs": null` on Pangu V1, and every optional field, §2.1.2), it allowed bodies the server refuses
(a stop string with beam search; logprobs with active tools on a model that calls tools), and its Pangu schemas
could not be generated from at all ("Schema Error"). bench/schema_fuzz.py runs schemathesis itself.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.conftest import MODEL
from tests.pangu_helpers import PATHS, body

SCHEMAS = {
    "v1": "ChatCompletionRequest",
    "pangu_v2": "PanguV2ChatCompletionRequest",
    "pangu_v1": "PanguV1ChatCompletionRequest",
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def document(server: Any) -> dict[str, Any]:
    with server.client() as http:
        return http.get("/openapi.json").json()


def valid(doc: dict[str, Any], route: str, value: dict[str, Any]) -> bool:
    return Draft202012Validator({**doc, "$ref": f"#/components/schemas/{SCHEMAS[route]}"}).is_valid(value)


@pytest.fixture(scope="module")
def doc(live: Any) -> dict[str, Any]:
    return document(live)


@pytest.mark.parametrize("route", list(SCHEMAS))
def test_null_is_absent_for_every_optional_field(doc: dict[str, Any], http: httpx.Client, route: str) -> None:
    schema = doc["components"]["schemas"][SCHEMAS[route]]
    optional = [name for name in schema["properties"] if name not in schema.get("required", ())]
    refused = [name for name in optional if not valid(doc, route, {**body(route, max_tokens=1), name: None})]
    assert not refused, f"the document refuses null for {refused}; the server takes it (§2.1.2)"
    nulls = {name: None for name in optional if name != "max_tokens"}
    r = http.post(PATHS[route], json={**body(route, max_tokens=1), **nulls})
    assert r.status_code == 200, r.text


def test_sampler_logprobs_null_on_pangu_v1(doc: dict[str, Any], http: httpx.Client) -> None:
    sent = {**body("pangu_v1", max_tokens=1), "sampler_logprobs": None}
    assert http.post(PATHS["pangu_v1"], json=sent).status_code == 200
    assert valid(doc, "pangu_v1", sent)


@pytest.mark.parametrize("route", list(SCHEMAS))
def test_beam_search_with_a_stop_string_is_refused_by_both(doc: dict[str, Any], http: httpx.Client, route: str) -> None:
    sent = body(route, use_beam_search=True, stop="x", max_tokens=4, n=1)
    assert http.post(PATHS[route], json=sent).status_code in (400, 422)
    assert not valid(doc, route, sent), "the document allows a body the server refuses"


def test_logprobs_with_active_tools_is_refused_by_both(qwen_live: Any) -> None:
    """On a model that calls tools: a schema-valid body must not meet a 422 the schema does not name."""
    doc = document(qwen_live)
    with qwen_live.client() as http:
        model = http.get("/v1/models").json()["data"][0]["id"]
        for extra, accepted in (
            ({"logprobs": True}, False),
            ({"top_logprobs": 2}, False),
            ({"logprobs": True, "tool_choice": "none"}, True),
            ({}, True),
        ):
            sent = {
                "model": model,
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 1,
                "tools": TOOLS,
                **extra,
            }
            r = http.post("/v1/chat/completions", json=sent)
            assert (r.status_code == 200) is accepted, (extra, r.text)
            assert valid(doc, "v1", sent) is accepted, extra


def test_the_document_names_the_served_model(doc: dict[str, Any]) -> None:
    assert doc["components"]["schemas"]["ChatCompletionRequest"]["properties"]["model"]["enum"] == [MODEL]
