"""The samplers' "after" distribution (`sampler_logprobs`): what a row records is what its draw used, on small
exact tensors; rows that do not ask record nothing; seeds draw exactly what they drew before the refactor."""

from __future__ import annotations

import math

import pytest
import torch

from engine.core.sampler import Row, apply_penalties, filter_top_k_top_p, processed_logits, sample_rows
from engine.core.types import SamplingParams
from engine.protocol.response import ChoiceLogprobs, LogprobEntry, TopLogprob

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)

ASK = {"logprobs": True, "top_logprobs": 5, "sampler_logprobs": True}


def one(
    logits: list[float],
    prompt: list[int] | None = None,
    output: list[int] | None = None,
    *,
    seed: int = 0,
    mask: list[bool] | None = None,
    forced: int | None = None,
    **params: object,
):
    row = Row(
        SamplingParams(**{**ASK, **params}),
        torch.Generator().manual_seed(seed),
        prompt or [],
        output or [],
        forced,
        None if mask is None else torch.tensor(mask),
    )
    ((token, lp, entry),) = sample_rows(torch.tensor([logits]), [row])
    return token, lp, entry


def test_top_k_1_leaves_one_token_at_probability_one() -> None:
    token, _, e = one([1.0, 3.0, 2.0, 0.0], temperature=0.8, top_k=1)
    assert token == 1 and e.processed == [(1, 0.0)] and e.processed_logprob == 0.0
    assert [t for t, _ in e.top] == [1, 2, 0, 3]  # the model's own view is untouched: all four, raw


def test_after_is_temperature_then_top_k_and_the_draw_replays_from_it() -> None:
    logits = [0.5, 2.0, 1.0, 1.5, -1.0, 0.0]
    for seed in range(20):
        token, _, e = one(logits, seed=seed, temperature=0.7, top_k=3)
        expected = torch.log_softmax(torch.tensor([2.0, 1.5, 1.0]) / 0.7, -1).tolist()
        assert [t for t, _ in e.processed] == [1, 3, 2]  # the three kept, best first; the removed ones absent
        assert [v for _, v in e.processed] == pytest.approx(expected, abs=1e-6)
        assert e.processed_logprob == pytest.approx(dict(e.processed)[token])
        # The recorded distribution is the whole one here (3 survivors < 5 asked): drawn with the same seed, it
        # gives the same token.
        probs = torch.zeros(len(logits))
        for t, v in e.processed:
            probs[t] = math.exp(v)
        assert int(torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(seed))) == token


def test_top_p_drops_the_tail_and_the_survivors_sum_to_one() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])).tolist()
    _, _, e = one(logits, temperature=1.0, top_p=0.8)
    assert [t for t, _ in e.processed] == [0, 1]
    assert sum(math.exp(v) for _, v in e.processed) == pytest.approx(1.0)
    assert [v for _, v in e.processed] == pytest.approx([math.log(0.5 / 0.8), math.log(0.3 / 0.8)], abs=1e-5)


def test_penalties_show_in_after_and_greedy_takes_its_highest_without_temperature() -> None:
    token, lp, e = one([2.0, 1.9, 0.0], output=[0], temperature=0.0, presence_penalty=1.0)
    assert e.top[0][0] == 0  # the model liked token 0 best ...
    assert token == 1 and e.processed[0][0] == 1  # ... the penalty moved it below token 1, which was taken
    expected = torch.log_softmax(torch.tensor([1.0, 1.9, 0.0]), -1)  # penalised, no temperature
    assert [v for _, v in e.processed] == pytest.approx(sorted(expected.tolist(), reverse=True), abs=1e-6)
    assert e.processed_logprob == pytest.approx(float(expected[1])) and lp == pytest.approx(e.top[1][1])


def test_repetition_penalty_on_prompt_tokens_shows_in_after() -> None:
    _, _, e = one([4.0, 3.0, 0.0], prompt=[0], temperature=0.0, repetition_penalty=2.0)
    assert [t for t, _ in e.top][:2] == [0, 1] and [t for t, _ in e.processed][:2] == [1, 0]


def test_a_constraint_mask_removes_tokens_from_after_only() -> None:
    token, _, e = one([3.0, 2.0, 1.0, 0.0], mask=[False, True, False, True], temperature=1.0, seed=3)
    assert [t for t, _ in e.processed] == [1, 3]  # -inf ones are dropped, not listed
    assert token in (1, 3) and math.isfinite(e.processed_logprob)
    assert [t for t, _ in e.top] == [0, 1, 2, 3]


def test_a_forced_token_records_an_empty_after_and_no_logprob() -> None:
    token, _, e = one([3.0, 2.0, 1.0], forced=2, temperature=1.0)
    assert token == 2 and e.processed == [] and e.processed_logprob is None


def test_plain_greedy_after_equals_before() -> None:
    token, _, e = one([0.0, 2.0, 1.0], temperature=0.0, top_logprobs=2)
    assert token == 1 and e.processed == e.top and e.processed_logprob == e.logprob


def test_a_temperature_that_overflows_is_greedy_and_recorded_without_it() -> None:
    logits = torch.tensor([1.0, 3.0, 2.0])
    processed, highest = processed_logits(
        logits.clone(), Row(SamplingParams(temperature=1e-45), torch.Generator(), [], [])
    )
    assert highest and processed.tolist() == logits.tolist()
    token, _, e = one(logits.tolist(), temperature=1e-45)
    assert token == 1 and e.processed[0][0] == 1


def test_rows_that_do_not_ask_record_nothing_after() -> None:
    for params in ({"temperature": 0.0}, {"temperature": 0.9, "top_k": 2}, {"temperature": 0.0, "presence_penalty": 1}):
        _, _, e = one([1.0, 2.0, 3.0], output=[2], sampler_logprobs=False, **params)
        assert e.processed is None and e.processed_logprob is None


def old_choose(logits: torch.Tensor, row: Row) -> int:
    """sampler.choose as it was before `processed_logits` (commit 0601ca0), the reference for the seeds."""
    p = row.params
    logits = apply_penalties(logits, row)
    if p.greedy:
        return int(torch.argmax(logits))
    scaled = logits / p.temperature
    if not torch.isfinite(scaled.max()):
        return int(torch.argmax(logits))
    logits = filter_top_k_top_p(scaled, p.top_k, p.top_p)
    probs = logits.softmax(-1)
    return int(torch.multinomial(probs, 1, generator=row.generator))


SETTINGS = [
    {"temperature": 1.0},
    {"temperature": 0.7, "top_k": 5},
    {"temperature": 1.3, "top_p": 0.9},
    {
        "temperature": 0.8,
        "top_k": 20,
        "top_p": 0.95,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.3,
        "repetition_penalty": 1.2,
    },
    {"temperature": 0.0, "repetition_penalty": 1.5},
]


@pytest.mark.parametrize("settings", SETTINGS)
def test_seeds_draw_what_they_drew_before_whether_or_not_the_row_asks(settings: dict[str, float]) -> None:
    vocab, steps = 200, 12
    logits = torch.randn(steps, vocab, generator=torch.Generator().manual_seed(11)) * 3

    def run(how: str) -> list[int]:
        gen, out = torch.Generator().manual_seed(1234), []
        for step in range(steps):
            params = SamplingParams(**settings, logprobs=how != "old", top_logprobs=3, sampler_logprobs=how == "ask")
            row = Row(params, gen, [1, 2, 3], list(out))
            if how == "old":
                out.append(old_choose(logits[step].clone(), row))
            else:
                out.append(sample_rows(logits[step : step + 1], [row])[0][0])
        return out

    assert run("old") == run("plain") == run("ask")


def test_the_json_has_the_after_keys_only_when_asked() -> None:
    plain = LogprobEntry(
        token="a", logprob=-0.5, bytes=[97], top_logprobs=[TopLogprob(token="a", logprob=-0.5, bytes=[97])]
    )
    assert set(plain.model_dump()) == {"token", "logprob", "bytes", "top_logprobs"}
    asked = plain.model_copy(
        update={"sampler_logprob": 0.0, "sampler_top_logprobs": [TopLogprob(token="a", logprob=0.0, bytes=[97])]}
    )
    dumped = ChoiceLogprobs(content=[asked]).model_dump()["content"][0]
    assert dumped["sampler_logprob"] == 0.0 and dumped["sampler_top_logprobs"][0]["token"] == "a"
    forced = plain.model_copy(update={"sampler_top_logprobs": []})
    assert forced.model_dump()["sampler_logprob"] is None and forced.model_dump()["sampler_top_logprobs"] == []
    assert LogprobEntry.model_validate(dumped) == asked
