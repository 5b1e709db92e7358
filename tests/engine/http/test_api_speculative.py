"""Speculative decoding by prompt lookup through HTTP: the `speculative` request extension, greedy replies
identical with and without, stats one entry per token, the `usage.speculative` extension, logprobs, stop strings,
json_schema, n > 1, and the validation of the field. The live server runs with its default (`--speculative-ngram
4`: greedy requests draft unless they say `speculative: false`, sampled ones only when they ask)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.api_helpers import assert_422, entries, ok, text_of, user
from tests.conftest import chat, sse_events

CODE = "def area(width, height):\n    result = width * height\n    return result\n"
REPEATING = [user(f"Rename `result` to `value` in this code and return the whole code:\n\n{CODE}")]
GREEDY = {"temperature": 0, "max_tokens": 40, "messages": REPEATING}


def both(http: httpx.Client, **body: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same body without and with speculation."""
    return ok(chat(http, speculative=False, **body)), ok(chat(http, speculative=True, **body))


def test_by_default_greedy_requests_draft_and_sampled_ones_do_not(http: httpx.Client) -> None:
    greedy = ok(chat(http, **GREEDY))
    assert greedy["usage"]["speculative"]["accepted"] > 0  # the server's default drafts for greedy requests
    assert text_of(greedy) == text_of(ok(chat(http, speculative=False, **GREEDY)))
    sampled = ok(chat(http, **{**GREEDY, "temperature": 0.8, "seed": 3}))
    assert "speculative" not in sampled["usage"]  # a sampled reply's draws stay what its seed gives


def test_greedy_reply_is_identical_and_usage_reports_the_drafts(http: httpx.Client) -> None:
    off, on = both(http, **GREEDY)
    assert text_of(on) == text_of(off)
    assert "speculative" not in off["usage"]  # speculation off: the usage is what it always was
    spec = on["usage"]["speculative"]
    assert set(spec) == {"drafted", "accepted"} and 0 < spec["accepted"] <= spec["drafted"]
    tokens = on["usage"]["completion_tokens"]
    assert tokens == off["usage"]["completion_tokens"]
    assert len(on["usage"]["batch_size"]) == len(on["usage"]["queue_wait_time"]) == tokens
    assert len(on["decode_time_arr"]) == tokens - 1
    assert min(on["decode_time_arr"]) > 0  # a step's time is spread over the tokens it accepted (issue 33)


def test_explicit_false_is_the_same_as_off(http: httpx.Client) -> None:
    body = ok(chat(http, speculative=False, **GREEDY))
    assert "speculative" not in body["usage"]


def test_stream_stats_keep_one_entry_per_token(http: httpx.Client) -> None:
    r = chat(http, stream=True, speculative=True, stream_options={"include_usage": True}, **GREEDY)
    events = [e for e in sse_events(r.text) if isinstance(e, dict)]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in events if c["choices"])
    final = events[-1]
    assert final["choices"] == [] and final["usage"]["speculative"]["accepted"] > 0
    usage = final["usage"]
    assert len(usage["batch_size"]) == len(usage["queue_wait_time"]) == usage["completion_tokens"]
    assert text == text_of(ok(chat(http, **GREEDY)))


def test_logprobs_have_an_entry_per_token_equal_to_without(http: httpx.Client) -> None:
    off, on = both(http, logprobs=True, top_logprobs=2, **GREEDY)
    a, b = entries(off), entries(on)
    assert len(b) == on["usage"]["completion_tokens"]
    assert [e["token"] for e in a] == [e["token"] for e in b]
    for x, y in zip(a, b):
        assert abs(x["logprob"] - y["logprob"]) < 1e-3
        assert [t["token"] for t in x["top_logprobs"]][:1] == [t["token"] for t in y["top_logprobs"]][:1]


def test_stop_string_ends_the_reply_where_it_does_without(http: httpx.Client) -> None:
    off, on = both(http, stop=["height"], **GREEDY)
    assert text_of(on) == text_of(off) and "height" not in text_of(on)
    assert on["choices"][0]["finish_reason"] == "stop"
    assert on["usage"]["completion_tokens"] == off["usage"]["completion_tokens"]


def test_max_tokens_is_never_overshot(http: httpx.Client) -> None:
    for n in (1, 2, 5, 9):
        body = ok(chat(http, speculative=True, **{**GREEDY, "max_tokens": n}))
        assert body["usage"]["completion_tokens"] == n and body["choices"][0]["finish_reason"] == "length"


def test_json_schema_output_is_valid_and_identical(http: httpx.Client) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "city": {"type": "string"}},
        "required": ["name", "city"],
        "additionalProperties": False,
    }
    person = "Maria Lopez lives in Valencia. Maria Lopez works in Valencia."
    body = {
        "temperature": 0,
        "max_tokens": 40,
        "messages": [user(f"Extract name and city as JSON: {person}")],
        "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}},
    }
    off, on = both(http, **body)
    assert text_of(on) == text_of(off)
    assert set(json.loads(text_of(on))) == {"name", "city"}
    assert "speculative" in on["usage"]


def test_n_choices_each_draft_on_their_own(http: httpx.Client) -> None:
    body = {**GREEDY, "n": 2, "temperature": 0.5, "seed": 3, "max_tokens": 24}
    first, second = ok(chat(http, speculative=True, **body)), ok(chat(http, speculative=True, **body))
    assert [text_of(first, i) for i in range(2)] == [text_of(second, i) for i in range(2)]  # the seed reproduces
    assert len(first["choices"]) == 2
    spec = first["usage"]["speculative"]
    assert spec["drafted"] >= spec["accepted"] > 0


def test_the_field_is_validated(http: httpx.Client) -> None:
    assert_422(chat(http, speculative="yes"), "speculative")
    assert_422(chat(http, speculative=1), "speculative")
    assert_422(chat(http, speculative=True, use_beam_search=True, n=2, temperature=0), "speculative", "use_beam_search")
