"""How many threads the engine thread's steps run on, chosen by timing them.

A step splits each operation over a team of OpenMP threads and waits at the end of each for the slowest member.
When another process keeps one of the cores busy (a browser tab, a notebook kernel, a second server), the team
member on that core runs only when the scheduler gives it a turn, and a step of a few hundred parallel regions
waits for it a few hundred times: on 2 cores a single stream fell from 95 to 6.4 tokens/s with one core taken
(issue 15). A smaller team then finishes sooner. `ThreadTuner` times the steps, now and then runs a few steps of
the same shape with the next team size down (or back up), keeps whichever is clearly faster, and looks again at
once when steps of a shape it has timed before suddenly take much longer or much less (a neighbour came or went).

The team size is the engine thread's own: `omp_set_num_threads` sets OpenMP's nthreads ICV of the calling thread,
which is what torch's intra-op ops and the CPU kernels started from that thread use. Nothing process-wide changes:
another thread (a notebook cell, Whisper on a request thread) keeps its own, and `torch.set_num_threads` is never
called. Where the OpenMP runtime torch uses cannot be found (a torch build without OpenMP), the tuner stays off.
"""

from __future__ import annotations

import ctypes
import logging
import statistics
from collections import deque
from typing import Any

log = logging.getLogger(__name__)

WINDOW = 4  # recent steps of one shape, at the current team size, that a probe is compared with
PROBE = 3  # steps at the other team size in one probe (their median: one slow outlier does not decide)
MARGIN = 0.85  # the other size must be at least this much faster to be taken
CHANGE = 1.6  # steps this much slower or faster than when last timed at this size: look again now
# Steps between probes, doubled after each probe that changes nothing, up to a cap: a probe from all threads costs
# about one step in a few hundred, while one from a reduced team up into a busy core costs several steps each.
MIN_PERIOD, MAX_PERIOD, MAX_PERIOD_REDUCED = 16, 256, 1024


def _openmp() -> Any:
    """torch's OpenMP runtime (loaded with torch; the CPU kernels link the same soname), or None."""
    import torch

    if "OpenMP" not in torch.__config__.parallel_info():
        return None
    try:
        lib = ctypes.CDLL("libgomp.so.1")
    except OSError:
        return None
    lib.omp_get_max_threads.restype = ctypes.c_int
    lib.omp_set_num_threads.argtypes = [ctypes.c_int]
    return lib


def team_sizes(most: int) -> list[int]:
    """The sizes tried, largest first: all threads, then halves down to one (16 -> 16, 8, 4, 2, 1)."""
    sizes = [most]
    while sizes[-1] > 1:
        sizes.append(sizes[-1] // 2)
    return sizes


class ThreadTuner:
    """Call `before_step()` on the engine thread before each step and `after_step(shape, seconds)` after it.
    `shape` names steps that cost the same (the engine passes its decode rows for steps without prompt tokens,
    None for the others, which are run but not timed)."""

    def __init__(self, enabled: bool = True) -> None:
        import torch

        self._omp = _openmp() if enabled else None
        self.sizes = team_sizes(torch.get_num_threads()) if self._omp is not None else [torch.get_num_threads()]
        self.enabled = self._omp is not None and len(self.sizes) > 1
        self.current = 0  # index into sizes
        self.switches = 0
        self._applied: int | None = None
        self._recent: deque[tuple[Any, float]] = deque(maxlen=WINDOW)
        self._probe: tuple[int, Any, list[float]] | None = None  # (size index, shape, times)
        self._reference: dict[Any, float] = {}  # per shape, the median of its steps at the current size
        self._since_probe = 0
        self._period = MIN_PERIOD
        self._downward = True  # direction of the next probe from a middle size

    @property
    def threads(self) -> int:
        """The team size steps run with now (a probe's size while one runs)."""
        return self.sizes[self._probe[0] if self._probe else self.current]

    def before_step(self) -> int:
        if self.enabled and self._applied != self.threads:
            assert self._omp is not None  # enabled only with a libgomp handle
            import torch

            torch.get_num_threads()  # torch sets this thread's size on its first call: let it happen first
            self._omp.omp_set_num_threads(self.threads)
            self._applied = self.threads
        return self.threads

    def after_step(self, shape: Any, seconds: float) -> None:
        if not self.enabled or shape is None:
            if self._probe is not None:
                self._probe = None  # a step of another kind came between: this probe compares nothing
            return
        if self._probe is not None:
            self._probe_step(shape, seconds)
            return
        if self._recent and self._recent[-1][0] != shape:
            self._recent.clear()
        self._recent.append((shape, seconds))
        self._since_probe += 1
        if len(self._recent) < WINDOW:
            return
        now = statistics.median(t for _, t in self._recent)
        ref = self._reference.setdefault(shape, now)
        changed = now > CHANGE * ref or now * CHANGE < ref
        if changed or self._since_probe >= self._period:
            self._start_probe(shape)

    def _start_probe(self, shape: Any) -> None:
        last = len(self.sizes) - 1
        if self.current == 0:
            other = 1
        elif self.current == last:
            other = last - 1
        else:
            other = self.current + (1 if self._downward else -1)
            self._downward = not self._downward
        self._probe = (other, shape, [])

    def _probe_step(self, shape: Any, seconds: float) -> None:
        assert self._probe is not None  # called only while a probe runs
        other, probed, times = self._probe
        if shape != probed:
            self._probe = None  # the batch changed under the probe: try again at the next chance
            return
        times.append(seconds)
        if len(times) < PROBE:
            return
        self._probe = None
        self._since_probe = 0
        mine = statistics.median(t for _, t in self._recent)
        theirs = statistics.median(times)
        if theirs < MARGIN * mine:
            log.info(
                "engine threads %d -> %d: steps of %s took %.1f ms instead of %.1f ms (%s)",
                self.sizes[self.current],
                self.sizes[other],
                shape,
                theirs * 1e3,
                mine * 1e3,
                "another process is using these cores" if other > self.current else "the cores are free again",
            )
            self.current = other
            self.switches += 1
            self._period = MIN_PERIOD
            self._recent.clear()
            self._reference = {shape: theirs}  # what other shapes took at the old size says nothing now
        else:
            self._period = min(2 * self._period, MAX_PERIOD if self.current == 0 else MAX_PERIOD_REDUCED)
            self._reference[shape] = mine
