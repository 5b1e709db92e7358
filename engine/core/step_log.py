"""The scheduler x-ray (issue 19, point 6): one small record per engine step, and a bounded ring of the latest.

Each step's `StepRecord` says what ran together: its rows (the number every token of the step carries as its
`batch_size`), how many of them were decodes and how many prompt tokens ran beside them in how many chunks, the
short anonymous ids of the requests in it, the preemptions and the prefix-cache reuse its scheduling did, and its
time against its floor: the bytes it had to read (every weight once, plus the KV its rows attend over) at the
memory bandwidth measured when the engine started (engine/core/roofline.py). `pct` is that floor as a share of
the step's time: how close the step came to the physical limit.

The engine makes one record per step and hands its reference to each token of the step (ChoiceDelta.steps), so a
reply's x-ray and the server-wide view read the same objects. `StepLog` keeps the newest `capacity` of them for
`GET /server/steps` and the page's Server tab; nothing else is kept, so memory is bounded whatever the uptime.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

# 4096 steps: at the CPU's 20-50 ms per step that is 1.5-3 minutes of history, on an accelerator's ~10 ms about
# 40 s, either way more than the Server tab's window (STEPS_WINDOW_S) and the default `seconds` of /server/steps;
# a record is 152 bytes of slots plus its floats and its tuple of ids (the id strings are the requests' own):
# about 300 bytes with one request in the step, 500 with 16, so the ring stays under 2 MB.
DEFAULT_CAPACITY = 4096
# A request's short id: "r" and a per-engine counter in base 36 (r1, r2, ... r1a, ...). Never derived from the
# request id, so a peer's id in somebody else's x-ray says nothing about that request but that it was there.
ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def short_id(serial: int) -> str:
    digits = ""
    while True:
        serial, d = divmod(serial, 36)
        digits = ALPHABET[d] + digits
        if serial == 0:
            return "r" + digits


@dataclass(slots=True)
class StepRecord:
    """One engine step. Times are the engine's perf_counter; ms are the forward's (run and synchronised)."""

    step: int  # the engine's step counter after this step (Engine.steps)
    start: float  # perf_counter when the forward began
    ms: float  # the forward's time
    rows: int  # segments of the forward: each token of the step has this as its batch_size
    decode_rows: int  # of them, sequences decoding one token
    prompt_tokens: int  # prompt tokens prefilled in the step, in `prompt_chunks` chunks
    prompt_chunks: int
    requests: tuple[str, ...]  # short ids of the requests in the step, one per request
    preemptions: int  # requests preempted while this step was scheduled
    prefix_tokens: int  # prefix-cache tokens loaded for the requests admitted for this step
    prefix_blocks: int
    weight_bytes: int  # read once per step
    kv_bytes: int  # KV the step's rows attend over: sum of their context lengths x KV bytes per token
    floor_ms: float  # (weight_bytes + kv_bytes) / the measured bandwidth
    pct: float  # floor_ms / ms, in percent: the share of the physical limit the step reached

    def as_json(self, now: float | None = None) -> dict[str, Any]:
        """The record for /server/steps: plain numbers, requests as short ids only; `age_ms` when `now` is given."""
        doc: dict[str, Any] = {
            "step": self.step,
            "start": round(self.start, 6),
            "ms": round(self.ms, 3),
            "rows": self.rows,
            "decode_rows": self.decode_rows,
            "prompt_tokens": self.prompt_tokens,
            "prompt_chunks": self.prompt_chunks,
            "requests": list(self.requests),
            "preemptions": self.preemptions,
            "prefix_tokens": self.prefix_tokens,
            "prefix_blocks": self.prefix_blocks,
            "weight_bytes": self.weight_bytes,
            "kv_bytes": self.kv_bytes,
            "floor_ms": round(self.floor_ms, 3),
            "pct": round(self.pct, 2),
        }
        if now is not None:
            doc["age_ms"] = round((now - self.start) * 1000, 1)
        return doc

    def view(self, own: str | None) -> dict[str, Any]:
        """The step as one reply's x-ray shows it: `peers` are the other requests in it (`own` left out)."""
        return {
            "step": self.step,
            "ms": round(self.ms, 3),
            "floor_ms": round(self.floor_ms, 3),
            "pct": round(self.pct, 2),
            "rows": self.rows,
            "decode_rows": self.decode_rows,
            "prompt_tokens": self.prompt_tokens,
            "prompt_chunks": self.prompt_chunks,
            "peers": [r for r in self.requests if r != own],
            "preemptions": self.preemptions,
            "prefix_blocks": self.prefix_blocks,
            "kv_bytes": self.kv_bytes,
        }


class StepLog:
    """The newest `capacity` step records (a ring: the oldest falls out). The engine thread adds one per step; any
    thread reads. The lock is held for an append or a copy of the ring, nothing longer."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity <= 0:
            raise ValueError("a step log holds at least one record (0 turns it off: no StepLog at all)")
        self.capacity = capacity
        self._ring: deque[StepRecord] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self.total = 0  # records ever added

    def add(self, record: StepRecord) -> None:
        with self._lock:
            self._ring.append(record)
            self.total += 1

    def __len__(self) -> int:
        return len(self._ring)

    def records(self) -> list[StepRecord]:
        with self._lock:
            return list(self._ring)

    def recent(self, seconds: float, now: float | None = None) -> list[StepRecord]:
        """The records of the steps that began in the last `seconds` (oldest first)."""
        cutoff = (time.perf_counter() if now is None else now) - seconds
        out = []
        for rec in reversed(self.records()):
            if rec.start < cutoff:
                break
            out.append(rec)
        out.reverse()
        return out

    def since(self, step: int) -> list[StepRecord]:
        """The records after step number `step` still in the ring (oldest first): a poller's next batch."""
        out = []
        for rec in reversed(self.records()):
            if rec.step <= step:
                break
            out.append(rec)
        out.reverse()
        return out

    def span_s(self) -> float:
        """Seconds between the oldest and the newest record held: how far back `recent` can reach."""
        with self._lock:
            return self._ring[-1].start - self._ring[0].start if self._ring else 0.0
