"""One linear projection of the lean runner: x @ w.T with the model's own weight, done the fast way per shape.

Weights kept in bf16 for float32 activations (a CPU with the AVX2 kernels, engine/core/cpu_kernels.py): up to
KERNEL_ROWS rows (a full default step: 256 prompt tokens beside 32 decodes) go through the kernel, which widens
the weights as it reads them and so streams half the bytes; a longer step widens the whole matrix once and takes
the BLAS. `bench/cpu_kernels.py --batch 64,128,288,512`: the kernel ahead up to 288 rows (124 vs 167 ms for the
30 layers at 64, 550 vs 702 at 288 in one run), the BLAS ahead by 512 (1,333 vs 1,209).

`--dtype bf16` on a CPU with the kernels (`mixed`): the same, except that from `bf16_from` rows the input is
rounded to bf16 for oneDNN's bf16 matmul (bf16 dot products, twice the float32 multiply-adds per instruction
where the CPU has AVX512_BF16 or AMX), the bias added in float32. oneDNN gets the weight packed once, at load, in
its own blocked layout (torch's mkldnn linear ops, the ones torch.compile uses on CPU): `F.linear` on the plain
bf16 weight repacks it on every call, which made it 2-4x slower at 4-32 rows. Where the two cross depends on the
matrix and the CPU (`bench/cpu_kernels.py` on a 2-core AVX-512 EPYC: SmolLM2's layers, the kernel ahead at 8 rows,
27.7 vs 31.9 ms, oneDNN from 16, 32.7 vs 44.9, and 2.1x at 288; Qwen2.5-0.5B's, oneDNN ahead from 8 rows, 69 vs
87), so `calibrate_bf16` times both on the model's own matrices at load and sets it per matrix shape.

Weights in the activations' dtype: for a handful of rows (a decode batch) the CPU BLAS packs the weight on every
call when asked for x @ w.T, while w @ x.T streams it once: 1.5-2.5x faster at 2..32 rows and 2.5x on the
vocabulary projection at 4 rows (measured on 2 AVX2 cores; see bench/README.md). Quantized weights
(`--quantization`) are quant.QuantProjection, which replaces this class for a model's layers.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

KERNEL_ROWS = 320
BF16_MATMUL_ROWS = 12  # where bf16 inputs start before calibration
CALIBRATION_ROWS = (2, 4, 6, 8, 12, 16, 24)
PACK_ROWS = 16  # the batch oneDNN lays the packed weight out for (1 and 16 measured alike at 1-32 rows)
# oneDNN keeps what it builds for each distinct row count, a few MB each that are never given back: every row count
# from 1 to 299 on SmolLM2's five matrix shapes took a process from 0.35 to 6.4 GB (and a 10-minute soak at 32
# streams grew 255 MB). Rows padded up to a multiple of ROW_BUCKET bound it (0.50 GB for the same sweep).
ROW_BUCKET = 8


class Projection:
    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None = None, kernels: Any = None, mixed: bool = False
    ) -> None:
        self.weight, self.bias = weight, bias
        self.kernels = kernels if weight.dtype == torch.bfloat16 else None
        self.mixed = mixed and self.kernels is not None
        self.bf16_from = BF16_MATMUL_ROWS  # rows from which a mixed projection takes bf16 inputs
        self.packed = _pack(weight) if self.mixed else None  # the weight in oneDNN's layout (a second copy)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        if self.mixed and rows >= self.bf16_from:
            return self.bf16_matmul(x)
        if self.kernels is not None and x.dtype == torch.float32:
            if rows <= KERNEL_ROWS:
                return self.kernels.linear_bf16(x, self.weight, self.bias)
            return F.linear(x, self.weight.float(), self.bias)
        if rows == 1 or rows > 64:
            return F.linear(x, self.weight, self.bias)
        out = torch.mm(self.weight, x.t()).t().contiguous()
        return out + self.bias if self.bias is not None else out

    def bf16_matmul(self, x: torch.Tensor) -> torch.Tensor:
        x16 = x.to(torch.bfloat16)
        if self.packed is not None:
            rows = x.shape[0]
            padded = -(-rows // ROW_BUCKET) * ROW_BUCKET
            if padded != rows:
                x16 = F.pad(x16, (0, 0, 0, padded - rows))
            out = torch.ops.mkldnn._linear_pointwise(x16, self.packed, None, "none", [], "")[:rows].float()
        else:
            out = F.linear(x16, self.weight).float()
        return out + self.bias if self.bias is not None else out


def _pack(weight: torch.Tensor) -> torch.Tensor | None:
    """`weight` [out, in] bf16 reordered for oneDNN's matmul, or None where this torch has no such op (then
    `F.linear` serves, repacking per call)."""
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, PACK_ROWS)
        torch.ops.mkldnn._linear_pointwise(
            torch.zeros(1, weight.shape[1], dtype=weight.dtype), packed, None, "none", [], ""
        )
        return packed
    except (AttributeError, RuntimeError, NotImplementedError):
        return None


def calibrate_bf16(projections: list[Projection], repeat: int = 3, cache: Any = None) -> dict[tuple[int, int], int]:
    """For mixed projections: per matrix shape, the fewest rows from which torch's bf16 matmul beats the kernel at
    every larger row count tried (CALIBRATION_ROWS; beyond the last, bf16 anyway), timed on up to four of the
    model's own matrices of that shape in turn, so they stream from memory as in a step. Sets each projection's
    `bf16_from`; returns {(out, in): rows}. Takes well under a second. With a `cache`
    (calibration_cache.CalibrationCache), a shape whose choice it keeps is not timed again."""
    import time

    groups: dict[tuple[int, int], list[Projection]] = {}
    for p in projections:
        if p.mixed:
            rows, cols = p.weight.shape
            groups.setdefault((rows, cols), []).append(p)
    chosen: dict[tuple[int, int], int] = {}
    for shape, group in groups.items():
        what = {"shape": list(shape), "rows": list(CALIBRATION_ROWS), "repeat": repeat}
        kept = cache.get("bf16", what) if cache is not None else None
        if isinstance(kept, int) and CALIBRATION_ROWS[0] <= kept <= CALIBRATION_ROWS[-1] + 1:
            for p in group:
                p.bf16_from = kept
            chosen[shape] = kept
            continue
        sample = group[:: max(1, len(group) // 4)][:4]

        def best(fn: Any, x: torch.Tensor, sample: list[Projection] = sample) -> float:
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                for p in sample:
                    fn(p, x)
                times.append(time.perf_counter() - start)
            return min(times)

        start_at = CALIBRATION_ROWS[-1] + 1
        inputs = torch.Generator().manual_seed(0)  # its own: the process's random state is the caller's
        for rows in reversed(CALIBRATION_ROWS):
            x = torch.randn(rows, shape[1], generator=inputs)
            kernel = best(lambda p, x: p.kernels.linear_bf16(x, p.weight, p.bias), x)
            onednn = best(lambda p, x: p.bf16_matmul(x), x)
            if onednn >= kernel:
                break
            start_at = rows
        for p in group:
            p.bf16_from = start_at
        chosen[shape] = start_at
        if cache is not None:
            cache.put("bf16", what, start_at)
    return chosen
