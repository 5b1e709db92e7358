"""MindIE's per-token statistics from the engine's per-token facts, true under speculative decoding.

The engine records, for every token, when it was ready (the end of the step that made it) and how long its
sequence waited before that step. A step that yields k tokens of a sequence (accepted speculative drafts and the
token after them, engine/core/speculative.py) gives its k tokens the same ready time and the wait to its first one
only. MindIE clients divide by `decode_time_arr` and `queue_wait_time`, so here such a step's time and its wait are
spread over its k tokens: each entry > 0, the entries of the step summing to the step's time (its wait). Where a
step was shorter than k whole units (ms for times, µs for waits) each of its entries is 1, and the sum exceeds the
step's by less than k units. The page's timeline keeps the facts (it marks the drafted tokens on them).
"""

from __future__ import annotations


def spread(total: int, k: int) -> list[int]:
    """`total` whole units over k entries as evenly as possible, the larger ones first; each at least 1."""
    base, extra = divmod(max(0, total), k)
    return [max(1, base + (i < extra)) for i in range(k)]


def _steps(times_ms: list[float]) -> list[tuple[int, int]]:
    """[start, end) index ranges of the tokens made by one step: runs of the same ready time."""
    runs: list[tuple[int, int]] = []
    for i, t in enumerate(times_ms):
        if runs and i > 0 and t == times_ms[i - 1]:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def decode_times(times_ms: list[float]) -> tuple[int, list[int]]:
    """(`prefill_time`, `decode_time_arr`) from each token's ready time in ms since acceptance: whole ms to the
    first token, then whole ms per later token (rounded before the difference), a step's time spread over its
    tokens."""
    if not times_ms:
        return 0, []
    ms = [round(t) for t in times_ms]
    out: list[int] = []
    for a, b in _steps(times_ms):
        if a == 0:  # the first token's step: its time is the prefill; any other token of it took none
            out += spread(0, b - 1) if b > 1 else []
            continue
        out += spread(ms[b - 1] - ms[a - 1], b - a)
    return ms[0], out


def queue_waits(times_ms: list[float], waits_us: list[int]) -> list[int]:
    """`queue_wait_time`: each token's wait before its step in µs, a step's wait spread over its tokens."""
    if len(times_ms) != len(waits_us):  # no timeline to group by: the waits as they are
        return list(waits_us)
    out: list[int] = []
    for a, b in _steps(times_ms):
        out += [waits_us[a]] if b - a == 1 else spread(sum(waits_us[a:b]), b - a)
    return out
