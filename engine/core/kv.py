"""KV memory, both sides of it: the lean runner's page pool, and the engine's token budget over every runner's caches.

A sequence's keys and values live in pages of PAGE tokens. `PagePool` is DecoderRunner's store of them: one
[layers, pages, PAGE, kv_heads, head_dim] tensor for keys and one for values, and a free list. `KVBudget` is what
the scheduler admits, grows and preempts against: a number of tokens, whichever runner holds them (pool pages for
DecoderRunner, a DynamicCache for HFRunner), with the prefix cache beside it. PAGE is also the prefix cache's
block, so a cached block is one page, and it sizes the pool's slack for partly filled last pages (engine/serving/factory.py).

PAGE is the default: the page size is a property of the device (engine/device.py `page_size`: 128 tokens on an
Ascend NPU, whose paged-attention kernels want it, PAGE elsewhere), which DecoderRunner hands to its pool
(`PagePool.page`) and the prefix cache its block (engine/serving/factory.py); a sliding-window pool (window_kv.py)
keeps PAGE.

The pages' element type is `kv_dtype`'s choice for `--kv-cache-dtype`: the activations' dtype, or bf16 under
float32 activations (half the bytes a long context's attention streams and the pool holds, what vLLM stores).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from engine.core.prefix_cache import PrefixCache
    from engine.core.runner import Runner
    from engine.core.types import EngineRequest

PAGE = 16  # tokens per KV page, and per prefix-cache block
KV_GROW = 128  # tokens a growing cache gains at a time: few copies, little waste


KV_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}  # --kv-cache-dtype's choices besides auto


class KVDtypeError(ValueError):
    """A --kv-cache-dtype this device cannot serve: the message says what it can."""


def kv_dtype(requested: str | None, device: str, activations: torch.dtype, kernels: bool) -> torch.dtype:
    """The KV pages' dtype for `--kv-cache-dtype requested` on `device`, under activations of `activations`
    (None: the activations' own, what a runner built in code keeps).

    auto: bf16 on a CPU with the kernels (engine/core/cpu_kernels.py), which read bf16 pages widening them in
    registers: bench/kv_dtype.py measured SmolLM2's decode step at 1-2k tokens of context no slower at one stream
    (within the noise) and 1.05-1.23x less CPU time a step at 16 streams, with the AVX-512 build and with the AVX2
    one alike, besides half the pool's bytes; elsewhere the activations' dtype (the torch reference would convert
    the gathered pages on every step, and GPUs / NPUs already run bf16 or fp16 activations). An explicit fp32 or bf16
    is honoured wherever the torch reference runs (it widens bf16 pages to the query's dtype); an Ascend NPU's
    fused attention reads its pages in the query's dtype, so there it must match the activations."""
    if requested is None:
        return activations
    if requested == "auto":
        return torch.bfloat16 if kernels and activations == torch.float32 else activations
    if requested not in KV_DTYPES:
        raise KVDtypeError(f"--kv-cache-dtype must be one of auto, {', '.join(KV_DTYPES)}; got {requested!r}")
    want = KV_DTYPES[requested]
    if device.split(":")[0] == "npu" and want != activations:
        have = next((k for k, v in KV_DTYPES.items() if v == activations), str(activations).removeprefix("torch."))
        raise KVDtypeError(
            f"--kv-cache-dtype {requested}: the NPU's paged attention reads KV pages in the activations' dtype "
            f"({have} here); use --kv-cache-dtype auto, or --dtype {requested}"
        )
    return want


def pages_for(tokens: int, page: int = PAGE) -> int:
    """Pages of `page` tokens that hold `tokens` tokens."""
    return -(-tokens // page)


@dataclass
class KVCache:
    """One sequence's keys and values: the pool pages holding them (DecoderRunner), or a DynamicCache (HFRunner)."""

    pages: list[int] = field(default_factory=list)
    length: int = 0  # tokens whose KV is stored
    # DecoderRunner with sliding-window layers (window_kv.py): their pool's page for each logical page, 0 where the
    # sequence holds none (dropped, being out of every later query's window, or not written yet); and the first
    # logical page not dropped yet.
    window: list[int] = field(default_factory=list)
    window_from: int = 0
    hf: Any = None  # DynamicCache, for HFRunner
    # HFRunner, M-RoPE models (Qwen2-VL): rope position minus cache position after the prompt's media. Kept per
    # sequence because the model's own `rope_deltas` attribute is shared by every interleaved request.
    rope_delta: int = 0

    @property
    def capacity(self) -> int:
        return len(self.pages) * PAGE


class PageStore(Protocol):
    """What the prefix cache needs of a runner's pages: copy one page of a sequence's cache out, or in (a tuple of
    tensors the cache keeps as it is) or a chain of them in, and how much of a matched chain can load."""

    def read_page(self, cache: Any, i: int) -> tuple[Any, ...]: ...

    def write_pages(self, cache: Any, pages: list[tuple[Any, ...]]) -> None: ...

    def usable(self, blocks: list[tuple[Any, ...]]) -> int: ...

    @property
    def drops(self) -> bool:
        """Whether a sequence gives pages back while its prompt prefills (a sliding window): each prompt chunk
        is then offered to the prefix cache, before the next step drops what it no longer sees."""
        ...


class PagePool:
    """Keys and values of every sequence of a runner, [layers, pages, PAGE, kv_heads, head_dim] each, and a
    sequence owns a list of pages. Allocated empty, and pages are zeroed when handed out, so resident memory
    follows the pages in use, not the budget. Page 0 stays zero: the padding of ragged decode batches."""

    def __init__(
        self,
        layers: int,
        tokens: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: str,
        page: int = PAGE,
    ):
        self.device = device
        self.page = page  # tokens per page
        pages = 1 + pages_for(tokens, page)
        shape = (layers, pages, page, kv_heads, head_dim)
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty(shape, dtype=dtype, device=device)
        self.k[:, 0].zero_()
        self.v[:, 0].zero_()
        self._free = list(range(pages - 1, 0, -1))  # pop() hands out the lowest page first (one engine thread)
        self.total_pages = pages - 1  # the pages sequences can hold (page 0 is the padding)

    @property
    def free_pages(self) -> int:
        return len(self._free)

    @property
    def bytes_per_token(self) -> int:
        """One position's keys and values over this pool's layers."""
        return 2 * self.k[:, 0, 0].numel() * self.k.element_size()

    def take(self, n: int) -> list[int]:
        """n free pages, zeroed."""
        if n <= 0:
            return []
        if n > len(self._free):
            raise RuntimeError("KV cache pool exhausted")
        new = [self._free.pop() for _ in range(n)]
        idx = torch.tensor(new, device=self.device)
        self.k[:, idx] = 0  # fresh pages may hold anything: a NaN in a masked slot would still poison attention
        self.v[:, idx] = 0
        return new

    def give(self, pages: list[int]) -> None:
        self._free.extend(reversed(pages))

    def reserve(self, cache: KVCache, tokens: int) -> None:
        """Make room for `tokens` tokens in total."""
        cache.pages.extend(self.take(pages_for(tokens, self.page) - len(cache.pages)))

    def release(self, cache: KVCache) -> None:
        self.give(cache.pages)
        cache.pages, cache.length = [], 0

    def fork(self, cache: KVCache) -> KVCache:
        new = KVCache()
        self.reserve(new, len(cache.pages) * self.page)
        src, dst = torch.tensor(cache.pages, device=self.device), torch.tensor(new.pages, device=self.device)
        self.k[:, dst] = self.k[:, src]
        self.v[:, dst] = self.v[:, src]
        new.length = cache.length
        return new

    def index(self, pages: list[int]) -> slice | torch.Tensor:
        """Index of a sequence's pages in the pool: a slice (a view, no copy) when they are consecutive, which the
        lowest-first allocator makes the usual case for a lone stream."""
        if pages and pages[-1] - pages[0] == len(pages) - 1 and all(b == a + 1 for a, b in zip(pages, pages[1:])):
            return slice(pages[0], pages[-1] + 1)
        return torch.tensor(pages, device=self.device)

    def read_page(self, cache: KVCache, i: int) -> tuple[Any, ...]:
        """A copy of the i-th page's keys and values, [layers, PAGE, kv_heads, head_dim] each."""
        page = cache.pages[i]
        return self.k[:, page].clone(), self.v[:, page].clone()

    def write_pages(self, cache: KVCache, pages: list[tuple[Any, ...]]) -> None:
        """Pages as read_page gave them into the first pages of `cache`."""
        for i, (k, v, *_) in enumerate(pages):
            self.k[:, cache.pages[i]] = k
            self.v[:, cache.pages[i]] = v

    def usable(self, blocks: list[tuple[Any, ...]]) -> int:
        return len(blocks)  # every page of every layer is kept

    drops = False


class KVBudget:
    """The engine's KV budget in tokens, over the runner's caches, with the prefix cache beside it.

    `used` counts what the running requests hold (the scheduler grants and refunds it), and the runner's padding
    (HFRunner's cohort rows right-aligned to the widest) counts beside it; caches are made room in,
    forked and freed through the runner; whole prompts and replies are offered to the prefix cache, and a new
    sequence starts from the longest cached prefix of its context."""

    def __init__(self, runner: Runner, capacity: int, prefix_cache: PrefixCache | None = None) -> None:
        self.runner = runner
        self.capacity = capacity
        self.prefix_cache = prefix_cache
        self.used = 0

    def fits(self, tokens: int) -> bool:
        return self.used + self.runner.padding + tokens <= self.capacity

    def grant(self, tokens: int) -> None:
        self.used += tokens

    def refund(self, tokens: int) -> None:
        self.used -= tokens

    def reserve(self, cache: KVCache, tokens: int) -> None:
        self.runner.reserve(cache, tokens)

    def fork(self, cache: KVCache) -> KVCache:
        return self.runner.fork(cache)

    def free(self, cache: KVCache) -> None:
        self.runner.release(cache)

    def _pages(self, req: EngineRequest) -> PageStore | None:
        """The pages through which a request's KV goes to and from the prefix cache, or None: no prefix cache, a
        runner without pages, or a media prompt (pages hold no media digest beyond the salt and no M-RoPE delta,
        and prefill of a media prompt is never split anyway)."""
        return self.runner.pages if self.prefix_cache is not None and req.mm is None else None

    @property
    def drops(self) -> bool:
        """The runner's pages go back while a prompt prefills (PageStore.drops)."""
        pages = self.runner.pages
        return pages is not None and pages.drops

    def remember(self, req: EngineRequest, tokens: list[int], cache: KVCache) -> None:
        """Offer the whole pages of `tokens`, whose KV fills the first pages of `cache`, to the prefix cache."""
        pages = self._pages(req)
        if pages is not None and self.prefix_cache is not None:
            self.prefix_cache.store(tokens[: cache.length], cache, pages, req.cache_salt)

    def load_prefix(self, req: EngineRequest, tokens: list[int], cache: KVCache) -> int | None:
        """Copy the longest cached prefix of `tokens` into `cache`: the tokens loaded, or None where the request
        does not go through the prefix cache."""
        pages = self._pages(req)
        if pages is None or self.prefix_cache is None:
            return None
        return self.prefix_cache.load(self.prefix_cache.match(tokens, req.cache_salt, pages), cache, pages)
