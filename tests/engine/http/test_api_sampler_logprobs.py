"""`sampler_logprobs` (issue 19, point 4) through the real server on the bundled model: each logprobs entry also
carries the top candidates after the samplers (`sampler_top_logprobs`) and the chosen token's logprob there
(`sampler_logprob`); stream and non-stream agree; a request that does not ask gets the JSON it got before; the
validation errors in each route's format."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from tests.api_helpers import assert_422, entries, ok, text_of
from tests.conftest import chat, sse_events
from tests.pangu_helpers import assert_pangu_error, check_pangu_stream, post

PLAIN_KEYS = {"token", "logprob", "bytes", "top_logprobs"}
ASKED_KEYS = PLAIN_KEYS | {"sampler_logprob", "sampler_top_logprobs"}
SAMPLED = {
    "temperature": 0.8,
    "top_k": 3,
    "seed": 21,
    "max_tokens": 12,
    "ignore_eos": True,
    "logprobs": True,
    "top_logprobs": 5,
}
ASKED = {**SAMPLED, "sampler_logprobs": True}
MESSAGE = "Parameter sampler_logprobs requires logprobs to be true and top_logprobs of at least 1."


def streamed_entries(r: httpx.Response) -> list[dict[str, Any]]:
    assert r.status_code == 200, r.text
    chunks = [c for c in sse_events(r.text)[:-1] if c["choices"]]
    return [e for c in chunks if c["choices"][0]["logprobs"] for e in c["choices"][0]["logprobs"]["content"]]


def decodes(t: dict[str, Any]) -> bool:
    return "\ufffd" in t["token"] or bytes(t["bytes"]).decode("utf-8") == t["token"]


@pytest.fixture(scope="module")
def asked(live: Any) -> dict[str, Any]:
    with live.client() as http:
        return ok(chat(http, **ASKED))


def test_each_entry_has_the_model_and_the_samplers_distributions(asked: dict[str, Any]) -> None:
    es = entries(asked)
    assert len(es) == 12 and "".join(e["token"] for e in es) == text_of(asked)
    for e in es:
        assert set(e) == ASKED_KEYS
        assert len(e["top_logprobs"]) == 5
        after = e["sampler_top_logprobs"]
        assert 1 <= len(after) <= 3  # top_k 3: what is left after the samplers is at most three tokens
        values = [t["logprob"] for t in after]
        assert values == sorted(values, reverse=True) and all(set(t) == {"token", "logprob", "bytes"} for t in after)
        assert all(decodes(t) for t in after)
        # Three survivors, five asked for: the list is the whole distribution the token was drawn from.
        assert sum(math.exp(v) for v in values) == pytest.approx(1.0, abs=1e-4)
        assert e["token"] in [t["token"] for t in after]
        assert e["sampler_logprob"] == pytest.approx(next(t["logprob"] for t in after if t["token"] == e["token"]))
        # top_k keeps the model's three likeliest: the same tokens as its top three, temperature-sharpened.
        assert [t["token"] for t in after] == [t["token"] for t in e["top_logprobs"][: len(after)]]
        assert e["sampler_logprob"] >= e["logprob"] - 1e-6


def test_the_stream_carries_the_same_records_as_the_non_stream_fold(http: httpx.Client, asked: dict[str, Any]) -> None:
    streamed = streamed_entries(chat(http, stream=True, **ASKED))
    expected = entries(asked)
    assert [e["token"] for e in streamed] == [e["token"] for e in expected]
    for s, x in zip(streamed, expected):
        assert set(s) == ASKED_KEYS
        assert [t["token"] for t in s["sampler_top_logprobs"]] == [t["token"] for t in x["sampler_top_logprobs"]]
        assert s["sampler_logprob"] == pytest.approx(x["sampler_logprob"], abs=1e-4)


def test_asking_changes_no_token_a_seed_draws(http: httpx.Client, asked: dict[str, Any]) -> None:
    plain = ok(chat(http, **SAMPLED))
    assert [e["token"] for e in entries(plain)] == [e["token"] for e in entries(asked)]


def key_paths(value: Any, at: str = "") -> set[str]:
    """Every key path of a JSON value (list items share one path), e.g. choices[].logprobs.content[].token."""
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in {f"{at}.{k}"} | key_paths(v, f"{at}.{k}")}
    if isinstance(value, list):
        return {p for v in value for p in key_paths(v, at + "[]")}
    return set()


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_a_request_that_does_not_ask_gets_the_json_keys_of_before(http: httpx.Client, stream: bool) -> None:
    def keys(**extra: Any) -> set[str]:
        r = chat(http, stream=stream, **SAMPLED, **extra)
        assert r.status_code == 200, r.text
        docs = [c for c in sse_events(r.text) if c != "[DONE]"] if stream else [r.json()]
        return set().union(*(key_paths(d) for d in docs))

    absent, false = keys(), keys(sampler_logprobs=False)
    assert absent == false
    assert not any("sampler" in p for p in absent)
    content = ".choices[].delta" if stream else ".choices[].message"
    entry = ".choices[].logprobs.content[]"
    assert {p.removeprefix(entry + ".") for p in absent if p.startswith(entry + ".")} == {
        "token",
        "logprob",
        "bytes",
        "top_logprobs",
        "top_logprobs[].token",
        "top_logprobs[].logprob",
        "top_logprobs[].bytes",
    }
    assert content + ".content" in absent


def test_greedy_after_is_the_penalised_distribution_and_its_highest_is_taken(http: httpx.Client) -> None:
    body = ok(
        chat(http, temperature=0, max_tokens=8, ignore_eos=True, logprobs=True, top_logprobs=5, sampler_logprobs=True)
    )
    for e in entries(body):
        after = e["sampler_top_logprobs"]
        assert len(after) == 5 and after[0]["token"] == e["token"]
        # No penalty, no constraint, no temperature under greedy: after the samplers is the model's own view.
        assert [t["token"] for t in after] == [t["token"] for t in e["top_logprobs"]]
        assert [t["logprob"] for t in after] == pytest.approx([t["logprob"] for t in e["top_logprobs"]], abs=1e-4)
    penalised = ok(
        chat(
            http,
            temperature=0,
            max_tokens=12,
            ignore_eos=True,
            logprobs=True,
            top_logprobs=5,
            sampler_logprobs=True,
            repetition_penalty=2.0,
        )
    )
    moved = 0
    for e in entries(penalised):
        assert e["sampler_top_logprobs"][0]["token"] == e["token"]  # greedy takes the highest after the penalty
        moved += e["top_logprobs"][0]["token"] != e["token"]
    assert moved, "a repetition penalty of 2 on the prompt's tokens changed no choice"


def test_a_json_constraint_shows_as_tokens_removed_after(http: httpx.Client) -> None:
    body = ok(
        chat(
            http,
            temperature=0.8,
            seed=3,
            max_tokens=6,
            logprobs=True,
            top_logprobs=5,
            sampler_logprobs=True,
            response_format={"type": "json_object"},
        )
    )
    first = entries(body)[0]
    assert first["token"].lstrip().startswith("{")
    assert all(
        t["token"].strip() in ("", "{") or t["token"].lstrip().startswith("{") for t in first["sampler_top_logprobs"]
    )
    assert any(not t["token"].lstrip().startswith("{") for t in first["top_logprobs"]), "the model wanted prose"


def test_n2_each_choice_records_its_own(http: httpx.Client) -> None:
    body = ok(
        chat(
            http,
            n=2,
            temperature=0.9,
            top_k=2,
            seed=8,
            max_tokens=4,
            ignore_eos=True,
            logprobs=True,
            top_logprobs=3,
            sampler_logprobs=True,
        )
    )
    for i in (0, 1):
        for e in entries(body, i):
            assert set(e) == ASKED_KEYS and len(e["sampler_top_logprobs"]) <= 2


@pytest.mark.parametrize(
    "fields",
    [{}, {"logprobs": True}, {"logprobs": True, "top_logprobs": 0}, {"top_logprobs": 3}, {"logprobs": False}],
    ids=["alone", "no-top_logprobs", "top_logprobs-0", "logprobs-absent", "logprobs-false"],
)
def test_sampler_logprobs_needs_logprobs_and_top_logprobs(http: httpx.Client, fields: dict[str, Any]) -> None:
    r = chat(http, sampler_logprobs=True, max_tokens=2, **fields)
    if fields == {"logprobs": False}:
        assert_422(r, "sampler_logprobs requires logprobs")
    else:
        assert assert_422(r) == MESSAGE


def test_other_refusals(http: httpx.Client) -> None:
    assert_422(chat(http, sampler_logprobs="yes", max_tokens=2), "sampler_logprobs")
    r = chat(http, sampler_logprobs=True, logprobs=True, top_logprobs=2, use_beam_search=True, n=2, max_tokens=2)
    assert assert_422(r) == "Parameter sampler_logprobs is not supported with use_beam_search."
    assert ok(chat(http, sampler_logprobs=False, max_tokens=2))["choices"][0]["logprobs"] is None


def test_pangu_route_refuses_in_its_format_and_streams_the_records(http: httpx.Client) -> None:
    assert_pangu_error(
        post(http, "pangu_v2", sampler_logprobs=True, max_tokens=2),
        "pangu_v2",
        400,
        "PANGU.0010",
        "sampler_logprobs requires logprobs",
    )
    r = post(http, "pangu_v2", stream=True, **ASKED)
    chunks = check_pangu_stream(r, "pangu_v2")["chunks"]
    es = [e for c in chunks for ch in c["choices"] if ch["logprobs"] for e in ch["logprobs"]["content"]]
    assert len(es) == 12 and all(set(e) == ASKED_KEYS and len(e["sampler_top_logprobs"]) <= 3 for e in es)


def test_tokens_the_thinking_budget_forces_record_no_after(qwen_live: Any) -> None:
    from demo_models.tiny_qwen import MATH
    from tests.conftest import QWEN_MODEL

    kwargs = {"enable_thinking": True, "thinking_budget": 2}
    with qwen_live.client() as http:
        body = ok(
            http.post(
                "/v1/chat/completions",
                json={
                    "model": QWEN_MODEL,
                    "max_tokens": 60,
                    "logprobs": True,
                    "top_logprobs": 2,
                    "sampler_logprobs": True,
                    **MATH.request(chat_template_kwargs=kwargs),
                },
            )
        )
    es = entries(body)
    assert all(set(e) == ASKED_KEYS for e in es)
    forced = [e for e in es if e["sampler_logprob"] is None]
    assert forced and all(e["sampler_top_logprobs"] == [] for e in forced)  # fed, not drawn: nothing after
    drawn = [e for e in es if e["sampler_logprob"] is not None]
    assert drawn and all(e["sampler_top_logprobs"] for e in drawn)
    text = "".join(e["token"] for e in forced)  # the budget's early-stop text, closing the reasoning
    assert text.startswith(qwen_live.settings.thinking_early_stop_text.split("</think>")[0]) and "</think>" in text
