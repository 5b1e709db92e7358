"""Per-sequence state: output tokens, KV cache, detokeniser, stop conditions and per-token statistics."""

from __future__ import annotations

from typing import Any

from engine.core.detokenizer import IncrementalDetokenizer
from engine.core.model_runner import KVCache
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
        self.pending = ChoiceDelta(index)  # what has not been handed to the caller yet
        self.closed = False  # its finishing delta has been handed out: nothing more may follow

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def fork(self, index: int, cache: KVCache) -> Sequence:
        twin = Sequence(index, self.params, self.tokenizer, cache, self.last_time)
        twin.output_ids = list(self.output_ids)
        twin.cumulative_logprob = self.cumulative_logprob
        p, q = self.pending, twin.pending
        q.token_ids, q.logprobs = list(p.token_ids), list(p.logprobs)
        q.batch_sizes, q.queue_waits_us, q.token_times = (
            list(p.batch_sizes),
            list(p.queue_waits_us),
            list(p.token_times),
        )
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
        self.last_time = step_end
        if not decode_text:  # beam search decodes the winners once, at the end
            return
        if token in p.stop_token_ids:
            self.finish_reason, self.stop_reason = FINISH_STOP, token
            d.text += self.detok.add(token if p.include_stop_str_in_output else None)
        elif token in eos_ids and not p.ignore_eos:
            self.finish_reason = FINISH_STOP
            d.text += self.detok.add(None)
        else:
            d.text += self.detok.add(token)
            if self.detok.matched_stop is not None:
                self.finish_reason, self.stop_reason = FINISH_STOP, self.detok.matched_stop
        if not self.finished and len(self.output_ids) >= p.max_tokens:
            self.finish_reason = FINISH_LENGTH
        if self.finished:
            d.text += self.detok.flush()

    def finish(self, reason: str) -> None:
        self.finish_reason = reason
        self.pending.text += self.detok.flush()

    def take_delta(self) -> ChoiceDelta:
        """Hand out what accumulated since the last call."""
        d = self.pending
        d.finish_reason, d.stop_reason = self.finish_reason, self.stop_reason
        d.cumulative_logprob = self.cumulative_logprob
        self.closed = self.finished
        self.pending = ChoiceDelta(self.index)
        return d

    def decode_all(self, eos_ids: frozenset[int]) -> None:
        """For sequences generated without incremental text (beam search): decode the whole output now."""
        ids = self.output_ids
        if ids and ids[-1] in eos_ids and not self.params.ignore_eos:
            ids = ids[:-1]
        for t in ids:
            self.pending.text += self.detok.add(t)
        self.pending.text += self.detok.flush()
