"""The engine loop: one thread owns the model; every step schedules, runs one packed forward, samples and
hands each request its new tokens.

Requests join the running batch between steps and leave it the step they finish, each with its own sampling
parameters and seed (iteration-level batching). Long prompts are prefilled in chunks under a per-step token
budget so streams already running keep getting tokens. Callers submit with a `sink` callable; the engine calls
it on its own thread with a list of ChoiceDelta, an EngineError, or None when the request is done.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from engine import device as devices
from engine.core.beam import BeamSearch
from engine.core.model_runner import KVCache, Segment
from engine.core.prefix_cache import PrefixCache
from engine.core.sampler import Row, sample_rows
from engine.core.sequence import Sequence
from engine.core.types import FINISH_RESOURCES, ChoiceDelta, EngineError, EngineRequest, RequestStats

log = logging.getLogger(__name__)

Sink = Callable[[list[ChoiceDelta] | EngineError | None], None]


@dataclass
class EngineLimits:
    max_num_seqs: int = 32
    kv_cache_tokens: int = 65536
    max_queue: int = 64
    max_model_len: int = 2048
    max_batched_tokens: int = 256  # prompt tokens prefilled per step, beside the decodes


@dataclass
class _Request:
    req: EngineRequest
    sink: Sink
    stats: RequestStats
    generator: torch.Generator
    kv_tokens: int  # reserved KV budget
    seqs: list[Sequence] = field(default_factory=list)
    prefilled: int = 0
    beam: BeamSearch | None = None
    done_candidates: list[Sequence] = field(default_factory=list)  # best_of > n: ranked at the end
    emitted: bool = False  # has handed out at least one token
    closed: bool = False  # its consumer has been told it ended

    @property
    def prefill_done(self) -> bool:
        return self.prefilled >= len(self.req.prompt_ids)


class Engine:
    def __init__(
        self,
        runner: Any,
        tokenizer: Any,
        eos_ids: set[int],
        limits: EngineLimits,
        device: str = "cpu",
        prefix_cache: PrefixCache | None = None,
    ):
        self.runner = runner
        self.prefix_cache = prefix_cache
        self.tokenizer = tokenizer
        self.eos_ids = frozenset(eos_ids)
        self.limits = limits
        self.device = device
        self._lock = threading.Condition()
        self._incoming: deque[_Request] = deque()
        self._aborts: set[str] = set()
        self._waiting: deque[_Request] = deque()
        self._running: list[_Request] = []
        self._kv_used = 0
        self._active = 0  # submitted and not yet closed: what max_queue counts (under _lock)
        self._stop = False
        self._thread: threading.Thread | None = None
        self._seed_source = random.SystemRandom()
        self.steps = 0

    # ---- caller side (any thread) ----

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        with self._lock:
            self._stop = True
            self._lock.notify()
        if self._thread:
            self._thread.join(timeout=30)

    def load(self) -> dict[str, int]:
        """A read-only snapshot for metrics. `running_seqs` counts every live sequence (n, best_of, beams)."""
        with self._lock:
            running = list(self._running)  # the engine thread edits it outside the lock: read a copy
            return {
                "waiting": len(self._incoming) + len(self._waiting),
                "running": len(running),
                "running_seqs": sum(len(r.seqs) for r in running),
                "kv_tokens_used": self._kv_used,
            }

    def submit(self, req: EngineRequest, sink: Sink) -> RequestStats:
        p = req.params
        cands = 1 if p.use_beam_search and p.num_candidates == 1 else p.num_candidates
        need = (len(req.prompt_ids) + p.max_tokens) * cands
        if need > self.limits.kv_cache_tokens or cands > self.limits.max_num_seqs:
            raise EngineError("request needs more KV cache than this server has", resources=True)
        seed = p.seed if p.seed is not None else self._seed_source.getrandbits(63)
        gen = torch.Generator(device=self.device if self.device.startswith("cuda") else "cpu")
        gen.manual_seed(seed)
        stats = RequestStats(prompt_tokens=len(req.prompt_ids), arrival=time.perf_counter())
        r = _Request(req, sink, stats, gen, need)
        with self._lock:
            if self._active >= self.limits.max_queue:
                raise EngineError("the server is busy: request queue is full", queue_full=True)
            self._active += 1
            self._incoming.append(r)
            self._lock.notify()
        return stats

    def abort(self, request_id: str) -> None:
        with self._lock:
            self._aborts.add(request_id)
            self._lock.notify()

    # ---- engine thread ----

    def _loop(self) -> None:
        # Grad mode is per thread: the engine thread needs its own inference mode.
        with torch.inference_mode():
            self._run()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._stop and not self._incoming and not self._aborts and not self._has_work():
                    self._lock.wait()
                if self._stop:
                    break
                self._waiting.extend(self._incoming)
                self._incoming.clear()
                aborts, self._aborts = self._aborts, set()
            self._apply_aborts(aborts)
            try:
                self.step()
            except Exception as exc:  # a bug in post-processing: fail what was running, keep serving
                log.exception("engine step failed")
                for r in list(self._running):
                    self._finish_request(r, EngineError("generation failed: " + type(exc).__name__))
        with self._lock:
            pending = list(self._running) + list(self._waiting) + list(self._incoming)
        for r in pending:
            self._finish_request(r, EngineError("server is shutting down"))

    def _has_work(self) -> bool:
        return bool(self._running or self._waiting)

    def _apply_aborts(self, ids: set[str]) -> None:
        if not ids:
            return
        for r in [r for r in self._running if r.req.request_id in ids]:
            self._running.remove(r)
            self._release(r)
            self._close(r)
        for r in [r for r in self._waiting if r.req.request_id in ids]:
            self._waiting.remove(r)
            self._close(r)

    def _admit(self) -> None:
        live = sum(r.req.params.num_candidates for r in self._running)
        while self._waiting:
            r = self._waiting[0]
            cands = r.req.params.num_candidates
            if self._running and (
                live + cands > self.limits.max_num_seqs or self._kv_used + r.kv_tokens > self.limits.kv_cache_tokens
            ):
                break  # first come, first served: nobody overtakes the head of the queue
            self._waiting.popleft()
            self._kv_used += r.kv_tokens
            live += cands
            first = Sequence(0, r.req.params, self.tokenizer, KVCache(), r.stats.arrival)
            self.runner.reserve(first.cache, len(r.req.prompt_ids) + r.req.params.max_tokens)
            r.seqs = [first]
            if self.prefix_cache is not None and first.cache.k is not None:
                chain = self.prefix_cache.match(r.req.prompt_ids, r.req.cache_salt)
                first.cache.length = self.prefix_cache.load(chain, first.cache.k, first.cache.v)
                r.prefilled = r.stats.cached_tokens = first.cache.length
            if r.req.params.use_beam_search:
                r.beam = BeamSearch(r.req.params.num_candidates, r.req.params.n, self.eos_ids)
            self._running.append(r)

    def step(self) -> None:
        self._admit()
        if not self._running:
            return
        segments: list[Segment] = []
        plan: list[tuple[_Request, list[Sequence]]] = []  # requests whose rows come back, in order
        budget = self.limits.max_batched_tokens
        prefilled: list[_Request] = []  # requests whose prompt completes in this step
        in_step: list[_Request] = []  # requests whose caches this step writes
        for r in self._running:
            if r.prefill_done:
                live = [s for s in r.seqs if not s.finished]
                segments.extend(Segment(s.cache, [s.output_ids[-1]]) for s in live)
                plan.append((r, live))
                in_step.append(r)
            elif budget > 0:
                chunk = r.req.prompt_ids[r.prefilled : r.prefilled + budget]
                budget -= len(chunk)
                r.prefilled += len(chunk)
                segments.append(Segment(r.seqs[0].cache, chunk, want_logits=r.prefill_done))
                if r.prefill_done:
                    plan.append((r, r.seqs[:1]))
                    prefilled.append(r)
                in_step.append(r)
        t0 = time.perf_counter()
        try:
            logits = self.runner.forward(segments)
            devices.synchronize(self.device)
        except Exception as exc:
            self._fail_step(exc, in_step)
            return
        t1 = time.perf_counter()
        self.steps += 1
        for r in prefilled:
            self._remember(r.req, r.req.prompt_ids, r.seqs[0].cache)
        stats = {"batch_size": len(segments), "step_start": t0, "step_end": t1, "eos_ids": self.eos_ids}
        row = 0
        for r, seqs in plan:
            rows = logits[row : row + len(seqs)]
            row += len(seqs)
            if r.beam is not None:
                r.seqs = r.beam.step(seqs, rows, self.runner.fork, self._free_cache, stats)
                if not r.seqs:
                    self._complete(r, r.beam.results())
                continue
            if len(r.seqs) == 1 and not r.seqs[0].output_ids and r.req.params.num_candidates > 1:
                first = r.seqs[0]
                r.seqs = [first] + [
                    first.fork(i, self.runner.fork(first.cache)) for i in range(1, r.req.params.num_candidates)
                ]
                seqs, rows = r.seqs, rows.expand(len(r.seqs), -1)
            picks = sample_rows(rows, [Row(s.params, r.generator, r.req.prompt_ids, s.output_ids) for s in seqs])
            for seq, (token, lp, entry) in zip(seqs, picks):
                seq.append(token, lp, entry, **stats)
            self._emit(r)

    def _emit(self, r: _Request) -> None:
        p = r.req.params
        if p.streams_live:
            deltas = [s.take_delta() for s in r.seqs if not s.closed and (s.pending.token_ids or s.finished)]
            for s in r.seqs:
                if s.finished and s.cache.length:
                    if s.index == 0:  # the next turn of this chat starts with this prompt and reply
                        self._remember(r.req, r.req.prompt_ids + s.output_ids[:-1], s.cache)
                    self._free_cache(s.cache)
            if deltas:
                r.emitted = True
                r.sink(deltas)
            if all(s.finished for s in r.seqs):
                self._finish_request(r, None)
            return
        for s in [s for s in r.seqs if s.finished]:
            self._free_cache(s.cache)
            r.done_candidates.append(s)
        r.seqs = [s for s in r.seqs if not s.finished]
        if not r.seqs:
            best = sorted(r.done_candidates, key=lambda s: s.cumulative_logprob, reverse=True)[: p.n]
            for i, s in enumerate(best):
                s.index = s.pending.index = i
            self._complete(r, best)

    def _complete(self, r: _Request, seqs: list[Sequence]) -> None:
        r.emitted = True
        r.sink([s.take_delta() for s in seqs])
        self._finish_request(r, None)

    def _finish_request(self, r: _Request, error: EngineError | None) -> None:
        if r in self._running:
            self._running.remove(r)
        self._release(r)
        if error is not None:
            r.sink(error)
        self._close(r)

    def _close(self, r: _Request) -> None:
        """The one place a request ends: it stops counting against max_queue and its consumer is told."""
        if r.closed:
            return
        r.closed = True
        with self._lock:
            self._active -= 1
        r.sink(None)

    def _release(self, r: _Request) -> None:
        for s in r.seqs + r.done_candidates:
            self._free_cache(s.cache)
        r.seqs, r.done_candidates = [], []
        self._kv_used -= r.kv_tokens
        r.kv_tokens = 0

    def _remember(self, req: EngineRequest, tokens: list[int], cache: KVCache) -> None:
        if self.prefix_cache is not None and cache.k is not None:
            self.prefix_cache.store(tokens[: cache.length], cache.k, cache.v, req.cache_salt)

    def _free_cache(self, cache: KVCache) -> None:
        cache.k = cache.v = cache.hf = None
        cache.length = 0

    def _fail_step(self, exc: Exception, in_step: list[_Request]) -> None:
        """The forward failed: end the requests it was writing (their caches are now unusable), keep the rest."""
        oom = devices.is_out_of_memory(exc)
        if oom:
            log.error("out of memory in the engine step; ending the batch's requests (%s)", type(exc).__name__)
            devices.empty_cache(self.device)
        else:
            log.exception("engine forward failed")
        for r in in_step:
            if oom and r.emitted and r.req.params.streams_live:
                for s in r.seqs:
                    if not s.finished:
                        s.finish(FINISH_RESOURCES)
                self._emit(r)
            else:
                self._finish_request(r, EngineError("generation failed: " + type(exc).__name__, resources=oom))
