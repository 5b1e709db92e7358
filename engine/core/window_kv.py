"""The sliding-window layers' KV (Gemma 3): a second page pool, in which a sequence holds only its window's pages.

A sliding layer attends to the last `window` positions, so once a page's positions all lie before the window of a
sequence's next query, no later step reads it and it goes back to the pool. The full-attention layers keep every
page in the runner's main pool (`KVCache.pages`); `KVCache.window` maps a sequence's logical pages to this pool's
pages, 0 for one it does not hold (dropped, or not written yet). A step takes a page when it writes into it and
drops, before it runs, what its queries no longer see, keeping one page more for the prefix cache
(WindowPages.drop). A decode step also drops after it what the sequence's next step can no longer see (a drafted
step, speculative decoding, may be rolled back to one past its first row: the next step starts there at the
earliest). A prompt chunk keeps its pages until the next step: the scheduler first offers the prompt so far to the
prefix cache, so a later prompt sharing any prefix of it (a system prompt) finds that prefix's window pages.

At a long context this is most of a Gemma 3's KV: five of its six layers are sliding ones, each holding a window
of 512 (270M) to 1024 positions whatever the context. `SplitPages` is what the prefix cache copies through: a
block is a page of the main pool and, while the sequence holds it, its window page; a cached chain loads as far
as its last blocks still carry the window the next query reads.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.core.kv import PAGE, KVCache, PagePool, pages_for


def pool_tokens(window: int, kv_tokens: int, seqs: int, step_tokens: int) -> int:
    """Tokens a window pool needs for `seqs` live sequences at most and `step_tokens` written a step at most (0
    seqs: as many as the main pool's `kv_tokens`). Each sequence holds its window, a page or two kept
    (WindowPages.drop) and the pages a step writes past it; beam search forks children before it frees their
    parents, hence twice the sequences."""
    return min(kv_tokens, 2 * seqs * (window + 6 * PAGE) + step_tokens) if seqs else kv_tokens


class WindowPages:
    def __init__(self, pool: PagePool, window: int) -> None:
        self.pool = pool
        self.window = window

    def first_page(self, position: int) -> int:
        """The first logical page that a query at `position` reads."""
        return max(0, position + 1 - self.window) // PAGE

    def drop(self, cache: KVCache, position: int) -> None:
        """Give back the pages that a query at `position` or later never reads, bar one: the prefix cache may load
        this sequence's blocks up to the page before `position`'s (a prompt repeated whole recomputes its last
        page), and the query after them reads a window from a page earlier."""
        first = min(self.first_page(max(0, (position // PAGE - 1) * PAGE)), len(cache.window))
        gone = [p for p in cache.window[cache.window_from : first] if p]
        cache.window[cache.window_from : first] = [0] * max(0, first - cache.window_from)
        cache.window_from = max(cache.window_from, first)
        self.pool.give(gone)

    def write(self, cache: KVCache, start: int, end: int) -> None:
        """Take pages for positions [start, end), which a step is about to write; its queries also read the window
        before `start`, which the sequence must still hold."""
        need = pages_for(end)
        cache.window.extend([0] * (need - len(cache.window)))
        if 0 in cache.window[self.first_page(start) : pages_for(start)]:
            raise RuntimeError("sliding-window KV missing for a step's window")  # an engine bug, never a request's
        missing = [p for p in range(start // PAGE, need) if not cache.window[p]]
        for p, page in zip(missing, self.pool.take(len(missing))):
            cache.window[p] = page

    def put(self, cache: KVCache, i: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Logical page i's keys and values, as the prefix cache hands them back, into a page of this pool."""
        cache.window.extend([0] * (i + 1 - len(cache.window)))
        if not cache.window[i]:
            cache.window[i] = self.pool.take(1)[0]
        self.pool.k[:, cache.window[i]] = k
        self.pool.v[:, cache.window[i]] = v

    def release(self, cache: KVCache) -> None:
        self.pool.give([p for p in cache.window if p])
        cache.window, cache.window_from = [], 0

    def fork(self, cache: KVCache, new: KVCache) -> None:
        """Copy the pages `cache` holds into pages of `new`."""
        held = [i for i, p in enumerate(cache.window) if p]
        new.window = [0] * len(cache.window)
        new.window_from = cache.window_from
        pages = self.pool.take(len(held))
        for i, page in zip(held, pages):
            new.window[i] = page
        if held:
            src = torch.tensor([cache.window[i] for i in held], device=self.pool.device)
            dst = torch.tensor(pages, device=self.pool.device)
            self.pool.k[:, dst] = self.pool.k[:, src]
            self.pool.v[:, dst] = self.pool.v[:, src]

    @staticmethod
    def held(cache: KVCache) -> int:
        return sum(1 for p in cache.window if p)


class SplitPages:
    """The prefix cache's view of a runner with a window pool (kv.PageStore): a block of a sequence is its main
    page and, while the sequence still holds it, its window page (else None)."""

    drops = True  # the scheduler offers each prompt chunk to the prefix cache (kv.PageStore.drops)

    def __init__(self, main: PagePool, window: WindowPages) -> None:
        self.main = main
        self.window = window

    def read_page(self, cache: KVCache, i: int) -> tuple[Any, ...]:
        page = cache.window[i] if i < len(cache.window) else 0
        held = (self.window.pool.k[:, page].clone(), self.window.pool.v[:, page].clone()) if page else (None, None)
        return (*self.main.read_page(cache, i), *held)

    def write_pages(self, cache: KVCache, pages: list[tuple[Any, ...]]) -> None:
        """A loaded chain: every main page, and the window pages the next query reads (SplitPages.usable made
        sure the chain has them)."""
        self.main.write_pages(cache, pages)
        first = self.window.first_page(len(pages) * PAGE)
        for i in range(first, len(pages)):
            _, _, k, v = pages[i]
            self.window.put(cache, i, k, v)
        cache.window_from = first

    def usable(self, blocks: list[tuple[Any, ...]]) -> int:
        """How many leading blocks of a matched chain can load: the query after them reads the window pages of
        the last few, which must all have been held when the blocks were stored."""
        n = len(blocks)
        while n:
            # A block is (keys, values, window keys, window values): None where the window page was dropped.
            lacking = [p for p in range(self.window.first_page(n * PAGE), n) if blocks[p][2] is None]
            if not lacking:
                return n
            n = lacking[-1]  # a chain ending before that block may still have its window
        return 0
