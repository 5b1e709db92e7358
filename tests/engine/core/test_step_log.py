"""The step log of the scheduler x-ray (engine/core/step_log.py): a ring bounded at its capacity, `recent(seconds)`
and `since(step)` over it, the records' JSON and per-reply views, short ids, and the roofline's arithmetic."""

from __future__ import annotations

import pytest

from engine.core.roofline import Roofline
from engine.core.step_log import StepLog, StepRecord, short_id


def record(step: int, start: float, requests: tuple[str, ...] = ("r1",), ms: float = 10.0) -> StepRecord:
    return StepRecord(
        step=step,
        start=start,
        ms=ms,
        rows=len(requests),
        decode_rows=len(requests),
        prompt_tokens=0,
        prompt_chunks=0,
        requests=requests,
        preemptions=0,
        prefix_tokens=0,
        prefix_blocks=0,
        weight_bytes=1000,
        kv_bytes=24,
        floor_ms=2.5,
        pct=25.0,
    )


def test_the_ring_never_holds_more_than_its_capacity_and_keeps_the_newest() -> None:
    log = StepLog(8)
    for i in range(1, 101):
        log.add(record(i, float(i)))
        assert len(log) == min(i, 8)
    assert [r.step for r in log.records()] == list(range(93, 101))
    assert log.total == 100 and log.span_s() == 7.0


def test_recent_gives_the_steps_begun_in_the_last_seconds_oldest_first() -> None:
    log = StepLog(100)
    for i in range(50):
        log.add(record(i + 1, 1000.0 + 0.1 * i))  # a step every 100 ms, the last at 1004.9
    got = log.recent(1.0, now=1005.0)
    assert [r.step for r in got] == list(range(41, 51))  # began at 1004.0 .. 1004.9
    assert log.recent(0.05, now=1005.0) == []
    assert len(log.recent(3600, now=1005.0)) == 50  # no further back than the ring holds


def test_since_gives_what_a_poller_has_not_seen() -> None:
    log = StepLog(4)
    for i in range(1, 11):
        log.add(record(i, float(i)))
    assert [r.step for r in log.since(8)] == [9, 10]
    assert [r.step for r in log.since(0)] == [7, 8, 9, 10]  # what the ring still holds
    assert log.since(10) == []


def test_a_log_of_no_records_is_refused() -> None:
    with pytest.raises(ValueError):
        StepLog(0)


def test_short_ids_are_a_counter_in_base_36() -> None:
    assert [short_id(n) for n in (1, 9, 10, 35, 36, 46, 1295, 1296)] == [
        "r1",
        "r9",
        "ra",
        "rz",
        "r10",
        "r1a",
        "rzz",
        "r100",
    ]


def test_a_reply_sees_its_peers_without_itself_and_the_wire_sees_short_ids() -> None:
    rec = record(7, 12.5, ("r1", "r2", "r3"))
    assert rec.view("r2")["peers"] == ["r1", "r3"] and rec.view("r2")["rows"] == 3
    doc = rec.as_json(now=12.75)
    assert doc["requests"] == ["r1", "r2", "r3"] and doc["age_ms"] == 250.0 and doc["pct"] == 25.0
    assert not hasattr(rec, "__dict__")  # slots: one small object per step


def test_the_floor_is_the_bytes_over_the_bandwidth() -> None:
    roof = Roofline(bandwidth=10e9, weight_bytes=270_000_000, kv_bytes_per_token=46_080)
    assert roof.floor_ms([]) == pytest.approx(27.0)
    assert roof.floor_ms([600, 400]) == pytest.approx((270e6 + 46.08e6) / 10e9 * 1000)
    assert roof.as_json() == {"bandwidth_gbs": 10.0, "weight_bytes": 270_000_000, "kv_bytes_per_token": 46_080}
    # Sliding-window layers (5 of 6 bytes here) read only their window's 512 positions of a 1000-token context.
    windowed = Roofline(bandwidth=10e9, weight_bytes=0, kv_bytes_per_token=6, window=512, window_bytes_per_token=5)
    assert windowed.kv_bytes([1000, 100]) == 1000 * 1 + 512 * 5 + 100 * 6
