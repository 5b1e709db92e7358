"""The engine loop on the real model: batching, chunked prefill, queue limit, abort and slot release."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import torch

from engine.core.engine import Engine, EngineLimits
from engine.core.kv import PAGE
from engine.core.types import EngineError, EngineRequest, SamplingParams


class Collector:
    def __init__(self) -> None:
        self.deltas: list[Any] = []
        self.errors: list[EngineError] = []
        self.done = threading.Event()
        self.first = threading.Event()

    def __call__(self, item: Any) -> None:
        if item is None:
            self.done.set()
        elif isinstance(item, EngineError):
            self.errors.append(item)
        else:
            self.deltas.extend(item)
            self.first.set()

    def batch_sizes(self) -> list[int]:
        return [b for d in self.deltas for b in d.batch_sizes]

    def tokens(self) -> int:
        return sum(len(d.token_ids) for d in self.deltas)


def pool_tokens(limits: EngineLimits) -> int:
    """KV pool of a test engine's own runner: its budget plus a partly filled last page per sequence (as app.py)."""
    return limits.kv_cache_tokens + PAGE * (limits.max_num_seqs + 1)


@pytest.fixture
def make_engine(service):
    engines: list[Engine] = []

    def make(**limits: Any) -> Engine:
        core = service.engine
        lim = EngineLimits(max_model_len=8192, **limits)
        e = Engine(core.runner.sibling(pool_tokens(lim)), core.tokenizer, set(core.eos_ids), lim)
        e.start()
        engines.append(e)
        return e

    yield make
    for e in engines:
        e.shutdown()


def prompt(service, text: str = "Tell me a story.") -> list[int]:
    return service.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)[
        "input_ids"
    ]


LONG = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)


def test_requests_arriving_together_run_together(service, make_engine) -> None:
    e = make_engine()
    a, b = Collector(), Collector()
    e.submit(EngineRequest("a", prompt(service), LONG), a)
    e.submit(EngineRequest("b", prompt(service, "Hi"), LONG), b)
    assert a.done.wait(120) and b.done.wait(120)
    assert a.tokens() == b.tokens() == 40
    assert 2 in a.batch_sizes() and 2 in b.batch_sizes()


def test_long_prompt_is_prefilled_in_chunks_while_a_stream_keeps_decoding(service, make_engine) -> None:
    e = make_engine(max_batched_tokens=64)
    running, long = Collector(), Collector()
    e.submit(
        EngineRequest("run", prompt(service), SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)), running
    )
    assert running.first.wait(60)
    long_prompt = prompt(service, "word " * 400)
    steps_before = e.steps
    e.submit(EngineRequest("long", long_prompt, SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)), long)
    assert long.done.wait(120) and running.done.wait(120)
    assert e.steps - steps_before >= len(long_prompt) // 64  # the prompt took several steps...
    assert running.batch_sizes().count(2) >= len(long_prompt) // 64 - 1  # ...each also decoding the stream


def test_queue_limit_refuses_instead_of_growing(service, make_engine) -> None:
    e = make_engine(max_queue=1)
    a = Collector()
    e.submit(EngineRequest("a", prompt(service), LONG), a)
    with pytest.raises(EngineError) as info:
        e.submit(EngineRequest("b", prompt(service), LONG), Collector())
    assert info.value.queue_full
    e.abort("a")
    assert a.done.wait(30)


def test_request_larger_than_the_kv_budget_is_refused(service, make_engine) -> None:
    e = make_engine(kv_cache_tokens=64)
    with pytest.raises(EngineError) as info:
        e.submit(EngineRequest("a", prompt(service), LONG), Collector())
    assert info.value.resources


def test_abort_frees_the_slot_within_a_step(service, make_engine) -> None:
    e = make_engine()
    a = Collector()
    e.submit(EngineRequest("a", prompt(service), SamplingParams(temperature=0, max_tokens=2000, ignore_eos=True)), a)
    assert a.first.wait(60)
    e.abort("a")
    assert a.done.wait(5)
    deadline = time.monotonic() + 5
    while e.load()["running"] and time.monotonic() < deadline:
        time.sleep(0.01)
    load = e.load()
    assert 1 <= load.pop("threads") <= torch.get_num_threads()  # the engine thread's team size now
    assert load | {"preemptions": 0} == {
        "waiting": 0,
        "running": 0,
        "running_seqs": 0,
        "kv_tokens_used": 0,
        "preemptions": 0,
    }
    assert a.tokens() < 2000


def test_client_disconnect_mid_stream_aborts_the_request(live) -> None:
    body = {
        "model": "SmolLM2-135M-Instruct",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": 2000,
        "ignore_eos": True,
        "temperature": 0,
    }
    with live.client() as http, http.stream("POST", "/v1/chat/completions", json=body) as resp:
        for line in resp.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break  # first real content chunk: hang up
    deadline = time.monotonic() + 10
    while live.service.engine.load()["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live.service.engine.load()["running"] == 0
    with live.client() as http:  # and the next request is served at once
        r = http.post("/v1/chat/completions", json={**body, "stream": False, "max_tokens": 2})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


def test_batched_requests_get_the_same_tokens_as_alone(service, make_engine) -> None:
    e = make_engine()
    prompts = [prompt(service, q) for q in ("Name a colour.", "Count to five.", "What is a cat?")]
    params = [
        SamplingParams(temperature=0, max_tokens=16),
        SamplingParams(temperature=0.9, seed=11, max_tokens=16),
        SamplingParams(temperature=0.7, top_k=20, seed=5, max_tokens=16),
    ]

    def run_alone(i: int) -> list[int]:
        c = Collector()
        e.submit(EngineRequest(f"alone{i}", prompts[i], params[i]), c)
        assert c.done.wait(120)
        return [t for d in c.deltas for t in d.token_ids]

    alone = [run_alone(i) for i in range(3)]
    together = [Collector() for _ in range(3)]
    for i, c in enumerate(together):
        e.submit(EngineRequest(f"together{i}", prompts[i], params[i]), c)
    assert all(c.done.wait(120) for c in together)
    assert any(b > 1 for c in together for b in c.batch_sizes())
    assert [[t for d in c.deltas for t in d.token_ids] for c in together] == alone


def test_preempted_requests_resume_with_identical_tokens(service, make_engine) -> None:
    prompts = [prompt(service, q) for q in ("Name a colour.", "Count to five.", "What is a cat?")]
    params = [
        SamplingParams(temperature=0, max_tokens=150, ignore_eos=True),
        SamplingParams(temperature=0.9, seed=11, max_tokens=150, ignore_eos=True),
        SamplingParams(temperature=0.7, top_k=20, seed=5, max_tokens=150, ignore_eos=True),
    ]
    # Room for one request to finish and two to start: the later ones must be preempted and resumed.
    budget = max(len(p) for p in prompts) + 150 + 2 * (max(len(p) for p in prompts) + 1 + 128)
    e = make_engine(kv_cache_tokens=budget)

    def run(tag: str, which: list[int]) -> list[list[int]]:
        cs = [Collector() for _ in which]
        for i, c in zip(which, cs):
            e.submit(EngineRequest(f"{tag}{i}", prompts[i], params[i]), c)
        assert all(c.done.wait(300) for c in cs)
        assert not any(c.errors for c in cs)
        return [[t for d in c.deltas for t in d.token_ids] for c in cs]

    alone = [run("alone", [i])[0] for i in range(3)]
    assert e.preemptions == 0
    together = run("together", [0, 1, 2])
    assert e.preemptions > 0
    assert together == alone
    assert e.load()["kv_tokens_used"] == 0
