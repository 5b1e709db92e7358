"""The engine loop: one thread owns the model; every step schedules, runs one packed forward, samples and
hands each request its new tokens.

Requests join the running batch between steps and leave it the step they finish, each with its own sampling
parameters and seed (iteration-level batching). Long prompts are prefilled in chunks under a per-step token
budget so streams already running keep getting tokens.

KV memory is a token budget. A single-sequence request holds only what it has used plus a growth margin; when
a growing sequence finds the budget spent, the newest running requests are preempted (recompute): their KV is
offered to the prefix cache and freed, and they go back to the head of the queue keeping their tokens, seed
generator and detokeniser, so when readmitted they prefill prompt + output and continue exactly where they
stopped. Requests with several candidates (n, best_of, beam search) reserve their whole KV at admission. Callers submit with a `sink` callable; the engine calls
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
from engine.core.kv import KV_GROW, KVCache
from engine.core.prefix_cache import PrefixCache
from engine.core.runner import Runner, Segment
from engine.core.sampler import Row, sample_rows
from engine.core.sequence import Sequence
from engine.core.threads import ThreadTuner
from engine.core.types import FINISH_RESOURCES, FINISH_STOP, ChoiceDelta, EngineError, EngineRequest, RequestStats

log = logging.getLogger(__name__)

Sink = Callable[[list[ChoiceDelta] | EngineError | None], None]


@dataclass
class EngineLimits:
    max_num_seqs: int = 32
    kv_cache_tokens: int = 65536
    max_queue: int = 64
    max_model_len: int = 2048
    max_batched_tokens: int = 256  # prompt tokens prefilled per step, beside the decodes
    adaptive_threads: bool = True  # CPU: fewer threads when another process slows the steps (core/threads.py)


@dataclass
class _Request:
    req: EngineRequest
    sink: Sink
    stats: RequestStats
    generator: torch.Generator
    kv_tokens: int = 0  # KV budget held now (all its caches together)
    seqs: list[Sequence] = field(default_factory=list)
    prefilled: int = 0  # tokens of `context` whose KV is in the cache
    recompute: list[int] | None = None  # after a preemption: prompt + output so far, to prefill again
    beam: BeamSearch | None = None
    done_candidates: list[Sequence] = field(default_factory=list)  # best_of > n: ranked at the end
    emitted: bool = False  # has handed out at least one token
    closed: bool = False  # its consumer has been told it ended

    @property
    def context(self) -> list[int]:
        return self.req.prompt_ids if self.recompute is None else self.recompute

    @property
    def prefill_done(self) -> bool:
        return self.prefilled >= len(self.context)

    @property
    def preemptible(self) -> bool:
        return self.req.params.num_candidates == 1 and not self.req.params.use_beam_search

    @property
    def final_tokens(self) -> int:
        """KV tokens one of its sequences can ever need."""
        return len(self.req.prompt_ids) + self.req.params.max_tokens

    def admission_tokens(self) -> int:
        if not self.preemptible:
            return self.final_tokens * self.req.params.num_candidates
        return min(self.final_tokens, len(self.context) + 1 + KV_GROW)


class Engine:
    def __init__(
        self,
        runner: Runner,
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
        self.preemptions = 0
        self.tuner: ThreadTuner | None = None  # made on the engine thread, whose team size it sets
        self._step_shape: Any = None  # what the last step ran, for the tuner: decode rows, or None with prompts

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
                "preemptions": self.preemptions,
                "threads": self.tuner.threads if self.tuner is not None else 0,
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
        r = _Request(req, sink, stats, gen)
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
        # Grad mode is per thread: the engine thread needs its own inference mode. So is OpenMP's team size, which
        # the tuner adapts to what the cores have free.
        self.tuner = ThreadTuner(enabled=self.limits.adaptive_threads and self.device == "cpu")
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
                self.tuner.before_step()
                began = time.perf_counter()
                self._step_shape = None
                self.step()
                self.tuner.after_step(self._step_shape, time.perf_counter() - began)
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
            cands, want = r.req.params.num_candidates, r.admission_tokens()
            if self._running and (
                live + cands > self.limits.max_num_seqs or self._kv_used + want > self.limits.kv_cache_tokens
            ):
                break  # first come, first served: nobody overtakes the head of the queue
            self._waiting.popleft()
            self._kv_used += want
            r.kv_tokens = want
            live += cands
            if r.seqs:  # back from a preemption: same sequence, new cache
                first = r.seqs[0]
                first.cache = KVCache()
            else:
                first = Sequence(0, r.req.params, self.tokenizer, KVCache(), r.stats.arrival)
                first.constraint = r.req.constraint
                r.seqs = [first]
            self.runner.reserve(first.cache, want // cands)
            if self.prefix_cache is not None and self._caches(r.req):
                chain = self.prefix_cache.match(r.context, r.req.cache_salt)
                first.cache.length = self.prefix_cache.load(chain, first.cache, self.runner.pages)
                r.prefilled = first.cache.length
                if r.recompute is None:
                    r.stats.cached_tokens = r.prefilled
            if r.req.params.use_beam_search:
                r.beam = BeamSearch(r.req.params.num_candidates, r.req.params.n, self.eos_ids)
            self._running.append(r)

    def _grow(self) -> None:
        """Give each decoding sequence room for this step's token, preempting the newest requests when the KV
        budget is spent. Oldest first, so the oldest requests keep running and everyone makes progress."""
        for r in list(self._running):
            if r not in self._running or not r.preemptible or not r.prefill_done:
                continue
            seq = r.seqs[0]
            if seq.finished or seq.cache.length + 1 <= r.kv_tokens:
                continue
            extra = min(r.final_tokens, r.kv_tokens + KV_GROW) - r.kv_tokens
            while r in self._running and self._kv_used + extra > self.limits.kv_cache_tokens:
                self._preempt([x for x in self._running if x.preemptible][-1])
            if r in self._running:
                r.kv_tokens += extra
                self._kv_used += extra
                self.runner.reserve(seq.cache, r.kv_tokens)

    def _preempt(self, r: _Request) -> None:
        seq = r.seqs[0]
        context = r.req.prompt_ids + seq.output_ids[:-1]
        if seq.cache.length:  # what it computed survives in the prefix cache while there is room
            self._remember(r.req, context, seq.cache)
        self._free_cache(seq.cache)
        self._running.remove(r)
        self._kv_used -= r.kv_tokens
        r.kv_tokens, r.prefilled = 0, 0
        r.recompute = context if seq.output_ids else None
        self._waiting.appendleft(r)
        self.preemptions += 1
        log.info("preempted %s after %d tokens (KV budget spent)", r.req.request_id, len(seq.output_ids))

    def step(self) -> None:
        self._admit()
        self._grow()
        if not self._running:
            return
        segments: list[Segment] = []
        plan: list[tuple[_Request, list[Sequence]]] = []  # requests whose rows come back, in order
        budget = self.limits.max_batched_tokens
        prefilled: list[_Request] = []  # requests whose prompt completes in this step
        in_step: list[_Request] = []  # requests whose caches this step writes
        prompting = False  # whether any prompt tokens run in this step
        for r in self._running:
            if r.prefill_done:
                live = [s for s in r.seqs if not s.finished]
                segments.extend(Segment(s.cache, [s.output_ids[-1]]) for s in live)
                plan.append((r, live))
                in_step.append(r)
            elif budget > 0:
                # Media embed in one forward with every placeholder: a multimodal prompt is prefilled whole.
                size = len(r.context) if r.req.mm is not None else budget
                chunk = r.context[r.prefilled : r.prefilled + size]
                budget -= len(chunk)
                r.prefilled += len(chunk)
                prompting = True
                resumed = r.recompute is not None  # its next token is already sampled: no logits wanted
                segments.append(Segment(r.seqs[0].cache, chunk, want_logits=r.prefill_done and not resumed,
                                        mm=r.req.mm))  # fmt: skip
                if r.prefill_done:
                    if not resumed:
                        plan.append((r, r.seqs[:1]))
                    prefilled.append(r)
                in_step.append(r)
        # Steps of decode rows only cost about the same from one to the next at a given batch: the tuner's yardstick.
        self._step_shape = None if prompting else len(segments)
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
            self._remember(r.req, r.context, r.seqs[0].cache)
            r.recompute = None
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
            picks = sample_rows(rows, [self._row(r, s) for s in seqs])
            for seq, (token, lp, entry) in zip(seqs, picks):
                constrained = seq.constraint is not None and not seq.thinking
                seq.append(token, lp, entry, **stats)
                if constrained and not seq.finished:
                    seq.constraint.accept(token)
                    if seq.constraint.finished():  # the grammar is complete: only EOS could follow
                        seq.finish(FINISH_STOP)
            self._emit(r)

    def _row(self, r: _Request, s: Sequence) -> Row:
        forced = s.forced.pop(0) if s.forced else None
        mask = None
        if s.constraint is not None and not s.thinking and forced is None:
            mask = s.constraint.allowed(self.runner.vocab_size)
        return Row(s.params, r.generator, r.req.prompt_ids, s.output_ids, forced, mask)

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

    def _caches(self, req: EngineRequest) -> bool:
        """Whether a request's KV goes through the prefix cache. Not for media prompts: pages hold no media
        digest beyond the salt and no M-RoPE delta, and prefill of a media prompt is never split anyway."""
        return self.prefix_cache is not None and self.runner.pages is not None and req.mm is None

    def _remember(self, req: EngineRequest, tokens: list[int], cache: KVCache) -> None:
        if self.prefix_cache is not None and self._caches(req):
            self.prefix_cache.store(tokens[: cache.length], cache, self.runner.pages, req.cache_salt)

    def _free_cache(self, cache: KVCache) -> None:
        self.runner.release(cache)

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
