"""Speculative decoding by prompt lookup (n-gram drafts): no draft model, the drafts are what followed an earlier
occurrence of the sequence's last tokens in its own prompt and output (vLLM's `ngram` method, llama.cpp's
`ngram` speculation). The target model verifies the k drafts in one step: the decoding segment carries the last
token and the drafts, and its forward returns a logits row for each of them.

Verification keeps the output exact. Greedy rows accept drafts while the argmax of the processed logits (the
same samplers as normal decoding: mask, penalties) equals the draft, then take the argmax at the first mismatch,
or the bonus token after all k: token for token what decoding one token a step gives. Sampled rows use the
standard rejection sampling (Leviathan et al. 2023) with a deterministic draft (q = one-hot at the draft): accept
with probability p(draft), else draw from p with the draft removed and renormalised, every draw from the row's own
generator, so a seed reproduces a reply (not the same reply as with speculation off).

Each appended token is one token of the sequence as always (Sequence.append): its own logprobs entry, the step's
batch size and time; the second and later tokens of a step wait 0 in the queue (they were ready with the first).
Rejected drafts' KV is rolled back by setting the cache length to the accepted prefix (the pages stay the
sequence's; the next step overwrites those positions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from engine.core.sampler import Row, plain_greedy, processed_logits, token_logprob
from engine.core.types import FINISH_STOP

DEFAULT_K = 4  # drafts per step when a request asks and the server sets no K: k=4 measured best (bench/spec_ngram.py)
NGRAM_MAX = 3  # the longest suffix looked up (vLLM's prompt_lookup_max)
NGRAM_MIN = 1  # the shortest (prompt_lookup_min, vLLM's default too)
UNIGRAM_DRAFTS = 2  # a match of one token alone drafts at most this many: it guesses well only that far (measured)
# A step's rows, decode rows and drafts together, up to which drafts are added: a step of a few rows streams the
# weights once whatever its rows (memory-bound), a larger one pays for every row it adds, so a full batch drafts
# nothing (vLLM's speculative_disable_by_batch_size, per step). bench/spec_ngram.py --concurrency 1,4,16.
STEP_ROWS = 16
BACKOFF_MAX = 8  # after drafted steps that accepted nothing, skip up to this many steps before drafting again


class NgramIndex:
    """The latest position of every 1..NGRAM_MAX-gram of a token stream, kept as tokens arrive (O(NGRAM_MAX) a
    token). An n-gram enters the index one token late, so the lookup of the stream's own suffix finds only an
    earlier occurrence, and always has at least one following token to propose."""

    def __init__(self, ngram_max: int = NGRAM_MAX, ngram_min: int = NGRAM_MIN) -> None:
        self.tokens: list[int] = []
        self.ngram_max, self.ngram_min = ngram_max, ngram_min
        self._last: list[dict[tuple[int, ...], int]] = [{} for _ in range(ngram_max + 1)]  # by n: gram -> end
        # Back-off: drafted steps in a row that accepted nothing, and steps left to skip. Text that does not repeat
        # then costs few wasted verifications; a hit drafts every step again.
        self.misses = 0
        self.skip = 0
        # The draft length now (0: not set, the request's k): transformers' "heuristic" schedule for assisted
        # generation, +2 after a step that accepted every draft, -1 after one that did not, so a long copy drafts
        # up to k and scattered matches draft few (each draft costs a row of the forward).
        self.length = 0

    def verified(self, accepted: int, drafted: int) -> None:
        self.length = self.length + 2 if accepted == drafted else max(1, self.length - 1)
        if accepted:
            self.misses = 0
        else:
            self.misses += 1
            self.skip = min(1 << self.misses, BACKOFF_MAX)

    def extend(self, tokens: list[int]) -> None:
        t = self.tokens
        for tok in tokens:
            end = len(t) - 1  # the n-grams ending at the previous token now have a follower
            for n in range(1, self.ngram_max + 1):
                if end - n + 1 < 0:
                    break
                self._last[n][tuple(t[end - n + 1 : end + 1])] = end
            t.append(tok)

    def sync(self, prompt: list[int], output: list[int]) -> None:
        """Catch up with prompt + output (which only ever grow)."""
        have = len(self.tokens)
        if have < len(prompt):
            self.extend(prompt[have:])
            have = len(prompt)
        if have < len(prompt) + len(output):
            self.extend(output[have - len(prompt) :])

    def propose(self, k: int) -> list[int]:
        """Up to k tokens (UNIGRAM_DRAFTS after a one-token match) that followed the latest earlier occurrence of
        the longest suffix found (n from NGRAM_MAX down to NGRAM_MIN); [] when none occurred before."""
        t = self.tokens
        if k <= 0:
            return []
        for n in range(min(self.ngram_max, len(t)), self.ngram_min - 1, -1):
            end = self._last[n].get(tuple(t[len(t) - n :]))
            if end is not None:
                return t[end + 1 : end + 1 + (k if n > 1 else min(k, UNIGRAM_DRAFTS))]
        return []


def draft_for(seq: Any, prompt_ids: list[int], k: int, room: int, vocab_size: int) -> list[int]:
    """A sequence's drafts for this step: at most k, at most `room` (its KV and max_tokens left beyond the one
    token every step makes), none while a forced token is due, and only as far as its constraint allows each."""
    if k <= 0 or room <= 0 or seq.forced:
        return []
    if seq.constraint is not None and seq.thinking:  # the constraint starts somewhere inside the draft: none
        return []
    index = seq.ngram
    if index is None:
        index = seq.ngram = NgramIndex()
    index.sync(prompt_ids, seq.output_ids)
    if index.skip:
        index.skip -= 1
        return []
    index.length = min(index.length or k, k)
    draft = index.propose(min(index.length, room))
    if draft and seq.constraint is not None:
        c, ok = seq.constraint.fork(), 0
        for tok in draft:
            mask = c.allowed(vocab_size)
            if (mask is not None and not (tok < mask.shape[-1] and bool(mask[tok]))) or not c.accept(tok):
                break
            ok += 1
            if c.finished():
                break
        draft = draft[:ok]
    return draft


def decide(logits: torch.Tensor, row: Row, draft: int | None) -> tuple[int, torch.Tensor | None, bool]:
    """One position's token from its logits row (modified in place) through the row's samplers: (token, the
    processed log-softmax when the row asked for sampler logprobs, whether it is the accepted draft)."""
    p = row.params
    if row.forced is not None:
        return row.forced, None, False
    processed, highest = processed_logits(logits, row)
    after = torch.log_softmax(processed, dim=-1) if p.sampler_logprobs and p.logprobs else None
    if highest:
        token = int(torch.argmax(processed))
        return token, after, draft is not None and token == draft
    probs = processed.softmax(-1)
    if draft is None:
        return int(torch.multinomial(probs, 1, generator=row.generator)), after, False
    u = float(torch.rand((), generator=row.generator, device=probs.device))
    pd = float(probs[draft])
    if u < pd:
        return draft, after, True
    probs[draft] = 0.0
    if not float(probs.sum()) > 0.0:  # p was one-hot at the draft (u < 1 = p(draft) cannot miss; rounding)
        return draft, after, True
    return int(torch.multinomial(probs, 1, generator=row.generator)), after, False


def verify(logits: torch.Tensor, draft: list[int], seq: Any, row_for: Callable[[], Row], stats: dict[str, Any]) -> int:
    """Append the tokens of one drafted step to `seq` from its k + 1 logits rows (row i follows the i-th input
    token: the last token, then the drafts): the accepted drafts and the token after them. Constraints accept
    token by token; stops (EOS, stop ids and strings, max_tokens, a complete grammar) end the step at the token
    that finishes. Rolls the cache back to what the appended tokens need; returns the drafts accepted."""
    logits = logits.float()
    fed = seq.cache.length  # the forward wrote KV for all k + 1 inputs
    before = len(seq.output_ids)
    accepted = 0
    d = seq.pending
    best: list[int] | None = None  # plain greedy rows: every row's argmax in one pass
    for i in range(len(draft) + 1):
        row = row_for()  # the sequence's state now: output so far (penalties), constraint mask, a forced token
        want = draft[i] if i < len(draft) else None
        p = row.params
        raw = torch.log_softmax(logits[i], dim=-1)  # only the rows used: none after the first rejection
        if plain_greedy(row):  # no sampler changes these logits: the argmax is the token
            if best is None:  # max's indices, the first maximum as argmax's, in a third of argmax's time
                best = logits.max(dim=-1).indices.tolist()
            token, ok = best[i], best[i] == want
            after = raw if p.sampler_logprobs and p.logprobs else None
        else:
            token, after, ok = decide(logits[i].clone(), row, want)
        entry = token_logprob(raw, token, p.top_logprobs, after) if p.logprobs else None
        if entry is not None and p.sampler_logprobs and row.forced is not None:
            entry.processed = []
        constrained = seq.constraint is not None and not seq.thinking
        seq.append(token, float(raw[token]), entry, **stats)
        if constrained and not seq.finished:
            seq.constraint.accept(token)
            if seq.constraint.finished():
                seq.finish(FINISH_STOP)
        if ok:
            accepted += 1
            d.accepted.append(len(d.token_ids) - 1)
        if not ok or seq.finished or seq.forced:
            break
    d.drafted += len(draft)
    d.speculative = True
    if seq.ngram is not None:
        seq.ngram.verified(accepted, len(draft))
    made = len(seq.output_ids) - before
    # Inputs whose KV stays: the last token and the drafts before the newest appended token (which is the next
    # step's input, as after any step).
    seq.cache.length = fed - (len(draft) + 1) + made
    return accepted
