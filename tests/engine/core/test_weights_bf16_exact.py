"""engine/core/weights.py `bf16_exact`: whether a model's matrices lose nothing kept in bf16, read from the float32
bits in place; the same answer as the round trip float32 -> bf16 -> float32 it replaced."""

from __future__ import annotations

import pytest
import torch

from engine.core.weights import _bf16_exact, bf16_exact


def round_trip(w: torch.Tensor) -> bool:
    return torch.equal(w.to(torch.bfloat16).to(w.dtype), w)


def nudged() -> torch.Tensor:
    w = torch.randn(64, 32).bfloat16().float()
    w[7, 5] = torch.nextafter(w[7, 5], torch.tensor(float("inf")))  # one value one float32 step off bf16
    return w


@pytest.mark.parametrize(
    "w",
    [
        torch.randn(64, 32),
        torch.randn(64, 32).bfloat16().float(),
        nudged(),
        torch.tensor([[float("inf"), float("-inf"), -0.0, 0.0, 1.0, -3.5]]),
        torch.randn(32, 64).bfloat16().float().t(),  # not contiguous: the round trip
        torch.randn(16, 8).half(),  # float16: the round trip
        torch.randn(16, 8).half().float().bfloat16().float()[:, 1:],
    ],
    ids=["random", "bf16 values", "one value off", "specials", "transposed", "float16", "sliced"],
)
def test_the_bits_agree_with_the_round_trip(w: torch.Tensor) -> None:
    assert _bf16_exact(w) == round_trip(w)


def test_a_model_is_exact_when_every_matrix_is() -> None:
    model = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 8))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.bfloat16().float())
        assert bf16_exact(model)
        model[1].weight[0, 0] = torch.nextafter(model[1].weight[0, 0], torch.tensor(float("inf")))
    assert not bf16_exact(model)
