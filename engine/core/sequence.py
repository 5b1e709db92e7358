"""Per-sequence state: output tokens, KV cache, detokeniser, stop conditions and per-token statistics.

When the reasoning split is active (spec §7) the tokens are routed by id: a leading <think> and the first
</think> produce no text, tokens before </think> go to the reasoning detokeniser and the rest to the answer's,
so each part is decoded on its own exactly as the non-stream rule says, token by token.
"""

from __future__ import annotations

from typing import Any

from engine.core.detokenizer import IncrementalDetokenizer
from engine.core.kv import KVCache
from engine.core.types import FINISH_LENGTH, FINISH_STOP, ChoiceDelta, SamplingParams, TokenLogprob


class Sequence:
    def __init__(self, index: int, params: SamplingParams, tokenizer: Any, cache: KVCache, arrival: float):
        self.index = index
        self.params = params
        self.tokenizer = tokenizer
        self.cache = cache
        self.output_ids: list[int] = []
        self.cumulative_logprob = 0.0
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self.last_time = arrival  # when this sequence last got a token (or arrived): the base of queue wait
        self.detok = IncrementalDetokenizer(
            tokenizer, params.skip_special_tokens, params.stop, params.include_stop_str_in_output
        )
        # A stop string matched inside the reasoning stays at its end (spec §7.4), whatever include_stop says.
        self.reasoning_detok = (
            IncrementalDetokenizer(tokenizer, params.skip_special_tokens, params.stop, True)
            if params.think_ids
            else None
        )
        self.reasoning_tokens: int | None = None  # index of the first </think>, once seen
        self.constraint: Any = None  # TokenConstraint: masks the answer part (never the reasoning)
        self.forced: list[int] = []  # tokens to feed instead of sampling (the thinking budget's early stop)
        self._budget_spent = False
        self._ended_by_token = False  # finished on EOS or a stop token id, which is not part of the output text
        self.pending = ChoiceDelta(index)  # what has not been handed to the caller yet
        self.closed = False  # its finishing delta has been handed out: nothing more may follow
        self.draft: list[int] = []  # this step's speculative drafts (scheduler), consumed by the engine's verify
        self.ngram: Any = None  # speculative.NgramIndex over prompt + output, made at the first draft

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def fork(self, index: int, cache: KVCache) -> Sequence:
        twin = Sequence(index, self.params, self.tokenizer, cache, self.last_time)
        twin.constraint = self.constraint.fork() if self.constraint is not None else None
        twin.output_ids = list(self.output_ids)
        twin.cumulative_logprob = self.cumulative_logprob
        p, q = self.pending, twin.pending
        q.token_ids, q.logprobs = list(p.token_ids), list(p.logprobs)
        q.batch_sizes, q.queue_waits_us, q.token_times = (
            list(p.batch_sizes),
            list(p.queue_waits_us),
            list(p.token_times),
        )
        q.steps = list(p.steps)
        return twin

    def append(
        self,
        token: int,
        logprob: float,
        entry: TokenLogprob | None,
        *,
        batch_size: int,
        step_start: float,
        step_end: float,
        eos_ids: frozenset[int],
        decode_text: bool = True,
        step: Any = None,
    ) -> None:
        """Record one generated token and decide whether the sequence is finished."""
        p = self.params
        self.output_ids.append(token)
        self.cumulative_logprob += logprob
        d = self.pending
        d.token_ids.append(token)
        if entry is not None:
            d.logprobs.append(entry)
        d.batch_sizes.append(batch_size)
        d.queue_waits_us.append(max(0, int((step_start - self.last_time) * 1e6)))
        d.token_times.append(step_end)
        if step is not None:  # the step's StepRecord (engine/core/step_log.py), when the engine keeps them
            d.steps.append(step)
        self.last_time = step_end
        if not decode_text:  # beam search decodes the winners once, at the end
            return
        if token in p.stop_token_ids:
            self.finish_reason, self.stop_reason = FINISH_STOP, token
            self._ended_by_token = True
            self._route(token if p.include_stop_str_in_output or self.thinking else None)
        elif token in eos_ids and not p.ignore_eos:
            self.finish_reason = FINISH_STOP
            self._ended_by_token = True
            self._route(None)
        else:
            self._route(token)
        if not self.finished and len(self.output_ids) >= p.max_tokens:
            self.finish_reason = FINISH_LENGTH
        if self.finished:
            self._flush()
        elif self.thinking and not self._budget_spent and len(self.output_ids) >= (p.thinking_budget or 1 << 62):
            self._budget_spent = True
            self.forced = list(p.think_stop_ids)

    @property
    def thinking(self) -> bool:
        """Still inside the reasoning part (only ever true while the split is active)."""
        return self.reasoning_detok is not None and self.reasoning_tokens is None

    def _route(self, token: int | None) -> None:
        """Send one token's text to the part it belongs to, and note a stop string it completes."""
        d = self.pending
        if self.thinking:
            start, end = self.params.think_ids  # type: ignore[misc]
            detok = self.reasoning_detok
            assert detok is not None  # thinking implies a reasoning detokenizer
            if token == end:
                self.reasoning_tokens = len(self.output_ids) - 1
                d.reasoning_text += detok.flush()
                return
            if token == start and len(self.output_ids) == 1:
                return
            d.reasoning_text += detok.add(token)
            matched = detok.matched_stop
        else:
            d.text += self.detok.add(token)
            matched = self.detok.matched_stop
        if matched is not None and not self.finished:
            self.finish_reason, self.stop_reason = FINISH_STOP, matched

    def _flush(self) -> None:
        d = self.pending
        if self.reasoning_detok is not None:
            d.reasoning_text += self.reasoning_detok.flush()
            if self.reasoning_tokens is None:  # no </think>: everything was reasoning, bar a closing stop token
                self.reasoning_tokens = len(self.output_ids) - self._ended_by_token
        d.text += self.detok.flush()

    def finish(self, reason: str) -> None:
        self.finish_reason = reason
        self._flush()

    def take_delta(self) -> ChoiceDelta:
        """Hand out what accumulated since the last call."""
        d = self.pending
        d.finish_reason, d.stop_reason = self.finish_reason, self.stop_reason
        d.cumulative_logprob = self.cumulative_logprob
        d.speculative = bool(self.params.speculative)
        if self.finished and self.reasoning_detok is not None:
            d.reasoning_tokens = self.reasoning_tokens
        self.closed = self.finished
        self.pending = ChoiceDelta(self.index)
        return d

    def decode_all(self, eos_ids: frozenset[int]) -> None:
        """For sequences generated without incremental text (beam search): decode the whole output now."""
        ids = self.output_ids
        if ids and ids[-1] in eos_ids and not self.params.ignore_eos:
            ids = ids[:-1]
        self._ended_by_token = len(ids) < len(self.output_ids)
        done, self.output_ids = self.output_ids, []
        for t in ids:
            self.output_ids.append(t)
            self._route(t)
        self.output_ids = done
        self._flush()
