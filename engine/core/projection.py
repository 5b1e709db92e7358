"""One linear projection of the lean runner: x @ w.T with the model's own weight, done the fast way per shape.

Weights kept in bf16 for float32 activations (a CPU with the AVX2 kernels, engine/core/cpu_kernels.py): up to
KERNEL_ROWS rows (a full default step: 256 prompt tokens beside 32 decodes) go through the kernel, which widens
the weights as it reads them and so streams half the bytes; a longer step widens the whole matrix once and takes
the BLAS. `bench/cpu_kernels.py --batch 64,128,288,512`: the kernel ahead up to 288 rows (124 vs 167 ms for the
30 layers at 64, 550 vs 702 at 288 in one run), the BLAS ahead by 512 (1,333 vs 1,209).

Weights in the activations' dtype: for a handful of rows (a decode batch) the CPU BLAS packs the weight on every
call when asked for x @ w.T, while w @ x.T streams it once: 1.5-2.5x faster at 2..32 rows and 2.5x on the
vocabulary projection at 4 rows (measured on 2 AVX2 cores; see bench/README.md). Quantised forms were measured
and not adopted (bench/quant_probe.py).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

KERNEL_ROWS = 320


class Projection:
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, kernels: Any = None) -> None:
        self.weight, self.bias = weight, bias
        self.kernels = kernels if weight.dtype == torch.bfloat16 else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        if self.kernels is not None and x.dtype == torch.float32:
            if rows <= KERNEL_ROWS:
                return self.kernels.linear_bf16(x, self.weight, self.bias)
            return F.linear(x, self.weight.float(), self.bias)
        if rows == 1 or rows > 64:
            return F.linear(x, self.weight, self.bias)
        out = torch.mm(self.weight, x.t()).t().contiguous()
        return out + self.bias if self.bias is not None else out
