"""Automatic prefix caching: KV of prompt prefixes kept in fixed-size blocks, reused by later requests.

A block holds the KV of BLOCK consecutive tokens and is keyed by a digest of *every* token up to its end (plus
an optional salt, e.g. a digest of the request's media), so a hit means the whole prefix is identical. Blocks
are copied into a new sequence's cache instead of being recomputed; least recently used blocks are evicted once
the store exceeds its token budget. A chain is touched tail first, so its head is the most recent and eviction
eats chains from their tails: a surviving head block stays useful, an orphaned tail block never would.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from engine.core.kv import PAGE, PageStore

BLOCK = PAGE  # a block is one KV page


@dataclass
class _Block:
    page: tuple[Any, ...]  # one KV page as the runner's PageStore reads it: keys, values [layers, BLOCK, kv, hd], ...


def _partial(page: tuple[Any, ...]) -> bool:
    """Whether a block lacks part of its page (PageStore.read_page gives None for a window page already dropped)."""
    return any(part is None for part in page)


def _digests(tokens: list[int], salt: bytes, blocks: int, block: int = BLOCK) -> list[bytes]:
    out, prev = [], salt
    for i in range(blocks):
        chunk = tokens[i * block : (i + 1) * block]
        prev = hashlib.blake2b(prev + b"".join(t.to_bytes(4, "little") for t in chunk), digest_size=16).digest()
        out.append(prev)
    return out


class PrefixCache:
    def __init__(self, capacity_tokens: int, block: int = BLOCK) -> None:
        """`block`: tokens per block, the runner's page (engine/device.py `page_size`)."""
        self.block = block
        self.capacity_blocks = max(0, capacity_tokens // block)
        self._blocks: OrderedDict[bytes, _Block] = OrderedDict()
        # Counters for metrics and the page's Server tab (plain ints, bumped on the engine thread, read anywhere).
        self.hits = 0  # tokens served from the cache
        self.queries = 0  # prompt tokens looked up: hits / queries is the hit rate, as vLLM reports it
        self.lookups = 0  # prompts looked up
        self.hit_lookups = 0  # prompts that found at least one block
        self.resets = 0

    @property
    def blocks(self) -> int:
        return len(self._blocks)

    @property
    def tokens(self) -> int:
        return len(self._blocks) * self.block

    @property
    def capacity_tokens(self) -> int:
        return self.capacity_blocks * self.block

    def match(self, tokens: list[int], salt: bytes = b"", pages: PageStore | None = None) -> list[_Block]:
        """Longest cached chain of whole blocks, leaving at least one token to compute (it gives the logits), and
        as much of it as `pages` can load (a sliding window's pages may be missing from early blocks)."""
        if not self.capacity_blocks:
            return []
        self.lookups += 1
        self.queries += len(tokens)
        chain, keys = [], []
        for key in _digests(tokens, salt, (len(tokens) - 1) // self.block, self.block):
            block = self._blocks.get(key)
            if block is None:
                break
            chain.append(block)
            keys.append(key)
        if pages is not None:
            del chain[pages.usable([b.page for b in chain]) :]
            del keys[len(chain) :]
        self._touch(keys)
        self.hit_lookups += bool(chain)
        return chain

    def _touch(self, keys: list[bytes]) -> None:
        for key in reversed(keys):
            self._blocks.move_to_end(key)

    def load(self, chain: list[_Block], cache: Any, pages: PageStore) -> int:
        """Copy a matched chain into the first pages of a sequence's cache; returns the tokens loaded."""
        pages.write_pages(cache, [block.page for block in chain])
        self.hits += len(chain) * self.block
        return len(chain) * self.block

    def store(self, tokens: list[int], cache: Any, pages: PageStore, salt: bytes = b"") -> None:
        """Keep the whole blocks of `tokens`, whose KV fills the first pages of `cache`."""
        if not self.capacity_blocks:
            return
        keys = _digests(tokens, salt, min(len(tokens) // self.block, self.capacity_blocks), self.block)
        for i, key in enumerate(keys):
            block = self._blocks.get(key)
            if block is None or _partial(block.page):  # a block stored without a sliding window's page: a fuller
                page = pages.read_page(cache, i)  # read replaces it
                if block is None or not _partial(page):
                    self._blocks[key] = _Block(page)
        self._touch(keys)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def reset(self) -> int:
        """Drop every block (the counters stay: they only grow); returns how many there were. The engine calls it
        on its own thread between steps (Engine.reset_prefix_cache)."""
        dropped = len(self._blocks)
        self._blocks.clear()
        self.resets += 1
        return dropped
