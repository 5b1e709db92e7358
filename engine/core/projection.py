"""One linear projection of the lean runner: x @ w.T with the model's own weight, done the fast way per shape.

For a handful of rows (a decode batch) the CPU BLAS packs the weight on every call when asked for x @ w.T, while
w @ x.T streams it once: 1.5-2.5x faster at 2..32 rows and 2.5x on the vocabulary projection at 4 rows (measured
on 2 AVX2 cores; see bench/README.md). Quantised forms were measured and not adopted (bench/quant_probe.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class Projection:
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        self.weight, self.bias = weight, bias

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        if rows == 1 or rows > 64:
            return F.linear(x, self.weight, self.bias)
        out = torch.mm(self.weight, x.t()).t().contiguous()
        return out + self.bias if self.bias is not None else out
