"""The scheduler x-ray (issue 19, point 6) on the real model: every token of a reply carries its step's record, whose
rows are that token's `usage.batch_size` entry and whose requests name the peers it shared the step with (short
anonymous ids); `GET /server/steps` lists the same records, guarded as /server/state; the ring is bounded; and
with the step log off there are no records at all."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from typing import Any

import httpx
import pytest

from engine.core.step_log import StepRecord
from engine.protocol.request import parse_chat_request
from playground.client.backend import LocalBackend
from tests.conftest import MODEL, extra_server
from tests.ops_helpers import served, small_service, wait_for

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

PROMPTS = ["Count from one to ten.", "Name three colours.", "What is the capital of France?"]


def idle(service: Any) -> None:
    wait_for(lambda: service.engine.load()["running"] == 0 and service.engine.load()["waiting"] == 0, 60, "idle")


async def reply(service: Any, prompt: str, **params: Any) -> dict[int, dict[str, Any]]:
    """One streamed request through the service, in-process: per choice its timelines' step records, its own
    short id and its closing usage."""
    if params.get("best_of"):  # a stream takes best_of == n only: ask for the whole answer at the end
        req = parse_chat_request(
            {"model": service.served_name, "messages": [{"role": "user", "content": prompt}], "stream": False, **params}
        )
    else:
        req = LocalBackend(service).request(prompt, **params)
    gen = await service.start(req)
    out: dict[int, dict[str, Any]] = {}
    async for chunk in gen:
        for c in chunk.choices:
            got = out.setdefault(c.index, {"steps": [], "short_id": None, "usage": None, "tokens": 0})
            if chunk.timeline is not None and len(chunk.choices) == 1:
                got["steps"] += chunk.timeline.steps
                got["tokens"] += len(chunk.timeline.token_ids)
                got["short_id"] = chunk.timeline.short_id or got["short_id"]
            if c.finish_reason is not None and chunk.usage is not None:
                got["usage"] = chunk.usage
        if not chunk.choices and chunk.usage is not None and len(out) == 1:
            out[0]["usage"] = out[0]["usage"] or chunk.usage
    return out


async def together(service: Any, **params: Any) -> list[dict[int, dict[str, Any]]]:
    return list(await asyncio.gather(*(reply(service, p, **params) for p in PROMPTS)))


def test_each_token_of_three_concurrent_replies_carries_its_step_and_its_peers(service: Any) -> None:
    idle(service)
    # Not drafted (greedy requests are, by default): a step per token is what this test follows.
    replies = asyncio.run(together(service, max_tokens=12, ignore_eos=True, temperature=0, speculative=False))
    ids = [r[0]["short_id"] for r in replies]
    assert all(isinstance(i, str) and i.startswith("r") for i in ids) and len(set(ids)) == 3, ids
    shared = 0
    for r, own in zip(replies, ids):
        c = r[0]
        steps: list[StepRecord] = c["steps"]
        assert len(steps) == c["tokens"] == 12 == len(c["usage"].batch_size)
        assert [s.rows for s in steps] == c["usage"].batch_size  # the x-ray's co-batched counts ARE usage's
        for s in steps:
            assert own in s.requests and len(set(s.requests)) == len(s.requests)
            assert set(s.requests) <= set(ids) and s.rows == s.decode_rows + s.prompt_chunks
            assert s.ms > 0 and s.floor_ms > 0 and s.pct == pytest.approx(100 * s.floor_ms / s.ms, rel=1e-6)
            assert s.weight_bytes > 0 and s.kv_bytes > 0
            shared += len(s.requests) > 1
        assert [s.step for s in steps] == sorted({s.step for s in steps})  # one step per token, in order
    assert shared > 0  # submitted together: at least some steps ran them side by side
    # the prompts ran in the step that made each first token (or before it), beside any decodes then
    assert all(r[0]["steps"][0].prompt_tokens > 0 for r in replies)
    # the three replies saw the very same record objects where they shared a step
    by_step = {}
    for r in replies:
        for s in r[0]["steps"]:
            assert by_step.setdefault(s.step, s) is s
    roof = service.engine.snapshot()["roofline"]
    assert roof["bandwidth_gbs"] > 0 and roof["weight_bytes"] > 0 and roof["kv_bytes_per_token"] > 0


@pytest.mark.parametrize(
    "params",
    [
        {"n": 2, "temperature": 0.9, "seed": 3},
        {"n": 1, "best_of": 3, "temperature": 0.9, "seed": 3},
        {"use_beam_search": True, "n": 2, "temperature": 0},
    ],
    ids=["n2", "best_of3", "beam"],
)
def test_several_candidates_keep_one_record_per_token(service: Any, params: dict[str, Any]) -> None:
    idle(service)
    choices = asyncio.run(reply(service, PROMPTS[1], max_tokens=6, **params))
    assert choices
    for c in choices.values():
        assert c["tokens"] > 0 and len(c["steps"]) == c["tokens"]
        if c["usage"] is not None:
            assert [s.rows for s in c["steps"]] == c["usage"].batch_size


def stream(url: str, prompt: str, headers: dict[str, str] | None = None) -> list[int]:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "stream": True,
        "max_tokens": 8,
        "ignore_eos": True,
        "temperature": 0,
        "stream_options": {"include_usage": True},
    }
    with (
        httpx.Client(base_url=url, timeout=120) as c,
        c.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r,
    ):
        assert r.status_code == 200
        usage = [
            json.loads(line[6:])["usage"]
            for line in r.iter_lines()
            if line.startswith("data: {") and '"usage":{' in line
        ]
    return usage[-1]["batch_size"]


def test_server_steps_lists_the_records_the_replies_ran_in(live: Any, service: Any) -> None:
    idle(service)
    before = service.engine.steps
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        sizes = list(pool.map(lambda p: stream(live.url, p), PROMPTS))
    with httpx.Client(base_url=live.url, timeout=60) as http:
        r = http.get("/server/steps", params={"seconds": 600})
        assert r.status_code == 200, r.text
        doc = r.json()
        assert doc["enabled"] and doc["capacity"] == 4096 and doc["roofline"]["bandwidth_gbs"] > 0
        mine = [s for s in doc["steps"] if s["step"] > before]
        assert len(mine) >= 8 and len(mine) == service.engine.steps - before
        for s in mine:
            assert s["rows"] == s["decode_rows"] + s["prompt_chunks"] >= len(s["requests"]) >= 1
            assert all(isinstance(i, str) and i.startswith("r") and "chatcmpl" not in i for i in s["requests"])
            assert s["age_ms"] >= 0 and s["pct"] == pytest.approx(100 * s["floor_ms"] / s["ms"], abs=0.02)
        # every batch size a reply's usage reported is the rows of one of the steps listed
        rows = {s["rows"] for s in mine}
        assert {b for one in sizes for b in one} <= rows
        assert max(len(s["requests"]) for s in mine) >= 2  # the three shared steps
        # since= gives what came after a step; a short window fewer
        later = http.get("/server/steps", params={"since": mine[-2]["step"]}).json()["steps"]
        assert [s["step"] for s in later] == [mine[-1]["step"]]
        assert http.get("/server/steps", params={"seconds": "abc"}).status_code == 422
        assert http.get("/server/steps", params={"seconds": "-1"}).status_code == 422
        assert "/server/steps" not in http.get("/openapi.json").text


def test_server_steps_takes_an_api_key_as_server_state_does(settings: Any, service: Any) -> None:
    with extra_server(settings, service, api_keys=["k-user"], admin_keys=["k-admin"]) as http:
        assert http.get("/server/steps").status_code == 401
        assert http.get("/server/state").status_code == 401
        assert http.get("/server/steps", headers={"Authorization": "Bearer wrong"}).status_code == 401
        for key in ("k-user", "k-admin"):
            r = http.get("/server/steps", headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 200 and r.json()["enabled"]


def test_the_ring_is_bounded_and_a_log_of_0_keeps_nothing(settings: Any, service: Any) -> None:
    with small_service(service, settings, step_log=8) as small:
        wait_for(lambda: small.engine.roofline is not None, 30, "the roofline")
        got = asyncio.run(reply(small, PROMPTS[0], max_tokens=20, ignore_eos=True, temperature=0))[0]
        assert len(got["steps"]) == 20  # each token still has its record
        assert len(small.engine.step_log) == 8 and small.engine.step_log.total >= 20
        assert [r.step for r in small.engine.step_log.records()] == list(
            range(small.engine.steps - 7, small.engine.steps + 1)
        )
    with small_service(service, settings, step_log=0) as off:
        got = asyncio.run(reply(off, PROMPTS[0], max_tokens=4, temperature=0))[0]
        assert got["steps"] == [] and got["tokens"] == 4 and off.engine.step_log is None
        assert off.engine.snapshot()["roofline"] is None
        with served(settings, off) as (http, _app):
            doc = http.get("/server/steps").json()
            assert doc["enabled"] is False and doc["steps"] == []
