"""Sampling properties on the real model: determinism, lengths, seeds under concurrency, stops, n/best_of/beam.
Spec §2.2, §2.4.2, §4.5; conformance cases 34, 37, 39, 41-42, 45, 47-48 (logprobs: test_api_logprobs.py).

Stop strings and stop tokens are derived from the greedy reply, so every expectation here is deterministic.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from tests.api_helpers import entries, ok, stream_text, text_of
from tests.conftest import MODEL, chat

GREEDY = {"temperature": 0, "max_tokens": 16}


@pytest.fixture(scope="module")
def greedy(live: Any) -> dict[str, Any]:
    """The greedy reply to "hi" with its tokens; it ends by EOS before 16 tokens (checked here)."""
    with live.client() as http:
        body = ok(chat(http, logprobs=True, top_logprobs=3, **GREEDY))
    tokens = [e["token"] for e in entries(body)]
    assert body["choices"][0]["finish_reason"] == "stop" and len(tokens) < GREEDY["max_tokens"]
    return {"body": body, "text": text_of(body), "tokens": tokens}


# ---- determinism and lengths --------------------------------------------------------------------------------------


def test_greedy_is_deterministic(http: httpx.Client, greedy: dict[str, Any]) -> None:  # case 34
    again = ok(chat(http, logprobs=True, top_logprobs=3, **GREEDY))
    assert text_of(again) == greedy["text"]
    assert [e["token"] for e in entries(again)] == greedy["tokens"]
    assert again["usage"]["completion_tokens"] == greedy["body"]["usage"]["completion_tokens"]


@pytest.mark.parametrize("max_tokens", [1, 7, 16])
def test_max_tokens_with_ignore_eos_is_exact(http: httpx.Client, greedy: dict[str, Any], max_tokens: int) -> None:
    body = ok(chat(http, temperature=0, max_tokens=max_tokens, ignore_eos=True, logprobs=True))
    assert body["usage"]["completion_tokens"] == max_tokens
    assert len(entries(body)) == max_tokens
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["choices"][0]["stop_reason"] is None
    # The greedy prefix is the same whether or not EOS is ignored (the greedy list ends with its EOS).
    same = min(max_tokens, len(greedy["tokens"]) - 1)
    assert [e["token"] for e in entries(body)][:same] == greedy["tokens"][:same]


def test_min_p_one_keeps_only_the_top_token_so_sampling_is_greedy(http: httpx.Client) -> None:
    """min_p (vLLM's extension) is relative to the top token: at 1 only the top token survives, so a hot, seeded
    sample gives the greedy reply; at 0 (off) the same seed wanders off it."""
    prompt = [{"role": "user", "content": "Write one sentence about the sea."}]
    want = text_of(ok(chat(http, messages=prompt, temperature=0, max_tokens=12)))
    hot = {"messages": prompt, "temperature": 1.8, "max_tokens": 12, "seed": 5}
    assert text_of(ok(chat(http, min_p=1.0, **hot))) == want
    assert text_of(ok(chat(http, min_p=0.0, **hot))) != want


def test_max_tokens_one_without_ignore_eos(http: httpx.Client) -> None:  # case 37
    body = ok(chat(http, temperature=0, max_tokens=1))
    assert body["usage"]["completion_tokens"] == 1 and body["choices"][0]["finish_reason"] == "length"


def test_max_completion_tokens_wins(http: httpx.Client) -> None:
    body = ok(chat(http, temperature=0, max_tokens=12, max_completion_tokens=3, ignore_eos=True))
    assert body["usage"]["completion_tokens"] == 3 and body["choices"][0]["finish_reason"] == "length"


# ---- seeds, also with another request in the same batch -------------------------------------------------------------

SEEDED = {"temperature": 1.0, "seed": 1234, "max_tokens": 10, "ignore_eos": True, "logprobs": True}


def test_seed_reproduces_while_another_request_runs(live: Any, http: httpx.Client) -> None:  # case 39
    alone = ok(chat(http, **SEEDED))
    other_seed = ok(chat(http, **{**SEEDED, "seed": 4321}))
    assert text_of(other_seed) != text_of(alone), "the seed must matter"

    started, errors, companion = threading.Event(), [], {}

    def run_companion() -> None:
        """A longer stream with another prompt and seed; signals once its first token has arrived."""
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Tell me a story about a cat."}],
            "temperature": 1.0,
            "seed": 99,
            "max_tokens": 48,
            "ignore_eos": True,
            "stream": True,
        }
        try:
            with live.client() as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
                for line in r.iter_lines():
                    if '"content":"' in line and '"content":""' not in line:
                        started.set()
                    if line:
                        companion["last"] = line
        except Exception as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            started.set()

    thread = threading.Thread(target=run_companion)
    thread.start()
    try:
        assert started.wait(60)
        beside = ok(chat(http, **SEEDED))
    finally:
        thread.join(120)
    assert not errors and companion["last"] == "data: [DONE]"
    assert max(beside["usage"]["batch_size"]) >= 2, "the seeded request shared its decode steps"
    assert text_of(beside) == text_of(alone)
    assert [e["token"] for e in entries(beside)] == [e["token"] for e in entries(alone)]


def test_two_identical_seeded_requests_together(live: Any) -> None:
    results: list[dict[str, Any]] = [{}, {}]

    def run(i: int) -> None:
        with live.client() as c:
            results[i] = chat(c, **SEEDED).json()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert text_of(results[0]) == text_of(results[1])
    assert max(results[0]["usage"]["batch_size"] + results[1]["usage"]["batch_size"]) >= 2


# ---- stop strings and stop tokens ---------------------------------------------------------------------------------


def boundary_stop(text: str, tokens: list[str]) -> tuple[str, int, int]:
    """A stop string made of the end of token k and the start of token k+1, first occurring exactly there.
    Returns (stop, its position in text, k)."""
    offset = 0
    for k, (a, b) in enumerate(zip(tokens, tokens[1:])):
        offset += len(a)
        if k == 0 or len(a) < 2 or not b:
            continue
        stop = a[-2:] + b[:2]
        pos = offset - 2
        if text.find(stop) == pos:
            return stop, pos, k
    raise AssertionError(f"no usable token boundary in {tokens!r}")


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
@pytest.mark.parametrize("include", [False, True], ids=["stop-excluded", "stop-included"])
def test_stop_string_across_token_boundary(
    http: httpx.Client, greedy: dict[str, Any], stream: bool, include: bool
) -> None:  # case 42
    text, tokens = greedy["text"], greedy["tokens"]
    stop, pos, k = boundary_stop(text, tokens)
    assert stop not in tokens[k] and stop not in tokens[k + 1]  # really split across two tokens
    r = chat(http, stop=["never-there-#", stop], include_stop_str_in_output=include, stream=stream, **GREEDY)
    expected = text[: pos + len(stop)] if include else text[:pos]
    if stream:
        got, choice = stream_text(r)
    else:
        body = ok(r)
        got, choice = text_of(body), body["choices"][0]
        assert body["usage"]["completion_tokens"] == k + 2  # generation ended with the token completing the stop
    assert got == expected
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_partial_stop_match_is_released_when_it_diverges(
    http: httpx.Client, greedy: dict[str, Any], stream: bool
) -> None:
    text, tokens = greedy["text"], greedy["tokens"]
    stop, pos, _ = boundary_stop(text, tokens)
    near_miss = stop + "\x07"  # matches as far as the text goes, then diverges
    r = chat(http, stop=near_miss, stream=stream, **GREEDY)
    if stream:
        got, choice = stream_text(r)
    else:
        got, choice = text_of(ok(r)), r.json()["choices"][0]
    assert got == text
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] is None  # ended by EOS, not the stop


def test_stop_inside_one_token(http: httpx.Client, greedy: dict[str, Any]) -> None:
    text, tokens = greedy["text"], greedy["tokens"]
    k = next(i for i, t in enumerate(tokens) if i > 0 and len(t.strip()) >= 4)
    stop = tokens[k].strip()[1:3]
    pos = text.find(stop)
    body = ok(chat(http, stop=stop, **GREEDY))
    assert text_of(body) == text[:pos]
    assert body["choices"][0]["stop_reason"] == stop


def stop_token(service: Any, tokens: list[str]) -> tuple[int, int]:
    """(k, id): the first reply token after position 0 that is one vocabulary id and did not occur before it."""
    tok = service.tokenizer
    for k, t in enumerate(tokens):
        ids = tok.encode(t, add_special_tokens=False)
        if k > 0 and t and len(ids) == 1 and tok.decode(ids) == t and t not in tokens[:k]:
            return k, ids[0]
    raise AssertionError(tokens)


@pytest.mark.parametrize(
    ("include", "extra_ids"),
    [(False, []), (True, []), (False, [99999999999, -1])],
    ids=["excluded", "included", "out-of-range-ignored"],
)
def test_stop_token_ids(
    http: httpx.Client, greedy: dict[str, Any], service: Any, include: bool, extra_ids: list[int]
) -> None:  # case 41
    tokens = greedy["tokens"]
    k, token_id = stop_token(service, tokens)
    body = ok(chat(http, stop_token_ids=[token_id, *extra_ids], include_stop_str_in_output=include, **GREEDY))
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == token_id
    assert text_of(body) == "".join(tokens[: k + 1] if include else tokens[:k])
    assert body["usage"]["completion_tokens"] == k + 1


# ---- n, best_of, beam search --------------------------------------------------------------------------------------

MULTI = [
    ("n2", {"n": 2, "temperature": 0.7}, 2),
    ("n2-default-temperature", {"n": 2}, 2),  # case 48
    ("n3-best_of5", {"n": 3, "best_of": 5, "temperature": 0.9}, 3),
    ("n1-best_of3", {"best_of": 3, "temperature": 0.9}, 1),
    ("beam-n3", {"use_beam_search": True, "n": 3, "temperature": 0}, 3),
    ("beam-best_of3", {"use_beam_search": True, "best_of": 3}, 1),
]


@pytest.mark.parametrize(("req", "n"), [m[1:] for m in MULTI], ids=[m[0] for m in MULTI])
def test_choice_counts_and_indices(http: httpx.Client, req: dict[str, Any], n: int) -> None:  # case 47
    body = ok(chat(http, seed=11, max_tokens=5, ignore_eos=True, **req))
    assert [c["index"] for c in body["choices"]] == list(range(n))
    assert all(c["finish_reason"] == "length" and c["message"]["content"] for c in body["choices"])
    assert body["usage"]["completion_tokens"] == 5 * n  # discarded best_of candidates are not counted
    if req.get("use_beam_search"):
        assert len({text_of(body, i) for i in range(n)}) == n, "beams are distinct"


def test_n2_usage_is_sum_of_choices(http: httpx.Client) -> None:  # case 47
    body = ok(chat(http, n=2, temperature=0.8, seed=1, max_tokens=12, logprobs=True))
    counts = [len(entries(body, i)) for i in (0, 1)]
    assert counts[0] != counts[1]  # choices of different lengths make the sum meaningful
    assert body["usage"]["completion_tokens"] == sum(counts)


def test_best_of_returns_the_most_likely_candidates(http: httpx.Client) -> None:
    body = ok(chat(http, n=2, best_of=5, temperature=1.2, seed=21, max_tokens=6, ignore_eos=True, logprobs=True))
    totals = [sum(e["logprob"] for e in entries(body, i)) for i in (0, 1)]
    assert totals[0] >= totals[1], "choices are sorted by cumulative logprob, best first"
    assert body["usage"]["completion_tokens"] == 12  # the three discarded candidates are not counted
