"""What runs in each engine step: admission, KV growth and preemption, and the step's segments.

Requests join the running batch between steps (first come, first served: nobody overtakes the head of the queue)
and leave it the step they finish. Each step every running request with its prompt done contributes one token per
live sequence, and requests still prefilling share a per-step token budget, so long prompts go in chunks and
streams already running keep getting tokens.

KV memory is a token budget (kv.KVBudget), which a padded batch's padding counts against too (HFRunner's cohort: a
request is admitted with the padding its row would add). A single-sequence request holds only what it has used plus
a growth margin; when a growing sequence finds the budget spent, the newest running requests are preempted
(recompute): their KV is offered to the prefix cache and freed, and they go back to the head of the queue keeping
their tokens, seed generator and detokeniser, so when readmitted they prefill prompt + output and continue exactly
where they stopped. Requests with several candidates (n, best_of, beam search) reserve their whole KV at admission.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.core.beam import BeamSearch
from engine.core.kv import KV_GROW, KVBudget, KVCache
from engine.core.runner import Segment
from engine.core.sequence import Sequence
from engine.core.speculative import STEP_ROWS, draft_for
from engine.core.types import EngineLimits, EngineRequest, RequestStats, Sink

log = logging.getLogger(__name__)


@dataclass
class RequestState:
    """One request inside the engine, from submission to its end."""

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
    short_id: str = ""  # anonymous id in the step records (engine/core/step_log.py), from the engine's counter

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


@dataclass
class Batch:
    """One step's work: the segments of its forward, and whose logits rows come back in which order."""

    segments: list[Segment] = field(default_factory=list)
    plan: list[tuple[RequestState, list[Sequence]]] = field(default_factory=list)  # one row per sequence, in order
    prefilled: list[RequestState] = field(default_factory=list)  # requests whose prompt completes in this step
    in_step: list[RequestState] = field(default_factory=list)  # requests whose caches this step writes
    chunked: list[RequestState] = field(default_factory=list)  # requests that ran a chunk of their own prompt
    prompted: list[RequestState] = field(default_factory=list)  # requests that ran a prompt chunk, resumed ones too
    prompting: bool = False  # whether any prompt tokens run in this step
    # For the step's record (engine/core/step_log.py): decode rows, prompt tokens and chunks beside them, and what
    # scheduling it did: requests preempted, prefix-cache tokens loaded for the requests it admitted.
    decodes: int = 0
    prompt_tokens: int = 0
    prompt_chunks: int = 0
    preempted: int = 0
    prefix_tokens: int = 0
    drafted: int = 0  # speculative draft tokens in the decode segments (core/speculative.py)
    # Prompt chunks whose every token's logits were asked for (`prompt_logprobs`): request, segment, first position.
    prompt_rows: list[tuple[RequestState, Segment, int]] = field(default_factory=list)

    @property
    def decode_rows(self) -> int | None:
        """The thread tuner's yardstick: steps of decode rows only cost about the same from one to the next at a
        given batch. None when prompt tokens run too."""
        return None if self.prompting or self.drafted else len(self.segments)

    def rows(self, logits: torch.Tensor) -> Iterator[tuple[RequestState, list[Sequence], torch.Tensor]]:
        """Each planned request with its sequences and their logits rows."""
        row = 0
        for r, seqs in self.plan:
            n = sum(1 + len(s.draft) for s in seqs) if self.drafted else len(seqs)  # drafts: a row per token
            yield r, seqs, logits[row : row + n]
            row += n


class Scheduler:
    def __init__(self, limits: EngineLimits, kv: KVBudget, tokenizer: Any, eos_ids: frozenset[int]) -> None:
        self.limits = limits
        self.kv = kv
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.waiting: deque[RequestState] = deque()
        self.running: list[RequestState] = []
        self.preemptions = 0
        self._prefix_loaded = 0  # prefix-cache tokens loaded by this schedule() call's admissions
        self.speculative = False  # the runner returns a row per token of a drafted segment (the engine sets it)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def schedule(self) -> Batch | None:
        """Admit, grow, and plan this step's segments; None when nothing runs."""
        preempted, self._prefix_loaded = self.preemptions, 0
        self._admit()
        self._grow()
        if not self.running:
            return None
        batch = Batch(preempted=self.preemptions - preempted, prefix_tokens=self._prefix_loaded)
        budget = self.limits.max_batched_tokens
        # Drafts ride along while the step is small: they fill it up to STEP_ROWS rows (speculative.py).
        drafts = STEP_ROWS - sum(sum(not s.finished for s in r.seqs) for r in self.running if r.prefill_done)
        for r in self.running:
            if r.prefill_done:
                live = [s for s in r.seqs if not s.finished]
                if self.speculative and r.beam is None and r.req.params.speculative:
                    drafts -= self._draft(r, live, batch, drafts)
                batch.segments.extend(
                    Segment(s.cache, [s.output_ids[-1], *s.draft], adapter=r.req.adapter, all_logits=bool(s.draft))
                    for s in live
                )
                batch.decodes += len(live)
                batch.plan.append((r, live))
                batch.in_step.append(r)
            elif budget > 0:
                # Media embed in one forward with every placeholder: a multimodal prompt is prefilled whole.
                size = len(r.context) if r.req.mm is not None else budget
                chunk = r.context[r.prefilled : r.prefilled + size]
                budget -= len(chunk)
                r.prefilled += len(chunk)
                batch.prompt_tokens += len(chunk)
                batch.prompt_chunks += 1
                batch.prompting = True
                batch.prompted.append(r)
                resumed = r.recompute is not None  # its next token is already sampled: no logits wanted
                scored = r.req.params.prompt_logprobs is not None and not resumed
                want = r.prefill_done and not resumed
                seg = Segment(r.seqs[0].cache, chunk, want, mm=r.req.mm, adapter=r.req.adapter, prompt_logits=scored)
                batch.segments.append(seg)
                if scored:
                    batch.prompt_rows.append((r, seg, r.prefilled - len(chunk)))
                if r.prefill_done:
                    if not resumed:
                        batch.plan.append((r, r.seqs[:1]))
                    batch.prefilled.append(r)
                if not resumed:
                    batch.chunked.append(r)
                batch.in_step.append(r)
        return batch

    def _draft(self, r: RequestState, live: list[Sequence], batch: Batch, budget: int) -> int:
        """Each live sequence's n-gram drafts for this step, within its KV budget, its max_tokens and the step's
        `budget` of draft rows; returns how many it drafted."""
        k = r.req.params.speculative or 0
        made = 0
        for s in live:
            room = min(r.req.params.max_tokens - len(s.output_ids) - 1, budget - made)
            if r.preemptible:  # the budget _grow granted; a request with candidates reserved its final size
                room = min(room, r.kv_tokens - s.cache.length - 1)
            s.draft = draft_for(s, r.req.prompt_ids, k, room, self.kv.runner.vocab_size)
            made += len(s.draft)
        batch.drafted += made
        return made

    def prompts_done(self, batch: Batch) -> None:
        """After the forward: prompts completed in it go to the prefix cache, a recomputed one is whole again.
        Where the runner gives pages back while a prompt prefills (a sliding window), so does every chunk's prompt
        so far, while its pages are all there."""
        if self.kv.drops:
            for r in batch.prompted:
                if r not in batch.prefilled:
                    self.kv.remember(r.req, r.context, r.seqs[0].cache)
        for r in batch.prefilled:
            self.kv.remember(r.req, r.context, r.seqs[0].cache)
            r.recompute = None

    def abort(self, ids: set[str]) -> list[RequestState]:
        """Take the requests with these ids out of the batch and the queue (their KV freed); returns them."""
        if not ids:
            return []
        running = [r for r in self.running if r.req.request_id in ids]
        for r in running:
            self.finish(r)
        waiting = [r for r in self.waiting if r.req.request_id in ids]
        for r in waiting:
            self.waiting.remove(r)
        return running + waiting

    def finish(self, r: RequestState) -> None:
        """A request leaves the batch: its caches are freed and its budget handed back."""
        if r in self.running:
            self.running.remove(r)
        for s in r.seqs + r.done_candidates:
            self.kv.free(s.cache)
        r.seqs, r.done_candidates = [], []
        self.kv.refund(r.kv_tokens)
        r.kv_tokens = 0

    def _admit(self) -> None:
        live = sum(r.req.params.num_candidates for r in self.running)
        while self.waiting:
            r = self.waiting[0]
            cands, want = r.req.params.num_candidates, r.admission_tokens()
            padded = want + cands * self.kv.runner.join_padding(len(r.context))  # a padded batch's rows (HFRunner)
            if self.running and (live + cands > self.limits.max_num_seqs or not self.kv.fits(padded)):
                break  # first come, first served: nobody overtakes the head of the queue
            self.waiting.popleft()
            self.kv.grant(want)
            r.kv_tokens = want
            live += cands
            if r.seqs:  # back from a preemption: same sequence, new cache
                first = r.seqs[0]
                first.cache = KVCache()
            else:
                first = Sequence(0, r.req.params, self.tokenizer, KVCache(), r.stats.arrival)
                first.constraint = r.req.constraint
                r.seqs = [first]
            self.kv.reserve(first.cache, want // cands)
            # A request that asks for its prompt's logprobs computes every prompt token: a cached prefix would skip
            # the logits of the tokens it holds (it still leaves its prompt to the cache for others).
            scored = r.req.params.prompt_logprobs is not None and r.recompute is None
            loaded = None if scored else self.kv.load_prefix(r.req, r.context, first.cache)
            if loaded is not None:
                self._prefix_loaded += loaded
                first.cache.length = loaded
                r.prefilled = loaded
                if r.recompute is None:
                    r.stats.cached_tokens = r.prefilled
            if r.req.params.use_beam_search:
                r.beam = BeamSearch(r.req.params.num_candidates, r.req.params.n, self.eos_ids)
            self.running.append(r)

    def _grow(self) -> None:
        """Give each decoding sequence room for this step's token, preempting the newest requests when the KV
        budget is spent. Oldest first, so the oldest requests keep running and everyone makes progress."""
        for r in list(self.running):
            if r not in self.running or not r.preemptible or not r.prefill_done:
                continue
            seq = r.seqs[0]
            if seq.finished or seq.cache.length + 1 <= r.kv_tokens:
                continue
            extra = min(r.final_tokens, r.kv_tokens + KV_GROW) - r.kv_tokens
            while r in self.running and not self.kv.fits(extra):
                self._preempt([x for x in self.running if x.preemptible][-1])
            if r in self.running:
                r.kv_tokens += extra
                self.kv.grant(extra)
                self.kv.reserve(seq.cache, r.kv_tokens)

    def _preempt(self, r: RequestState) -> None:
        seq = r.seqs[0]
        context = r.req.prompt_ids + seq.output_ids[:-1]
        if seq.cache.length:  # what it computed survives in the prefix cache while there is room
            self.kv.remember(r.req, context, seq.cache)
        self.kv.free(seq.cache)
        self.running.remove(r)
        self.kv.refund(r.kv_tokens)
        r.kv_tokens, r.prefilled = 0, 0
        r.recompute = context if seq.output_ids else None
        self.waiting.appendleft(r)
        self.preemptions += 1
        log.info("preempted %s after %d tokens (KV budget spent)", r.req.request_id, len(seq.output_ids))
