"""Logits processing rules of the sampler, on small exact tensors."""

from __future__ import annotations

import math

import torch

from engine.core.sampler import Row, apply_penalties, filter_min_p, filter_top_k_top_p, processed_logits, sample_rows
from engine.core.types import SamplingParams

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)


def test_top_k_keeps_k_best() -> None:
    out = filter_top_k_top_p(torch.tensor([1.0, 4.0, 3.0, 2.0]), 2, 1.0)
    assert torch.isinf(out).tolist() == [True, False, False, True]


def test_top_p_keeps_smallest_set_reaching_p_and_always_the_best() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert torch.isfinite(filter_top_k_top_p(logits, 0, 0.8)).tolist() == [True, True, False, False]
    assert torch.isfinite(filter_top_k_top_p(logits, 0, 1e-6)).tolist() == [True, False, False, False]


def test_min_p_keeps_tokens_within_a_share_of_the_top_one() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    # 0.3 >= 0.5 * 0.5, 0.15 < 0.25: min_p is relative to the top token, not a mass like top_p.
    assert torch.isfinite(filter_min_p(logits, 0.5)).tolist() == [True, True, False, False]
    assert torch.isfinite(filter_min_p(logits, 0.1)).tolist() == [True, True, True, True]
    assert torch.isfinite(filter_min_p(logits, 1.0)).tolist() == [True, False, False, False]
    assert filter_min_p(logits, 0.0) is logits  # off: untouched
    # After temperature, as the draw sees it: a hot temperature flattens the distribution and lets more survive.
    row = Row(SamplingParams(temperature=2.0, min_p=0.5), torch.Generator(), [], [])
    kept, highest = processed_logits(logits.clone(), row)
    assert not highest and torch.isfinite(kept).tolist() == [True, True, True, False]


def test_min_p_draws_only_survivors_for_any_seed() -> None:
    logits = torch.log(torch.tensor([[0.4, 0.35, 0.2, 0.05]]))
    for seed in range(40):
        row = Row(SamplingParams(min_p=0.6), torch.Generator().manual_seed(seed), [], [])
        assert sample_rows(logits, [row])[0][0] in (0, 1)


def test_repetition_penalty_is_multiplicative_on_sign() -> None:
    r = Row(SamplingParams(repetition_penalty=2.0), torch.Generator(), [0], [1])
    out = apply_penalties(torch.tensor([4.0, -4.0, 4.0]), r)
    assert out.tolist() == [2.0, -8.0, 4.0]


def test_presence_and_frequency_penalties_count_output_tokens() -> None:
    r = Row(SamplingParams(presence_penalty=0.5, frequency_penalty=0.25), torch.Generator(), [2], [1, 1, 0])
    out = apply_penalties(torch.zeros(3), r)
    assert out.tolist() == [-0.75, -1.0, 0.0]  # token 2 is only in the prompt: untouched


def test_greedy_and_logprob_come_from_raw_logits() -> None:
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    ((token, lp, entry),) = sample_rows(
        logits,
        [
            Row(
                SamplingParams(temperature=0, logprobs=True, top_logprobs=2, repetition_penalty=1.5),
                torch.Generator(),
                [1],
                [],
            )
        ],
    )
    raw = torch.log_softmax(logits[0], -1)
    assert token == 1 and math.isclose(lp, float(raw[1]), rel_tol=1e-6)
    assert [t for t, _ in entry.top] == [1, 2]


def draws(seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    rows = [Row(SamplingParams(), gen, [0], [])]
    return [sample_rows(torch.zeros(1, 1000), rows)[0][0] for _ in range(5)]


def test_same_seed_same_draws_different_seed_differs() -> None:
    assert draws(7) == draws(7)
    assert draws(7) != draws(8)
