"""Graph capture of decode steps: one device-generic seam, CUDA graphs on NVIDIA and NPUGraph on Ascend.

A decode step of B sequences (one new token each) runs the same kernels with the same shapes every time; what
changes is the data: the tokens, their positions, the KV slots they write, the page tables and how many positions
each attends to. `DecodeGraphs` captures the step once per batch-size bucket (1, 2, 4, 8, ... up to the engine's
max_num_seqs) over static buffers of the bucket's size, and replays it: each step's inputs are copied into the
buffers of the smallest bucket that holds the batch, the rows past the batch padded (token 0 at position 0, writing
its KV into slot `pad_slot` of the pool's padding page 0, a page table of zeros and a length of 1, so that every
padding row reads and writes only page 0), the sequence lengths refreshed, and the graph replayed; the first rows
of the static output are the batch's logits.

The page table is [bucket, max_pages] for every bucket: a captured kernel cannot change its shapes, so it covers
the longest context the engine admits; the lengths mask what each row does not own. A paged kernel reads only the
pages a length covers; the torch reference (CUDA today) gathers the whole width every layer, which is right but
grows with max_model_len: graphs there suit short contexts until CUDA gets a paged decode kernel.

What a graph is comes from engine/device.py `graph_api(device)` (`GraphApi`: a new graph object, a capture of a
function into it, which warms up first where the device wants it); the seam itself imports no device library, so
that a test can hand it a fake graph that records and replays eagerly (tests/engine/core/test_graph_seam.py). `refresh`, when
given, runs after the lengths are written and before each replay: for attention kernels that read the lengths
from the host (the NPU's paged attention takes them as a host tensor), the place to update the captured task's
arguments; the torch reference and CUDA read them from the static device buffer and need none.

Off by default (`--graph-capture`), and refused with a start-up error on a device without graphs (CPU, MPS): see
engine/device.py `graph_api`. What has run on hardware: nothing yet (bench/device_check.py --graphs compares graph
against eager decoding, greedy tokens and logits, on a lent GPU or NPU).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

log = logging.getLogger(__name__)


class GraphApi(Protocol):
    """A device's graphs: `new()` an empty graph; `capture(graph, fn)` records fn() into it and returns fn's output
    (the static tensor replays write); the graph's `replay()` runs it again."""

    def new(self) -> Any: ...

    def capture(self, graph: Any, fn: Callable[[], torch.Tensor]) -> torch.Tensor: ...


@dataclass
class StaticInputs:
    """One bucket's static buffers, which the captured step reads: token ids [B], positions [B], KV slots [B], page
    tables [B, max_pages] (int32) and lengths [B] (int32)."""

    ids: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    table: torch.Tensor
    lens: torch.Tensor

    @property
    def size(self) -> int:
        return int(self.ids.shape[0])


@dataclass
class DecodeBatch:
    """A decode step as the runner builds it, on the host: per sequence its token, position, KV slot, pages (the
    page table row, unpadded) and the positions it attends to."""

    ids: list[int]
    positions: list[int]
    slots: list[int]
    tables: list[list[int]]
    lens: list[int]


@dataclass
class _Captured:
    graph: Any
    inputs: StaticInputs
    out: torch.Tensor


def buckets_up_to(limit: int) -> tuple[int, ...]:
    """1, 2, 4, 8, ... and `limit` itself: the batch sizes captured for an engine of `limit` sequences."""
    out, b = [], 1
    while b < limit:
        out.append(b)
        b *= 2
    out.append(max(1, limit))
    return tuple(out)


class DecodeGraphs:
    """Decode steps captured per batch-size bucket and replayed (module docstring)."""

    def __init__(
        self,
        step: Callable[[StaticInputs], torch.Tensor],
        api: GraphApi,
        device: str,
        buckets: Sequence[int],
        max_pages: int,
        pad_slot: int = 0,
        refresh: Callable[[StaticInputs, list[int]], None] | None = None,
    ) -> None:
        """`step(inputs)`: the decode step on static buffers -> logits [B, vocab]; `max_pages`: the page-table width
        (the longest context in pages); `pad_slot`: the KV slot padding rows write (page 0's); `refresh(inputs,
        lens)`: called before each replay with the lengths just written (host ints, padding rows' included)."""
        if not buckets or list(buckets) != sorted(set(buckets)) or buckets[0] < 1:
            raise ValueError(f"graph buckets must be increasing positive sizes, got {list(buckets)}")
        self.step = step
        self.api = api
        self.device = device
        self.buckets = tuple(buckets)
        self.max_pages = max_pages
        self.pad_slot = pad_slot
        self.refresh = refresh
        self.graphs: dict[int, _Captured] = {}
        self.replays = 0

    def bucket(self, n: int) -> int | None:
        """The smallest bucket that holds n rows, None when n is beyond the largest (the step then runs eagerly)."""
        return next((b for b in self.buckets if b >= n), None)

    def fits(self, batch: DecodeBatch) -> bool:
        return (
            bool(batch.ids)
            and self.bucket(len(batch.ids)) is not None
            and (max(len(t) for t in batch.tables) <= self.max_pages)
        )

    def _buffers(self, size: int) -> StaticInputs:
        dev = self.device
        return StaticInputs(
            ids=torch.zeros(size, dtype=torch.long, device=dev),
            positions=torch.zeros(size, dtype=torch.long, device=dev),
            slots=torch.full((size,), self.pad_slot, dtype=torch.long, device=dev),
            table=torch.zeros(size, self.max_pages, dtype=torch.int32, device=dev),
            lens=torch.ones(size, dtype=torch.int32, device=dev),
        )

    def capture(self, size: int) -> _Captured:
        """Capture the step for bucket `size` (once; later calls return it)."""
        held = self.graphs.get(size)
        if held is None:
            inputs = self._buffers(size)
            graph = self.api.new()
            out = self.api.capture(graph, lambda: self.step(inputs))
            held = self.graphs[size] = _Captured(graph, inputs, out)
            log.info("decode graph captured for batch size %d (%d pages per row)", size, self.max_pages)
        return held

    def fill(self, inputs: StaticInputs, batch: DecodeBatch) -> None:
        """Copy the batch into a bucket's buffers, padding rows past it (module docstring), in one host-to-device
        copy per buffer."""
        n, size = len(batch.ids), inputs.size
        pad = size - n
        inputs.ids.copy_(torch.tensor(batch.ids + [0] * pad, dtype=torch.long), non_blocking=True)
        inputs.positions.copy_(torch.tensor(batch.positions + [0] * pad, dtype=torch.long), non_blocking=True)
        inputs.slots.copy_(torch.tensor(batch.slots + [self.pad_slot] * pad, dtype=torch.long), non_blocking=True)
        rows = [t + [0] * (self.max_pages - len(t)) for t in batch.tables] + [[0] * self.max_pages] * pad
        inputs.table.copy_(torch.tensor(rows, dtype=torch.int32), non_blocking=True)
        inputs.lens.copy_(torch.tensor(self.padded_lens(batch, size), dtype=torch.int32), non_blocking=True)

    @staticmethod
    def padded_lens(batch: DecodeBatch, size: int) -> list[int]:
        return batch.lens + [1] * (size - len(batch.lens))

    def run(self, batch: DecodeBatch) -> torch.Tensor:
        """The batch's logits [n, vocab] from the replayed graph of its bucket."""
        n = len(batch.ids)
        size = self.bucket(n)
        if size is None or not self.fits(batch):
            raise ValueError(f"a decode batch of {n} rows does not fit the captured buckets {self.buckets}")
        held = self.capture(size)
        self.fill(held.inputs, batch)
        if self.refresh is not None:
            self.refresh(held.inputs, self.padded_lens(batch, size))
        held.graph.replay()
        self.replays += 1
        return held.out[:n]
