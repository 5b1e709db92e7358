"""The engine loop: one thread owns the model, and every step schedules, runs one packed forward, samples and
hands each request its new tokens.

Requests join the running batch between steps and leave it the step they finish, each with its own sampling
parameters and seed (iteration-level batching). What runs in a step, and the KV budget it runs under, is the
scheduler's (scheduler.py, kv.py); the forward is the runner's (runner.py). Callers submit with a `sink` callable;
the engine calls it on its own thread with a list of ChoiceDelta, an EngineError, or None when the request is done.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any

import torch

from engine import device as devices
from engine.core.kv import PAGE, KVBudget, PagePool
from engine.core.prefix_cache import PrefixCache
from engine.core.roofline import Roofline
from engine.core.roofline import measure as measure_roofline
from engine.core.runner import Runner, Segment
from engine.core.sampler import Row, sample_rows
from engine.core.scheduler import Batch, RequestState, Scheduler
from engine.core.sequence import Sequence
from engine.core.speculative import verify
from engine.core.step_log import StepLog, StepRecord, short_id
from engine.core.threads import ThreadTuner
from engine.core.types import (
    FINISH_RESOURCES,
    FINISH_STOP,
    EngineError,
    EngineLimits,
    EngineRequest,
    PromptProgress,
    PromptTokenLogprob,
    RequestStats,
    Sink,
)
from engine.core.window_kv import WindowPages

log = logging.getLogger(__name__)


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
        self.kv = KVBudget(runner, limits.kv_cache_tokens, prefix_cache)
        self.scheduler = Scheduler(limits, self.kv, tokenizer, self.eos_ids)
        self.scheduler.speculative = bool(getattr(runner, "all_logits", False))  # HFRunner: no drafts
        self._lock = threading.Condition()
        self._incoming: deque[RequestState] = deque()
        self._aborts: set[str] = set()
        self._resets: list[Future[int]] = []  # prefix-cache resets asked for, done by the engine thread between steps
        self._active = 0  # submitted and not yet closed: what max_queue counts (under _lock)
        self._stop = False
        self._thread: threading.Thread | None = None
        self._seed_source = random.SystemRandom()
        self.steps = 0
        self.tuner: ThreadTuner | None = None  # made on the engine thread, whose team size it sets
        self._step_shape: Any = None  # what the last step ran, for the tuner: decode rows, or None with prompts
        # The scheduler x-ray (core/step_log.py): a record per step, the newest kept; its floor needs the roofline,
        # measured on the engine thread before its loop. limits.step_log = 0: no records, no measurement.
        self.step_log = StepLog(limits.step_log) if limits.step_log > 0 else None
        self.roofline: Roofline | None = None
        self._serial = 0  # requests submitted: their short ids
        self._measured = threading.Event()  # set once the engine thread has measured the roofline (or needs none)

    @property
    def preemptions(self) -> int:
        return self.scheduler.preemptions

    # ---- caller side (any thread) ----

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self._thread.start()
        # The roofline's bandwidth is measured on the engine thread before its loop: wait for it (~0.2 s), so that
        # what the caller does next (building the page, serving) does not share the cores with the measurement.
        self._measured.wait(timeout=10)

    def shutdown(self) -> None:
        with self._lock:
            self._stop = True
            self._lock.notify()
        if self._thread:
            self._thread.join(timeout=30)

    def load(self) -> dict[str, int]:
        """A read-only snapshot for metrics. `running_seqs` counts every live sequence (n, best_of, beams)."""
        with self._lock:
            running = list(self.scheduler.running)  # the engine thread edits it outside the lock: read a copy
            return {
                "waiting": len(self._incoming) + len(self.scheduler.waiting),
                "running": len(running),
                "running_seqs": sum(len(r.seqs) for r in running),
                "kv_tokens_used": self.kv.used,
                "preemptions": self.scheduler.preemptions,
                "threads": self.tuner.threads if self.tuner is not None else 0,
            }

    def snapshot(self) -> dict[str, Any]:
        """The live state for /server/state, /metrics and the page's Server tab: `load()` and a few counters of the
        KV pool and the prefix cache. Cheap enough to call every second per open page: the lock is held only for
        `load()`'s copy of the running list, and the rest reads integers and lengths (atomic reads in CPython)."""
        load = self.load()
        pool = getattr(self.runner, "pool", None)  # DecoderRunner's; HFRunner has no pages, only the token budget
        used, total = (
            (pool.total_pages - pool.free_pages, pool.total_pages) if isinstance(pool, PagePool) else (None, None)
        )
        kv = {
            "pages_used": used,
            "pages_total": total,
            "page_tokens": pool.page if isinstance(pool, PagePool) else PAGE,
            "tokens_used": load["kv_tokens_used"],
            "tokens_capacity": self.limits.kv_cache_tokens,
        }
        window = getattr(self.runner, "window", None)  # sliding-window layers' own pool (core/window_kv.py)
        if isinstance(window, WindowPages):
            kv |= {
                "window": window.window,
                "window_pages_used": window.pool.total_pages - window.pool.free_pages,
                "window_pages_total": window.pool.total_pages,
            }
        cache = self.prefix_cache
        prefix: dict[str, Any] = {"enabled": cache is not None and cache.capacity_blocks > 0}
        if cache is not None:
            prefix |= {
                "blocks": cache.blocks,
                "capacity_blocks": cache.capacity_blocks,
                "block_tokens": cache.block,
                "hit_tokens": cache.hits,
                "query_tokens": cache.queries,
                "hit_rate": cache.hits / cache.queries if cache.queries else 0.0,
                "lookups": cache.lookups,
                "hit_lookups": cache.hit_lookups,
                "resets": cache.resets,
            }
        requests = {k: load[k] for k in ("running", "waiting", "running_seqs")}
        log_ = self.step_log
        steps = {
            "enabled": log_ is not None,
            "capacity": log_.capacity if log_ else 0,
            "held": len(log_) if log_ else 0,
            "span_s": round(log_.span_s(), 3) if log_ else 0.0,
        }
        return {
            "requests": requests,
            "kv_cache": kv,
            "prefix_cache": prefix,
            "preemptions": load["preemptions"],
            "steps": self.steps,
            "threads": load["threads"],
            "step_log": steps,
            "roofline": self.roofline.as_json() if self.roofline is not None else None,
        }

    def reset_prefix_cache(self) -> Future[int]:
        """Empty the prefix cache; the future gives the blocks dropped (0 without a prefix cache). The engine thread
        does it between two steps, never during one; an engine whose thread is not running does it at once."""
        done: Future[int] = Future()
        with self._lock:
            if self._thread is not None and self._thread.is_alive() and not self._stop:
                self._resets.append(done)
                self._lock.notify()
                return done
        self._reset_prefix([done])
        return done

    def _reset_prefix(self, waiting: list[Future[int]]) -> None:
        dropped = self.prefix_cache.reset() if self.prefix_cache is not None and waiting else 0
        for i, f in enumerate(waiting):
            f.set_result(dropped if i == 0 else 0)  # the first reset emptied it; any other found it empty

    def submit(self, req: EngineRequest, sink: Sink) -> RequestStats:
        p = req.params
        if p.speculative is None:  # the server's default: greedy requests, whose tokens drafting cannot change
            k = self.limits.speculative_ngram if p.greedy else 0
        else:
            k = p.speculative
        if p.use_beam_search or not self.scheduler.speculative:
            k = 0
        if k != p.speculative:  # the engine's default resolved: the request's own copy says what runs
            req = dataclasses.replace(req, params=(p := dataclasses.replace(p, speculative=k)))
        cands = 1 if p.use_beam_search and p.num_candidates == 1 else p.num_candidates
        need = (len(req.prompt_ids) + p.max_tokens) * cands
        if need > self.limits.kv_cache_tokens or cands > self.limits.max_num_seqs:
            raise EngineError("request needs more KV cache than this server has", resources=True)
        seed = p.seed if p.seed is not None else self._seed_source.getrandbits(63)
        gen = torch.Generator(device=self.device if self.device.startswith("cuda") else "cpu")
        gen.manual_seed(seed)
        stats = RequestStats(prompt_tokens=len(req.prompt_ids), arrival=time.perf_counter())
        r = RequestState(req, sink, stats, gen)
        with self._lock:
            if self._stop:  # shut down (its model unloaded) while the request was prepared: nobody would run it
                raise EngineError("the model was unloaded or the server is shutting down", stopped=True)
            if self._active >= self.limits.max_queue:
                raise EngineError("the server is busy: request queue is full", queue_full=True)
            self._active += 1
            self._serial += 1
            r.short_id = stats.short_id = short_id(self._serial)
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
        tuner = self.tuner = ThreadTuner(enabled=self.limits.adaptive_threads and self.device == "cpu")
        try:
            if self.step_log is not None:
                self.roofline = measure_roofline(self.runner, self.device)
        finally:
            self._measured.set()
        with torch.inference_mode():
            self._run(tuner)

    def _run(self, tuner: ThreadTuner) -> None:
        while True:
            with self._lock:
                while (
                    not self._stop
                    and not self._incoming
                    and not self._aborts
                    and not self._resets
                    and not self.scheduler.has_work()
                ):
                    self._lock.wait()
                if self._stop:
                    break
                self.scheduler.waiting.extend(self._incoming)
                self._incoming.clear()
                aborts, self._aborts = self._aborts, set()
                resets, self._resets = self._resets, []
            for r in self.scheduler.abort(aborts):
                self._close(r)
            if resets:
                self._reset_prefix(resets)
            try:
                tuner.before_step()
                began = time.perf_counter()
                self._step_shape = None
                self.step()
                tuner.after_step(self._step_shape, time.perf_counter() - began)
            except Exception as exc:  # a bug in post-processing: fail what was running, keep serving
                log.exception("engine step failed")
                for r in list(self.scheduler.running):
                    self._finish_request(r, EngineError("generation failed: " + type(exc).__name__))
        with self._lock:
            pending = list(self.scheduler.running) + list(self.scheduler.waiting) + list(self._incoming)
            resets, self._resets = self._resets, []
        self._reset_prefix(resets)
        for r in pending:
            self._finish_request(r, EngineError("the model was unloaded or the server is shutting down", stopped=True))

    def step(self) -> None:
        """One iteration: schedule, run the forward, sample, hand out what it produced."""
        batch = self.scheduler.schedule()
        if batch is None:
            return
        self._step_shape = batch.decode_rows
        ran = self._forward(batch)
        if ran is None:
            return
        logits, stats = ran
        for r, seg, start in batch.prompt_rows:
            self._score_prompt(r, seg, start)
        self._progress(batch.chunked, stats["step_end"])
        self.scheduler.prompts_done(batch)
        for r, seqs, rows in batch.rows(logits):
            self._sample(r, seqs, rows, stats)
            self._postprocess(r)

    def _forward(self, batch: Batch) -> tuple[torch.Tensor, dict[str, Any]] | None:
        """The step's one forward: its logits, and the stats its tokens carry (None when it failed)."""
        t0 = time.perf_counter()
        try:
            logits = self.runner.forward(batch.segments)
            devices.synchronize(self.device)
        except Exception as exc:
            self._fail_step(exc, batch.in_step)
            return None
        t1 = time.perf_counter()
        self.steps += 1
        record = self._record(batch, t0, t1) if self.step_log is not None else None
        return logits, {
            "batch_size": len(batch.segments),
            "step_start": t0,
            "step_end": t1,
            "eos_ids": self.eos_ids,
            "step": record,
        }

    def _record(self, batch: Batch, t0: float, t1: float) -> StepRecord | None:
        """The step's record, kept in the step log; its tokens carry it. After the forward, each segment's cache
        length is the context its row attended over."""
        roof = self.roofline
        if roof is None or self.step_log is None:  # an engine stepped without its thread (tests)
            return None
        kv = roof.kv_bytes([seg.cache.length for seg in batch.segments])
        ms = (t1 - t0) * 1000
        floor = (roof.weight_bytes + kv) / roof.bandwidth * 1000
        record = StepRecord(
            self.steps,
            t0,
            ms,
            len(batch.segments),
            batch.decodes,
            batch.prompt_tokens,
            batch.prompt_chunks,
            tuple(r.short_id for r in batch.in_step),
            batch.preempted,
            batch.prefix_tokens,
            batch.prefix_tokens // (self.prefix_cache.block if self.prefix_cache else PAGE),
            roof.weight_bytes,
            kv,
            floor,
            100 * floor / ms if ms > 0 else 0.0,
        )
        self.step_log.add(record)
        return record

    @staticmethod
    def _score_prompt(r: RequestState, seg: Segment, start: int) -> None:
        """The logprobs of the prompt tokens a chunk's rows predict (row j, at position start + j, predicts the
        token at start + j + 1; the prompt's last row predicts the first output token, not scored here): each
        token's logprob, its rank (1 + the tokens more likely) and the k most likely tokens (vLLM's
        `prompt_logprobs`)."""
        rows, seg.prompt_rows = seg.prompt_rows, None
        prompt, k = r.req.prompt_ids, r.req.params.prompt_logprobs or 0
        entries = r.stats.prompt_logprobs
        if entries is None:
            entries = r.stats.prompt_logprobs = [None]  # the first token: nothing precedes it
        targets = prompt[start + 1 : start + 1 + len(seg.token_ids)]
        if rows is None or not targets:
            return
        lp = torch.log_softmax(rows[: len(targets)].float(), dim=-1)
        ids = torch.tensor(targets, device=lp.device)
        chosen = lp.gather(1, ids[:, None])
        ranks = (lp > chosen).sum(dim=1) + 1
        keep = r.req.params.prompt_rows_from
        if keep is not None and start + len(targets) >= keep:  # rows whose targets lie at `keep` or after
            r.stats.prompt_rows.append(lp[max(0, keep - start - 1) :].cpu())
        top = torch.topk(lp, k, dim=-1) if k else None
        for j, tok in enumerate(targets):
            best = list(zip(top.indices[j].tolist(), top.values[j].tolist())) if top is not None else []
            entries.append(PromptTokenLogprob(tok, float(chosen[j, 0]), int(ranks[j]), best))

    @staticmethod
    def _progress(chunked: list[RequestState], now: float) -> None:
        """Tell the requests that asked how far their prompt is, after each of its chunks (the first token, when
        the prompt completes in this step, follows in the same step)."""
        for r in chunked:
            if r.req.params.return_progress:
                r.sink(
                    PromptProgress(
                        total=len(r.req.prompt_ids),
                        cached=r.stats.cached_tokens,
                        processed=r.prefilled,
                        time_ms=(now - r.stats.arrival) * 1000,
                    )
                )

    def _sample(self, r: RequestState, seqs: list[Sequence], rows: torch.Tensor, stats: dict[str, Any]) -> None:
        """One token for each of a request's sequences from its logits rows: a beam step, or sampling (the first
        token of n > 1 candidates forks the prompt's cache), with constraints accepting what they allowed."""
        if r.beam is not None:
            r.seqs = r.beam.step(seqs, rows, self.kv.fork, self.kv.free, stats)
            return
        if len(r.seqs) == 1 and not r.seqs[0].output_ids and r.req.params.num_candidates > 1:
            first = r.seqs[0]
            r.seqs = [first] + [first.fork(i, self.kv.fork(first.cache)) for i in range(1, r.req.params.num_candidates)]
            seqs, rows = r.seqs, rows.expand(len(r.seqs), -1)
        if any(s.draft for s in seqs):
            self._verify(r, seqs, rows, stats)
            return
        picks = sample_rows(rows, [self._row(r, s) for s in seqs])
        for seq, (token, lp, entry) in zip(seqs, picks):
            constrained = seq.constraint is not None and not seq.thinking
            seq.append(token, lp, entry, **stats)
            if constrained and not seq.finished:
                seq.constraint.accept(token)
                if seq.constraint.finished():  # the grammar is complete: only EOS could follow
                    seq.finish(FINISH_STOP)

    def _verify(self, r: RequestState, seqs: list[Sequence], rows: torch.Tensor, stats: dict[str, Any]) -> None:
        """A step of a request with speculative drafts: each sequence's rows verified (core/speculative.py); one
        without drafts this step samples its one row as usual."""
        at = 0
        for s in seqs:
            draft, s.draft = s.draft, []
            mine, at = rows[at : at + 1 + len(draft)], at + 1 + len(draft)
            if draft:
                verify(mine, draft, s, functools.partial(self._row, r, s), stats)
                continue
            constrained = s.constraint is not None and not s.thinking
            token, lp, entry = sample_rows(mine, [self._row(r, s)])[0]
            s.append(token, lp, entry, **stats)
            if constrained and not s.finished:
                s.constraint.accept(token)
                if s.constraint.finished():
                    s.finish(FINISH_STOP)

    def _row(self, r: RequestState, s: Sequence) -> Row:
        forced = s.forced.pop(0) if s.forced else None
        mask = None
        if s.constraint is not None and not s.thinking and forced is None:
            mask = s.constraint.allowed(self.runner.vocab_size)
        return Row(s.params, r.generator, r.req.prompt_ids, s.output_ids, forced, mask)

    def _postprocess(self, r: RequestState) -> None:
        """After sampling: a beam search hands out its results once it ends, anything else its new tokens."""
        if r.beam is None:
            self._emit(r)
        elif not r.seqs:
            self._complete(r, r.beam.results())

    def _emit(self, r: RequestState) -> None:
        p = r.req.params
        if p.streams_live:
            deltas = [s.take_delta() for s in r.seqs if not s.closed and (s.pending.token_ids or s.finished)]
            for s in r.seqs:
                if s.finished and s.cache.length:
                    if s.index == 0:  # the next turn of this chat starts with this prompt and reply
                        self.kv.remember(r.req, r.req.prompt_ids + s.output_ids[:-1], s.cache)
                    self.kv.free(s.cache)
            if deltas:
                r.emitted = True
                r.sink(deltas)
            if all(s.finished for s in r.seqs):
                self._finish_request(r, None)
            return
        for s in [s for s in r.seqs if s.finished]:
            self.kv.free(s.cache)
            r.done_candidates.append(s)
        r.seqs = [s for s in r.seqs if not s.finished]
        if not r.seqs:
            best = sorted(r.done_candidates, key=lambda s: s.cumulative_logprob, reverse=True)[: p.n]
            for i, s in enumerate(best):
                s.index = s.pending.index = i
            self._complete(r, best)

    def _complete(self, r: RequestState, seqs: list[Sequence]) -> None:
        r.emitted = True
        r.sink([s.take_delta() for s in seqs])
        self._finish_request(r, None)

    def _finish_request(self, r: RequestState, error: EngineError | None) -> None:
        self.scheduler.finish(r)
        if error is not None:
            r.sink(error)
        self._close(r)

    def _close(self, r: RequestState) -> None:
        """The one place a request ends: it stops counting against max_queue and its consumer is told."""
        if r.closed:
            return
        r.closed = True
        with self._lock:
            self._active -= 1
        r.sink(None)

    def _fail_step(self, exc: Exception, in_step: list[RequestState]) -> None:
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
