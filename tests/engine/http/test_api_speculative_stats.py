"""Statistics under speculative decoding (issue 33, item 6): a step that yields k tokens of a request spreads its
time and its queue wait over them, each entry > 0, the step's entries summing to the step's time (and wait), so
MindIE clients that divide by `decode_time_arr` and `queue_wait_time` never divide by 0. The page's timeline keeps
the facts (a step's tokens share its ready time) and marks the drafted tokens as before."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from engine.serving.step_times import decode_times, queue_waits, spread
from tests.api_helpers import ok, user
from tests.conftest import MODEL, chat, sse_events

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

CODE = "def area(width, height):\n    result = width * height\n    return result\n"
REPEATING = [user(f"Rename `result` to `value` in this code and return the whole code:\n\n{CODE}")]
GREEDY = {"temperature": 0, "max_tokens": 40, "messages": REPEATING}


def test_spread_keeps_the_sum_and_every_entry_positive() -> None:
    assert spread(10, 3) == [4, 3, 3] and spread(1, 1) == [1]
    assert spread(2, 4) == [1, 1, 1, 1]  # a step shorter than k units: 1 each (documented)
    prefill, decode = decode_times([100.0, 140.0, 190.0, 190.0, 190.0, 230.0])
    assert prefill == 100 and decode == [40, 17, 17, 16, 40]
    assert queue_waits([1.0, 2.0, 2.0, 2.0], [800, 90, 0, 0]) == [800, 30, 30, 30]


def test_drafted_steps_have_no_zero_entries(http: httpx.Client) -> None:
    body = ok(chat(http, speculative=True, **GREEDY))
    usage = body["usage"]
    assert usage["speculative"]["accepted"] > 0
    tokens = usage["completion_tokens"]
    assert len(body["decode_time_arr"]) == tokens - 1 and min(body["decode_time_arr"]) > 0
    assert len(usage["queue_wait_time"]) == tokens and min(usage["queue_wait_time"]) > 0


def test_stream_usage_waits_are_spread_too(http: httpx.Client) -> None:
    r = chat(http, stream=True, speculative=True, stream_options={"include_usage": True}, **GREEDY)
    final = [e for e in sse_events(r.text) if isinstance(e, dict)][-1]
    assert final["usage"]["speculative"]["accepted"] > 0
    assert min(final["usage"]["queue_wait_time"]) > 0


def test_each_steps_entries_sum_to_its_time(service: Any) -> None:
    """In process: the timeline's facts (a step's tokens share its ready time; drafted ones marked) against the
    closing chunk's spread lists."""
    from engine.protocol.request import parse_chat_request

    req = parse_chat_request({"model": MODEL, "speculative": True, **GREEDY})

    async def run() -> tuple[list[float], list[int], list[int], Any]:
        gen = await service.start(req)
        times: list[float] = []
        waits: list[int] = []
        accepted: list[int] = []
        closing = None
        async for chunk in gen:
            if chunk.timeline is not None:
                accepted += [len(times) + i for i in chunk.timeline.accepted]
                times += chunk.timeline.token_times_ms
                waits += chunk.timeline.queue_waits_us
            if chunk.choices and chunk.choices[0].finish_reason is not None:
                closing = chunk
        return times, waits, accepted, closing

    times, waits, accepted, closing = asyncio.run(run())
    # the facts: an accepted draft shares its step's ready time with the token after it (the step's last token)
    assert accepted and all(i + 1 == len(times) or times[i + 1] == times[i] for i in accepted)
    assert 0 in waits[1:]  # ... and its wait went to the step's first token
    ms = [round(t) for t in times]
    decode = closing.decode_time_arr
    spread_waits = closing.usage.queue_wait_time
    assert min(decode) > 0 and min(spread_waits) > 0
    assert sum(decode) >= ms[-1] - ms[0] and sum(spread_waits) >= sum(waits)
    i = 1
    while i < len(times):  # step by step: equal sums (unless a step was shorter than its tokens in whole units)
        j = i
        while j + 1 < len(times) and times[j + 1] == times[i]:
            j += 1
        k = j - i + 1
        step_ms = ms[j] - ms[i - 1]
        if step_ms >= k:
            assert sum(decode[i - 1 : j]) == step_ms
        wait = sum(waits[i : j + 1])
        if wait >= k:
            assert sum(spread_waits[i : j + 1]) == wait
        i = j + 1
