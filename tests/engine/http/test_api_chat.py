"""/v1/chat/completions response shapes, non-stream and SSE, over httpx (the openai SDK is in test_api_sdk.py).

Spec §4.1-§4.2, §5.1-§5.2, §5.4-§5.5; conformance cases 5, 47, 51, 54, 93-100.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api_helpers import ID_RE, check_cached_tokens, check_stream, ok, text_of
from tests.conftest import MODEL, chat, extra_server, sse_events

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

TIMING = ("batch_size", "queue_wait_time")


# ---- non-stream ----------------------------------------------------------------------------------------------


def test_non_stream_shape(http: httpx.Client) -> None:  # case 5
    r = chat(http, temperature=0, max_tokens=8)
    body = ok(r)
    assert ID_RE.match(body["id"]) and r.headers["x-request-id"] == body["id"]
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    assert body["prompt_logprobs"] is None
    (choice,) = body["choices"]
    assert choice["index"] == 0
    assert choice["message"] == {"role": "assistant", "content": choice["message"]["content"], "tool_calls": []}
    assert isinstance(choice["message"]["content"], str) and choice["message"]["content"]
    assert choice["logprobs"] is None and choice["stop_reason"] is None
    assert choice["finish_reason"] in ("stop", "length")
    u = body["usage"]
    assert u["prompt_tokens"] > 0 and 0 < u["completion_tokens"] <= 8
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert "completion_tokens_details" not in u  # no reasoning split for this model


@pytest.mark.parametrize(("n", "max_tokens"), [(1, 8), (2, 5)])
def test_perf_stats_arrays(http: httpx.Client, n: int, max_tokens: int) -> None:  # case 93
    temperature = 0.8 if n > 1 else 0
    body = ok(chat(http, n=n, temperature=temperature, seed=7, max_tokens=max_tokens, ignore_eos=True))
    u = body["usage"]
    check_cached_tokens(u)
    assert u["completion_tokens"] == n * max_tokens
    longest = max_tokens  # every choice ran to max_tokens (ignore_eos)
    assert len(u["batch_size"]) == len(u["queue_wait_time"]) == longest
    assert len(body["decode_time_arr"]) == longest - 1
    assert isinstance(body["prefill_time"], (int, float)) and body["prefill_time"] >= 0
    for value in [*u["batch_size"], *u["queue_wait_time"], *body["decode_time_arr"]]:
        assert isinstance(value, int) and value >= 0
    assert all(b >= 1 for b in u["batch_size"])


def test_ids_and_created(http: httpx.Client) -> None:  # case 94
    bodies = [ok(chat(http, temperature=0, max_tokens=1)) for _ in range(2)]
    assert bodies[0]["id"] != bodies[1]["id"]
    for b in bodies:
        assert ID_RE.match(b["id"])
        assert isinstance(b["created"], int) and abs(b["created"] - time.time()) <= 5


# ---- stream --------------------------------------------------------------------------------------------------


def test_stream_invariants_and_text_equals_non_stream(http: httpx.Client) -> None:  # cases 96, 97
    req = {"temperature": 0, "max_tokens": 16}
    whole = ok(chat(http, **req))
    s = check_stream(chat(http, stream=True, **req))
    assert s["opening"] == {0: 1} and s["closings"] == {0: 1}
    assert s["text"][0] == text_of(whole)
    closing = s["closing"][0]
    assert closing["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert closing["choices"][0]["stop_reason"] is None
    usage = closing["usage"]
    assert usage["completion_tokens"] == whole["usage"]["completion_tokens"]
    assert len(usage["batch_size"]) == len(usage["queue_wait_time"]) == usage["completion_tokens"]
    assert s["usage_chunk"] is None  # only with stream_options.include_usage
    assert s["order"][0] == ("open", 0) and s["order"][-1] == ("close", 0)


@pytest.mark.parametrize("n", [1, 2])
def test_stream_include_usage(http: httpx.Client, n: int) -> None:  # case 100
    r = chat(
        http,
        stream=True,
        stream_options={"include_usage": True},
        n=n,
        temperature=0.7 if n > 1 else 0,
        seed=3,
        max_tokens=6,
        ignore_eos=True,
    )
    s = check_stream(r, n)
    final = s["usage_chunk"]
    assert final is not None and final["choices"] == []
    per_choice = [s["closing"][i]["usage"]["completion_tokens"] for i in range(n)]
    assert per_choice == [6] * n
    u = final["usage"]
    assert u["completion_tokens"] == sum(per_choice)
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert len(u["batch_size"]) == len(u["queue_wait_time"]) == 6  # iterations of the longest choice


@pytest.mark.parametrize("extra", [{}, {"best_of": 2}], ids=["n2", "n2-best_of2"])
def test_stream_two_choices_open_and_close_once(http: httpx.Client, extra: dict[str, Any]) -> None:  # cases 51, 99
    """Both choices run to max_tokens here, so they close on the same engine step."""
    r = chat(http, stream=True, n=2, temperature=0.8, seed=5, max_tokens=6, ignore_eos=True, **extra)
    s = check_stream(r, 2)
    assert s["opening"] == {0: 1, 1: 1} and s["closings"] == {0: 1, 1: 1}
    assert all(s["closing"][i]["choices"][0]["finish_reason"] == "length" for i in (0, 1))


def test_stream_choice_that_finishes_early_closes_once(http: httpx.Client) -> None:  # case 99
    # With this seed, choice 0 ends with EOS after a few tokens while choice 1 runs to max_tokens.
    whole = ok(chat(http, n=2, temperature=0.8, seed=1, max_tokens=12))
    assert [c["finish_reason"] for c in whole["choices"]] == ["stop", "length"]  # the scenario holds
    s = check_stream(chat(http, stream=True, n=2, temperature=0.8, seed=1, max_tokens=12), 2)
    assert s["closings"] == {0: 1, 1: 1}


def test_beam_search_pseudo_stream(http: httpx.Client) -> None:  # cases 54, 5.5
    req = {"use_beam_search": True, "n": 2, "temperature": 0, "max_tokens": 8}
    whole = ok(chat(http, **req))
    assert [c["index"] for c in whole["choices"]] == [0, 1]
    s = check_stream(chat(http, stream=True, **req), 2)
    kinds = [kind for kind, _ in s["order"]]
    assert kinds.count("delta") == 0, "no delta chunks while beams are searched"
    assert s["opening"] == {0: 1, 1: 1} and s["closings"] == {0: 1, 1: 1}
    for i in (0, 1):
        closing = s["closing"][i]["choices"][0]
        assert closing["delta"]["content"] == text_of(whole, i) != ""  # the whole text in one closing chunk
        assert closing["finish_reason"] == whole["choices"][i]["finish_reason"]


# ---- a second server on the same service: perf_stats off, full_text on ----------------------------------------------


@pytest.fixture(scope="module")
def variant(settings: Any, service: Any) -> Iterator[httpx.Client]:
    with extra_server(settings, service, ui=False, perf_stats=False, full_text_enabled=True) as client:
        yield client


def test_perf_stats_off_omits_timing(variant: httpx.Client) -> None:  # case 95
    body = ok(chat(variant, temperature=0, max_tokens=4))
    assert not {"prefill_time", "decode_time_arr"} & set(body)
    assert not set(TIMING) & set(body["usage"])
    s = check_stream(chat(variant, temperature=0, max_tokens=4, stream=True, stream_options={"include_usage": True}))
    assert not set(TIMING) & set(s["closing"][0]["usage"]) and not set(TIMING) & set(s["usage_chunk"]["usage"])


def test_full_text_mode(http: httpx.Client, variant: httpx.Client) -> None:  # case 98, §5.4
    req = {"temperature": 0, "max_tokens": 12}
    expected = text_of(ok(chat(http, **req)))
    chunks = [c for c in sse_events(chat(variant, stream=True, **req).text)[:-1] if c["choices"]]
    texts = [c["choices"][0]["delta"]["content"] for c in chunks]
    for previous, current in zip(texts, texts[1:]):
        assert current.startswith(previous), (previous, current)
    assert texts[-1] == expected
    assert chunks[-1]["full_text"] == expected and chunks[-1]["choices"][0]["finish_reason"] is not None
    assert all("full_text" not in c for c in chunks[:-1])
