"""response_format json_object / json_schema enforced by constrained decoding, on the real model (spec §2.2)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import MODEL

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "legs": {"type": "integer"}},
    "required": ["name", "legs"],
    "additionalProperties": False,
}


def ask(oai, **extra):
    fields = {"temperature": 0, "max_tokens": 60, **extra}
    messages = [{"role": "user", "content": "Describe a cat as JSON with its name and number of legs."}]
    return oai.chat.completions.create(model=MODEL, messages=messages, **fields)


def test_json_object_gives_a_json_object(oai) -> None:
    r = ask(oai, response_format={"type": "json_object"})
    choice = r.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(json.loads(choice.message.content), dict)


def test_json_schema_output_follows_the_schema(oai) -> None:
    r = ask(oai, response_format={"type": "json_schema", "json_schema": {"name": "animal", "schema": SCHEMA}})
    value = json.loads(r.choices[0].message.content)
    assert set(value) == {"name", "legs"} and isinstance(value["name"], str) and isinstance(value["legs"], int)


def test_stream_concatenation_equals_the_non_stream_answer(oai) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "animal", "schema": SCHEMA}}
    whole = ask(oai, response_format=fmt).choices[0].message.content
    parts = [c.choices[0].delta.content or "" for c in ask(oai, response_format=fmt, stream=True) if c.choices]
    assert "".join(parts) == whole


def test_each_of_n_choices_is_constrained(oai) -> None:
    small = {
        "type": "object",
        "properties": {"legs": {"type": "integer", "maximum": 9}, "tail": {"type": "boolean"}},
        "required": ["legs", "tail"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "cat", "schema": small}}
    r = ask(oai, response_format=fmt, n=2, temperature=0.8, seed=3)
    assert len(r.choices) == 2
    for c in r.choices:
        value = json.loads(c.message.content)
        assert set(value) == {"legs", "tail"} and isinstance(value["tail"], bool)


@pytest.mark.parametrize(
    "schema",
    [{"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}],
)
def test_a_schema_the_backend_cannot_compile_is_a_validation_error(http, schema) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
    }
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 422
    assert "response_format.json_schema.schema" in r.json()["error"]
