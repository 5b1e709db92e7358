"""vLLM's `prompt_logprobs` (issue 33, item 3) on the chat route: a top-level list as long as the prompt, the first
entry null, then {token id: {logprob, rank, decoded_token}} holding the prompt's own token and up to k others,
computed in the prefill; a request that asks bypasses the prefix cache, whose tokens would have no logits. The
completions route's per-choice lists are checked in tests/engine/http/test_api_completions.py."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from tests.api_helpers import assert_422, ok, user
from tests.conftest import chat, sse_events

PROMPT = [user("Name three colours of the rainbow, please.")]


def check_entries(entries: list[Any], prompt_tokens: int, k: int) -> None:
    assert len(entries) == prompt_tokens and entries[0] is None
    for entry in entries[1:]:
        assert 1 <= len(entry) <= k + 1
        actual_id, actual = next(iter(entry.items()))  # the prompt's own token first
        assert actual_id.isdigit() and set(actual) == {"logprob", "rank", "decoded_token"}
        assert actual["logprob"] <= 0 and actual["rank"] >= 1 and isinstance(actual["decoded_token"], str)
        others = sorted(v["rank"] for key, v in entry.items() if key != actual_id)
        assert len(entry) == (k if actual["rank"] <= k else k + 1)  # the actual token is among the top k, or extra
        if actual["rank"] <= k:
            assert sorted([*others, actual["rank"]]) == list(range(1, k + 1))
        else:
            assert others == list(range(1, k + 1))
            assert all(v["logprob"] >= actual["logprob"] for v in entry.values())


def test_chat_prompt_logprobs_cover_the_prompt(http: httpx.Client) -> None:
    body = ok(chat(http, messages=PROMPT, max_tokens=2, temperature=0, prompt_logprobs=3))
    check_entries(body["prompt_logprobs"], body["usage"]["prompt_tokens"], 3)
    best = [max(e.values(), key=lambda v: v["logprob"]) for e in body["prompt_logprobs"][1:]]
    assert all(b["rank"] == 1 for b in best)  # the most likely token is rank 1
    total = sum(math.exp(v["logprob"]) for v in body["prompt_logprobs"][1].values())
    assert total <= 1.0 + 1e-4


def test_zero_gives_the_prompt_tokens_alone_and_absent_gives_null(http: httpx.Client) -> None:
    body = ok(chat(http, messages=PROMPT, max_tokens=1, prompt_logprobs=0))
    check_entries(body["prompt_logprobs"], body["usage"]["prompt_tokens"], 0)
    assert all(len(e) == 1 for e in body["prompt_logprobs"][1:])
    assert ok(chat(http, messages=PROMPT, max_tokens=1))["prompt_logprobs"] is None


def test_the_prefix_cache_does_not_swallow_the_prompts_logits(http: httpx.Client) -> None:
    """The same prompt twice: the second would find its prefix cached; it computes every token all the same."""
    first = ok(chat(http, messages=PROMPT, max_tokens=1, temperature=0, prompt_logprobs=1))
    again = ok(chat(http, messages=PROMPT, max_tokens=1, temperature=0, prompt_logprobs=1))
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert [None if e is None else sorted(e) for e in again["prompt_logprobs"]] == [
        None if e is None else sorted(e) for e in first["prompt_logprobs"]
    ]
    for a, b in zip(first["prompt_logprobs"][1:], again["prompt_logprobs"][1:]):
        for key in a:
            assert a[key]["logprob"] == pytest.approx(b[key]["logprob"], abs=1e-3)


def test_stream_carries_them_once(http: httpx.Client) -> None:
    r = chat(http, messages=PROMPT, max_tokens=3, stream=True, prompt_logprobs=2)
    events = [e for e in sse_events(r.text) if isinstance(e, dict)]
    carrying = [e for e in events if "prompt_logprobs" in e]
    assert len(carrying) == 1 and carrying[0]["choices"]
    plain = ok(chat(http, messages=PROMPT, max_tokens=1, prompt_logprobs=2))
    check_entries(carrying[0]["prompt_logprobs"], plain["usage"]["prompt_tokens"], 2)


@pytest.mark.parametrize("value", [21, -1, "2", 1.5, True])
def test_out_of_range_or_wrong_type_is_422(http: httpx.Client, value: Any) -> None:
    assert_422(chat(http, messages=PROMPT, max_tokens=1, prompt_logprobs=value), "prompt_logprobs")


def test_a_prompt_prefilled_in_chunks_is_scored_whole(http: httpx.Client) -> None:
    long = [user("Count with me: " + " ".join(str(i) for i in range(160)))]  # > 256 tokens: several prefill chunks
    body = ok(chat(http, messages=long, max_tokens=1, temperature=0, prompt_logprobs=1))
    assert body["usage"]["prompt_tokens"] > 300
    check_entries(body["prompt_logprobs"], body["usage"]["prompt_tokens"], 1)
    counted = [e for e in body["prompt_logprobs"][100:300] if e is not None]
    assert sum(next(iter(e.values()))["rank"] == 1 for e in counted) > 100  # counting is easy to predict


@pytest.mark.parametrize("runner_kind", ["lean", "hf"])
def test_runners_leave_every_prompt_tokens_logits(runner_kind: str) -> None:
    """Both runners, a prompt in two chunks beside a decoding sequence: the chunk's rows (`prompt_rows`) are the HF
    forward's logits at each of its positions, and forward() returns the same rows as without them."""
    import torch

    from engine.core.hf_runner import HFRunner
    from engine.core.kv import KVCache
    from engine.core.model_runner import make_runner
    from engine.core.runner import Segment
    from tests.family_fixture import tiny_model

    model = tiny_model("llama")
    runner = make_runner(model, "cpu") if runner_kind == "lean" else HFRunner(model, "cpu")
    assert isinstance(runner, HFRunner) == (runner_kind == "hf")
    prompt, other = [5, 17, 42, 8, 99, 3, 77], [11, 12, 13]
    with torch.inference_mode():
        full = model(torch.tensor([prompt])).logits[0].float()
        side = KVCache()
        runner.forward([Segment(side, other)])
        mine = KVCache()
        first = Segment(mine, prompt[:4], want_logits=False, prompt_logits=True)
        out = runner.forward([first, Segment(side, [14])])
        assert out.shape[0] == 1  # the decode row only: the prompt rows ride beside
        last = Segment(mine, prompt[4:], prompt_logits=True)
        out = runner.forward([Segment(side, [15]), last])
        assert out.shape[0] == 2
    torch.testing.assert_close(first.prompt_rows, full[:4], atol=1e-4, rtol=0)
    torch.testing.assert_close(last.prompt_rows, full[4:], atol=1e-4, rtol=0)
    torch.testing.assert_close(out[1], full[-1], atol=1e-4, rtol=0)


def test_media_prompts_refuse_prompt_logprobs(vl_live: Any) -> None:
    """A media prompt is prefilled whole, so its every row's logits would be one tensor of prompt x vocabulary:
    refused with a clear 422, and the same request without the field is served."""
    from tests import media_samples as ms
    from tests.conftest import VL

    image = {"type": "image_url", "image_url": {"url": ms.data_url("image/png", ms.image_bytes("PNG"))}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]
    with vl_live.client() as http:
        body = {"model": VL, "messages": messages, "max_tokens": 1}
        assert_422(http.post("/v1/chat/completions", json={**body, "prompt_logprobs": 1}), "prompt_logprobs", "media")
        ok(http.post("/v1/chat/completions", json=body))
