"""Beam search over a request's sequences, one step at a time inside the shared engine step.

Scores are cumulative log-probabilities normalised by length (length_penalty 1.0, vLLM's default). A beam that
emits EOS moves to the finished set; the search ends when `width` beams have finished or the live ones reach
max_tokens. Output is released only at the end (pseudo-streaming, spec §5.5).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from engine.core.kv import KVCache
from engine.core.sampler import apply_logit_bias, token_logprob
from engine.core.sequence import Sequence
from engine.core.types import FINISH_LENGTH, FINISH_STOP, TokenLogprob


def _score(seq: Sequence) -> float:
    return seq.cumulative_logprob / max(1, len(seq.output_ids))


class BeamSearch:
    def __init__(self, width: int, n: int, eos_ids: frozenset[int]):
        self.width = width
        self.n = n
        self.eos_ids = eos_ids
        self.finished: list[Sequence] = []

    def step(
        self,
        live: list[Sequence],
        logits: torch.Tensor,
        fork: Callable[[KVCache], KVCache],
        free: Callable[[KVCache], None],
        stats: dict,
    ) -> list[Sequence]:
        """Advance every live beam by one token; return the new live beams (caches forked or freed)."""
        # A request's logit_bias shifts the beams' scores as it shifts any sampler's logits (the logprobs reported
        # are then the biased ones: a beam search has no other distribution it ranks by).
        bias = live[0].params.logit_bias
        logprobs = torch.log_softmax(apply_logit_bias(logits.float().clone(), bias) if bias else logits.float(), dim=-1)
        ignore_eos = live[0].params.ignore_eos
        scores = logprobs + torch.tensor([s.cumulative_logprob for s in live]).unsqueeze(1)
        vocab = scores.shape[1]
        top = torch.topk(scores.flatten(), min(2 * self.width, scores.numel()))
        chosen: list[tuple[int, int, float]] = []
        for flat in top.indices.tolist():
            beam, token = divmod(flat, vocab)
            chosen.append((beam, token, float(logprobs[beam, token])))
        new_live: list[Sequence] = []
        used: set[int] = set()

        def entry(beam: int, token: int) -> TokenLogprob | None:
            params = live[beam].params
            return token_logprob(logprobs[beam], token, params.top_logprobs) if params.logprobs else None

        for beam, token, lp in chosen:
            parent = live[beam]
            is_eos = token in self.eos_ids or token in parent.params.stop_token_ids
            if is_eos and not ignore_eos:
                if len(self.finished) < self.width:
                    done = parent.fork(parent.index, KVCache())
                    done.append(token, lp, entry(beam, token), decode_text=False, **stats)
                    done.finish_reason = FINISH_STOP
                    done.stop_reason = token if token in parent.params.stop_token_ids else None
                    self.finished.append(done)
                continue
            if len(new_live) == self.width:
                continue
            if beam in used:
                child = parent.fork(parent.index, fork(parent.cache))
            else:
                used.add(beam)
                child = parent.fork(parent.index, parent.cache)
            child.append(token, lp, entry(beam, token), decode_text=False, **stats)
            new_live.append(child)
        for i, seq in enumerate(live):
            if i not in used:
                free(seq.cache)
        if len(self.finished) >= self.width:
            for seq in new_live:
                free(seq.cache)
            return []
        if new_live and len(new_live[0].output_ids) >= new_live[0].params.max_tokens:
            for seq in new_live:
                seq.finish_reason = FINISH_LENGTH
                free(seq.cache)
            self.finished.extend(new_live)
            return []
        return new_live

    def results(self) -> list[Sequence]:
        best = sorted(self.finished, key=_score, reverse=True)[: self.n]
        for i, seq in enumerate(best):
            seq.index = i
            seq.pending.index = i
            seq.decode_all(self.eos_ids)
        return best
