"""Logprobs through HTTP: shape, consistency with the chosen tokens, stream vs non-stream, per choice.

Spec §2.4.3, §4.4; conformance cases 55-56.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api_helpers import entries, ok, text_of
from tests.conftest import chat, sse_events

GREEDY = {"temperature": 0, "max_tokens": 16, "logprobs": True, "top_logprobs": 3}


@pytest.fixture(scope="module")
def greedy(live: Any) -> dict[str, Any]:
    with live.client() as http:
        body = ok(chat(http, **GREEDY))
    return {"body": body, "text": text_of(body), "tokens": [e["token"] for e in entries(body)]}


def check_entry(e: dict[str, Any], top_n: int) -> None:
    assert set(e) == {"token", "logprob", "bytes", "top_logprobs"}
    assert e["logprob"] <= 0 and isinstance(e["bytes"], list)
    if "\ufffd" not in e["token"]:
        assert bytes(e["bytes"]).decode("utf-8") == e["token"]
    assert len(e["top_logprobs"]) == top_n
    values = [t["logprob"] for t in e["top_logprobs"]]
    assert values == sorted(values, reverse=True)
    for t in e["top_logprobs"]:
        assert set(t) == {"token", "logprob", "bytes"}
        if "\ufffd" not in t["token"]:
            assert bytes(t["bytes"]).decode("utf-8") == t["token"]


def test_greedy_logprobs_are_consistent(greedy: dict[str, Any]) -> None:  # case 55
    body = greedy["body"]
    es = entries(body)
    assert len(es) == body["usage"]["completion_tokens"]
    for e in es:
        check_entry(e, 3)
        assert e["top_logprobs"][0]["token"] == e["token"]  # greedy picks the most likely token
        assert e["top_logprobs"][0]["logprob"] == pytest.approx(e["logprob"])
    assert "".join(greedy["tokens"]) == greedy["text"]


def test_sampled_logprobs_are_consistent(http: httpx.Client) -> None:
    body = ok(chat(http, temperature=1.5, seed=5, max_tokens=10, ignore_eos=True, top_logprobs=5))
    es = entries(body)
    assert len(es) == 10
    for e in es:
        check_entry(e, 5)
        assert e["logprob"] <= e["top_logprobs"][0]["logprob"] + 1e-6
        for t in e["top_logprobs"]:
            if t["token"] == e["token"] and t["bytes"] == e["bytes"]:
                assert t["logprob"] == pytest.approx(e["logprob"])


@pytest.mark.parametrize(
    ("req", "top_n"),
    [({"logprobs": True}, 0), ({"logprobs": True, "top_logprobs": 0}, 0), ({"top_logprobs": 2}, 2)],
    ids=["logprobs-alone", "top0", "top_logprobs-alone"],
)
def test_logprobs_forms(http: httpx.Client, req: dict[str, Any], top_n: int) -> None:  # case 56, §2.4.3
    body = ok(chat(http, temperature=0, max_tokens=4, ignore_eos=True, **req))
    es = entries(body)
    assert len(es) == 4
    for e in es:
        check_entry(e, top_n)


def test_no_logprobs_by_default(http: httpx.Client) -> None:
    assert ok(chat(http, temperature=0, max_tokens=2))["choices"][0]["logprobs"] is None


def test_stream_logprobs_equal_non_stream(http: httpx.Client, greedy: dict[str, Any]) -> None:
    r = chat(http, stream=True, **GREEDY)
    chunks = [c for c in sse_events(r.text)[:-1] if c["choices"]]
    streamed = [e for c in chunks if c["choices"][0]["logprobs"] for e in c["choices"][0]["logprobs"]["content"]]
    expected = entries(greedy["body"])
    assert [e["token"] for e in streamed] == [e["token"] for e in expected]
    assert [e["logprob"] for e in streamed] == pytest.approx([e["logprob"] for e in expected], abs=1e-4)


def test_logprobs_per_choice_with_n2(http: httpx.Client) -> None:
    body = ok(chat(http, n=2, temperature=0.9, seed=8, max_tokens=5, ignore_eos=True, top_logprobs=1))
    for i in (0, 1):
        assert len(entries(body, i)) == 5
        assert "".join(e["token"] for e in entries(body, i)) == text_of(body, i)


def test_beam_search_logprobs(http: httpx.Client) -> None:
    body = ok(chat(http, use_beam_search=True, n=2, max_tokens=4, ignore_eos=True, logprobs=True, top_logprobs=2))
    for i in (0, 1):
        es = body["choices"][i]["logprobs"]
        assert es is not None, "logprobs requested with beam search came back null"
        assert len(es["content"]) == 4
