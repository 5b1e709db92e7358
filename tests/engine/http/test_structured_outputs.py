"""Structured outputs as vLLM has them (issue 33 item 4) on the real models: `structured_outputs` with one of
json, regex, choice, grammar (Lark, or GBNF that llguidance converts), the older guided_json / guided_regex /
guided_choice / guided_grammar, through the same llguidance constraint as response_format; one kind per request;
a bad pattern is a 422 with the compiler's message; streams, n > 1, and the answer after `</think>`."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from demo_models.tiny_qwen import MATH
from tests.api_helpers import assert_422, ok, text_of, user
from tests.conftest import MODEL, QWEN_MODEL, chat, sse_events

SKY = [user("Is the sky blue? Answer yes or no.")]
PHONE = [user("Give me a phone number.")]
PHONE_RE = r"\d{3}-\d{4}"
LARK = 'start: "The answer is " NUMBER "."\nNUMBER: /[0-9]{1,3}/\n'
GBNF = 'root ::= color " " animal\ncolor ::= "red" | "green" | "blue"\nanimal ::= "cat" | "dog"\n'
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "legs": {"type": "integer"}},
    "required": ["name", "legs"],
    "additionalProperties": False,
}


def ask(http: httpx.Client, messages: list[dict[str, Any]] = SKY, **body: Any) -> dict[str, Any]:
    return ok(chat(http, messages=messages, **{"temperature": 0, "max_tokens": 24, **body}))


def streamed(http: httpx.Client, messages: list[dict[str, Any]] = SKY, **body: Any) -> tuple[str, str]:
    r = chat(http, messages=messages, stream=True, **{"temperature": 0, "max_tokens": 24, **body})
    assert r.status_code == 200, r.text
    chunks = [c for c in sse_events(r.text)[:-1] if c["choices"]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    return text, [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]][-1]


@pytest.mark.parametrize(
    "fields",
    [{"guided_choice": ["yes", "no"]}, {"structured_outputs": {"choice": ["yes", "no"]}}],
    ids=["guided_choice", "structured_outputs.choice"],
)
def test_a_choice_yields_exactly_one_of_them(http: httpx.Client, fields: dict[str, Any]) -> None:
    body = ask(http, **fields)
    assert text_of(body) in ("yes", "no")
    assert body["choices"][0]["finish_reason"] == "stop"
    assert streamed(http, **fields) == (text_of(body), "stop")


@pytest.mark.parametrize(
    "fields",
    [{"guided_regex": PHONE_RE}, {"structured_outputs": {"regex": PHONE_RE}}],
    ids=["guided_regex", "structured_outputs.regex"],
)
def test_a_regex_is_matched_fully(http: httpx.Client, fields: dict[str, Any]) -> None:
    body = ask(http, PHONE, **fields)
    assert re.fullmatch(PHONE_RE, text_of(body)), text_of(body)
    assert streamed(http, PHONE, **fields)[0] == text_of(body)


def test_a_lark_grammar_is_followed(http: httpx.Client) -> None:
    messages = [user("What is 2+2?")]
    for fields in ({"guided_grammar": LARK}, {"structured_outputs": {"grammar": LARK}}):
        text = text_of(ask(http, messages, **fields))
        assert re.fullmatch(r"The answer is [0-9]{1,3}\.", text), text


def test_a_gbnf_grammar_is_converted_and_followed(http: httpx.Client) -> None:
    text = text_of(ask(http, [user("Name a pet and its colour.")], structured_outputs={"grammar": GBNF}))
    assert re.fullmatch(r"(red|green|blue) (cat|dog)", text), text


@pytest.mark.parametrize(
    "fields",
    [
        {"guided_json": SCHEMA},
        {"guided_json": json.dumps(SCHEMA)},
        {"structured_outputs": {"json": SCHEMA}},
        {"structured_outputs": {"json": json.dumps(SCHEMA)}},
    ],
    ids=["guided_json", "guided_json-text", "structured_outputs.json", "structured_outputs.json-text"],
)
def test_a_json_schema_is_followed(http: httpx.Client, fields: dict[str, Any]) -> None:
    messages = [user("Describe a cat as JSON with its name and number of legs.")]
    value = json.loads(text_of(ask(http, messages, max_tokens=40, **fields)))
    assert set(value) == {"name", "legs"} and isinstance(value["legs"], int)


def test_json_object_in_structured_outputs(http: httpx.Client) -> None:
    messages = [user("Describe a cat as JSON with its name and number of legs.")]
    body = ask(http, messages, max_tokens=60, structured_outputs={"json_object": True})
    assert isinstance(json.loads(text_of(body)), dict)


def test_each_of_n_choices_is_constrained_in_streams_too(http: httpx.Client) -> None:
    fields = {"temperature": 1.0, "seed": 11, "n": 2, "guided_choice": ["alpha", "beta", "gamma"]}
    body = ask(http, **fields)
    assert len(body["choices"]) == 2 and all(
        c["message"]["content"] in ("alpha", "beta", "gamma") for c in body["choices"]
    )
    r = chat(http, messages=SKY, stream=True, max_tokens=24, **fields)
    texts = {0: "", 1: ""}
    for c in sse_events(r.text)[:-1]:
        for ch in c["choices"]:
            texts[ch["index"]] += ch["delta"].get("content") or ""
    assert all(t in ("alpha", "beta", "gamma") for t in texts.values()), texts


def test_the_openai_sdk_sends_them_through_extra_body(oai) -> None:
    r = oai.chat.completions.create(
        model=MODEL,
        messages=SKY,
        temperature=0,
        max_tokens=8,
        extra_body={"structured_outputs": {"choice": ["yes", "no"]}},
    )
    assert r.choices[0].message.content in ("yes", "no")
    r = oai.chat.completions.create(
        model=MODEL, messages=PHONE, temperature=0, max_tokens=32, extra_body={"guided_regex": PHONE_RE}
    )
    assert re.fullmatch(PHONE_RE, r.choices[0].message.content)


def test_the_answer_after_think_is_constrained_and_the_reasoning_is_not(qwen_live) -> None:
    with qwen_live.client() as http:
        free = ok(http.post("/v1/chat/completions", json={"model": QWEN_MODEL, "max_tokens": 40, **MATH.request()}))
        body = {"model": QWEN_MODEL, "max_tokens": 40, **MATH.request(), "guided_choice": ["four", "five"]}
        bound = ok(http.post("/v1/chat/completions", json=body))
    assert bound["choices"][0]["message"]["reasoning_content"] == free["choices"][0]["message"]["reasoning_content"]
    assert free["choices"][0]["message"]["content"] not in ("four", "five")
    assert bound["choices"][0]["message"]["content"] in ("four", "five")


@pytest.mark.parametrize(
    ("fields", "fragments"),
    [
        ({"guided_regex": "(ab"}, ["guided_regex", "cannot compile this regex", "unclosed group"]),
        ({"structured_outputs": {"regex": "[z-a]"}}, ["structured_outputs.regex", "cannot compile this regex"]),
        ({"guided_grammar": "start: foo"}, ["guided_grammar", "cannot compile this grammar", "foo"]),
        ({"structured_outputs": {"grammar": "root ::= ("}}, ["structured_outputs.grammar", "Expected ')'"]),
        (
            {"guided_json": {"type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}},
            ["guided_json", "cannot enforce this JSON schema"],
        ),
        ({"guided_json": "{not json"}, ["guided_json", "JSON schema"]),
        ({"guided_choice": []}, ["guided_choice", "non-empty"]),
        ({"guided_choice": ["a", 3]}, ["guided_choice[1]", "must be a string"]),
        ({"structured_outputs": {}}, ["structured_outputs", "one of json, regex, choice, grammar"]),
        (
            {"structured_outputs": {"regex": "a", "choice": ["a"]}},
            ["structured_outputs.regex", "structured_outputs.choice", "cannot be combined"],
        ),
        (
            {"guided_choice": ["a"], "response_format": {"type": "json_object"}},
            ["guided_choice", "response_format", "cannot be combined"],
        ),
        (
            {"guided_regex": "a", "structured_outputs": {"json": {"type": "object"}}},
            ["structured_outputs.json", "guided_regex", "cannot be combined"],
        ),
        ({"guided_regex": "a", "use_beam_search": True}, ["guided_regex", "use_beam_search"]),
    ],
)
def test_bad_patterns_and_combinations_are_a_422_with_the_reason(http: httpx.Client, fields, fragments) -> None:
    assert_422(chat(http, max_tokens=4, **fields), *fragments)


def test_the_notebooks_backends_send_them_too(live: Any, service: Any) -> None:
    """The embedded backend parses them with the API's parser; the remote one sends the request it parsed, so the
    aliased `structured_outputs.json` and int-keyed `logit_bias` must survive its dump."""
    from playground.notebooks import connect

    local, remote = connect(service), connect(live.url + "/v1")
    fields = {"temperature": 0, "max_tokens": 40, "structured_outputs": {"json": SCHEMA}}
    prompt = "Describe a cat as JSON with its name and number of legs."
    here, there = local.chat(prompt, **fields), remote.chat(prompt, **fields)
    assert here.reply == there.reply and set(json.loads(here.reply)) == {"name", "legs"}
    assert local.chat("Is the sky blue?", temperature=0, max_tokens=8, guided_choice=["yes", "no"]).reply in (
        "yes",
        "no",
    )
    with live.client() as http:
        tid = ok(http.post("/tokenize", json={"prompt": " banana", "add_special_tokens": False}))["tokens"][0]
    biased = {"temperature": 0, "max_tokens": 3, "logit_bias": {tid: 100}}  # a Python caller's int key
    assert local.chat("Hi", **biased).reply == remote.chat("Hi", **biased).reply == " banana" * 3


def test_the_pages_gradio_endpoint_takes_the_format_too(live: Any) -> None:
    """The page's /chat endpoint (Gradio's client, no browser) builds the same structured_outputs and gets the
    server's 422 message for a bad grammar, in the page's refusal line."""
    from tests.playground.test_ui import CHECK, REQUEST, answer, client

    ui = client(live.url)
    out = ui.predict(
        message="Is the sky blue?",
        system="",
        temperature=0.0,
        max_tokens=8,
        format="choice list",
        format_pattern="yes\nno",
        api_name="/chat",
    )
    assert answer(out[0]) in ("yes", "no")
    assert json.loads(out[REQUEST])["structured_outputs"] == {"choice": ["yes", "no"]}
    out = ui.predict(
        message="Hi",
        system="",
        temperature=0.0,
        max_tokens=8,
        format="grammar",
        format_pattern="start: foo",
        api_name="/chat",
    )
    assert "structured_outputs.grammar: cannot compile this grammar" in out[CHECK] and "foo" in out[CHECK]
