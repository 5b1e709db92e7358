"""The engine thread's team size (engine/core/threads.py): the tuner's decisions on step timings, that the size it
sets is the engine thread's own, and that steps give the same logits whatever the size."""

from __future__ import annotations

import threading

import pytest
import torch

from engine.core import threads
from engine.core.threads import MAX_PERIOD_REDUCED, MIN_PERIOD, PROBE, WINDOW, ThreadTuner, team_sizes

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)


def test_team_sizes_halve_down_to_one() -> None:
    assert team_sizes(1) == [1]
    assert team_sizes(2) == [2, 1]
    assert team_sizes(16) == [16, 8, 4, 2, 1]
    assert team_sizes(6) == [6, 3, 1]


def drive(tuner: ThreadTuner, cost: dict[int, float], steps: int, shape: object = 8) -> list[int]:
    """Run `steps` steps of one shape where a step at team size n takes cost[n] seconds; the sizes used."""
    used = []
    for _ in range(steps):
        n = tuner.before_step()
        used.append(n)
        tuner.after_step(shape, cost[n])
    return used


def two_thread_tuner() -> ThreadTuner:
    tuner = ThreadTuner(enabled=True)
    if not tuner.enabled:
        pytest.skip("no OpenMP runtime found for torch, or one core: the tuner stays off")
    tuner.sizes = [2, 1]  # the decisions below are about two cores, whatever this machine has
    return tuner


def run_on_own_thread(fn) -> object:
    """The tuner sets the calling thread's team size: run each scenario on a thread of its own."""
    box: list[object] = []
    worker = threading.Thread(target=lambda: box.append(fn()))
    worker.start()
    worker.join()
    return box[0]


def test_idle_cores_keep_every_thread_and_probe_less_often() -> None:
    def scenario() -> tuple[list[int], ThreadTuner]:
        tuner = two_thread_tuner()
        return drive(tuner, {2: 0.010, 1: 0.018}, 600), tuner

    used, tuner = run_on_own_thread(scenario)
    assert tuner.threads == 2 and tuner.switches == 0
    probes = used.count(1) // PROBE
    assert 2 <= probes <= 6, used  # 16, 32, 64, 128, 256 steps apart: the cost of looking falls off
    assert tuner._period > MIN_PERIOD


def test_a_busy_neighbour_moves_to_one_thread_and_back_when_it_leaves() -> None:
    def scenario() -> tuple[list[int], list[int], ThreadTuner]:
        tuner = two_thread_tuner()
        drive(tuner, {2: 0.010, 1: 0.018}, 100)
        # another process takes a core: a two-thread step now waits for the descheduled thread at every region
        busy = drive(tuner, {2: 0.150, 1: 0.020}, 100)
        calm = drive(tuner, {2: 0.010, 1: 0.018}, 3 * MAX_PERIOD_REDUCED)
        return busy, calm, tuner

    busy, calm, tuner = run_on_own_thread(scenario)
    assert busy[-1] == 1 and busy.index(1) < WINDOW + 1, busy  # the slowdown triggers a look at once
    assert calm[-1] == 2 and tuner.switches == 2, calm


def test_a_neighbour_arriving_between_batch_sizes_is_seen_at_once() -> None:
    """Measured on the server: one stream, then 16, then the neighbour arrives as one stream runs again. The 16-row
    steps had stretched the period; the single-row steps are compared with their own earlier timing."""

    def scenario() -> tuple[list[int], ThreadTuner]:
        tuner = two_thread_tuner()
        drive(tuner, {2: 0.016, 1: 0.027}, 200, shape=1)
        drive(tuner, {2: 0.060, 1: 0.100}, 1000, shape=16)
        return drive(tuner, {2: 0.170, 1: 0.030}, 60, shape=1), tuner

    busy, tuner = run_on_own_thread(scenario)
    assert busy.index(1) <= WINDOW, busy
    assert tuner.sizes[tuner.current] == 1 and busy.count(2) < 12, busy  # later probes up stay short


def test_steps_of_another_shape_do_not_decide() -> None:
    def scenario() -> ThreadTuner:
        tuner = two_thread_tuner()
        for i in range(400):  # the batch size changes every step: no probe ever compares like with like
            n = tuner.before_step()
            tuner.after_step(i % 3, {2: 0.5, 1: 0.001}[n])
        return tuner

    assert run_on_own_thread(scenario).switches == 0


def test_the_team_size_is_the_calling_threads_own() -> None:
    if threads._openmp() is None:
        pytest.skip("no OpenMP runtime found for torch")
    before = torch.get_num_threads()
    if before < 2:
        pytest.skip("one core: nothing to shrink")

    def engine_thread() -> tuple[int, int]:
        tuner = ThreadTuner(enabled=True)
        tuner.current = len(tuner.sizes) - 1
        tuner.before_step()
        x = torch.randn(256, 256)
        torch.mm(x, x)  # torch's own ops run, and keep the size
        return torch.get_num_threads(), tuner.threads

    inside, chosen = run_on_own_thread(engine_thread)
    assert inside == chosen == 1
    assert torch.get_num_threads() == before  # this thread, and the process, never saw it


def test_steps_give_the_same_logits_on_one_thread_as_on_all(service) -> None:
    """What the tuner changes must not change answers: a mixed prompt + decode step, bit for bit."""
    from engine.core.model_runner import KVCache, Segment

    runner = service.engine.runner
    if threads._openmp() is None or torch.get_num_threads() < 2:
        pytest.skip("no OpenMP runtime found for torch, or one core")

    def logits(size: int) -> list[torch.Tensor]:
        tuner = ThreadTuner(enabled=True)
        tuner.current = tuner.sizes.index(size) if size in tuner.sizes else 0
        tuner.before_step()
        a, b, c = KVCache(), KVCache(), KVCache()
        with torch.inference_mode():
            first = runner.forward([Segment(a, list(range(100, 140))), Segment(b, [5, 6, 7])])
            second = runner.forward([Segment(a, [42]), Segment(b, [43]), Segment(c, [9, 10, 11, 12])])
        for cache in (a, b, c):
            runner.release(cache)
        return [first.clone(), second.clone()]

    one = run_on_own_thread(lambda: logits(1))
    every = run_on_own_thread(lambda: logits(torch.get_num_threads()))
    for x, y in zip(one, every):
        assert torch.equal(x, y)
