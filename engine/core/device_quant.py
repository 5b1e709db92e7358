"""`--quantization int8 | int4` on an accelerator: the projections' weights kept quantized on the device and
multiplied by the device table's `weight_quant_matmul` (engine/core/ops.py), W8A16 / W4A16.

On an NPU that is the NPU table's fused weight-quant matmul (engine/core/npu_ops.py), which dequantizes inside
the matmul; elsewhere (CUDA, MPS) the torch reference, which dequantizes the matrix per call: the weights then
take a third of their bf16 bytes at rest, at a cost in speed (the log line says which runs). The CPU with the
engine's kernels has its own path (quant.QuantProjection); the output head and the embedding stay in the model's
dtype here (the head is "int8 or better").

The weights are quant.quantize's, the same groups as on the CPU (asymmetric, groups of 32), in the layout the
device op takes: codes as int8 [K, N] (int4: signed, -8..7, eight to an int32 [K, N / 8]), and per group of K a
scale and an offset [K / group, N] in the activations' dtype, w = (code + offset) * scale. A matrix the op
cannot take (int4 with N not a multiple of 8) stays unquantized, with one log line.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F

from engine.core import ops as device_ops
from engine.core import quant

log = logging.getLogger(__name__)


class DeviceQuantProjection:
    """x [M, K] in the model's dtype @ w.T (+ bias) with w kept quantized in the device op's layout."""

    def __init__(self, qw: quant.QuantWeight, bias: torch.Tensor | None, table: Any, dtype: torch.dtype) -> None:
        self.bias, self.table = bias, table  # qw itself is not kept: the device holds the op's layout alone
        self.n, self.k, self.kp, self.group = qw.n, qw.k, qw.kp, qw.group
        codes = qw.codes()  # [N, Kp]: 0..15 for 4 bits, -128..127 for 8
        scale = qw.scale.float()
        offset = qw.minv.float() / scale if qw.minv.numel() else torch.zeros_like(scale)
        if qw.bits == 4:  # the op's int4 is signed: code - 8, the offset moved to match
            codes, offset = codes - 8, offset + 8
        signed = codes.to(torch.int8).t().contiguous()  # [Kp, N]
        self.weight = device_ops.pack_int4(signed) if qw.bits == 4 else signed
        self.scale = scale.t().contiguous().to(dtype)  # [Kp / group, N]
        self.offset = offset.t().contiguous().to(dtype)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.weight, self.scale, self.offset))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.kp != self.k:
            x = F.pad(x, (0, self.kp - self.k))
        out = self.table.weight_quant_matmul(x, self.weight, self.scale, self.offset, self.group)
        return out + self.bias.to(out.dtype) if self.bias is not None else out


def device_projections(
    proj: list[tuple[Any, ...]], layers: list[Any], mode: str, table: Any, dtype: torch.dtype
) -> tuple[list[tuple[Any, ...]], str]:
    """The runner's projections (per layer qkv, o, gate_up, down) quantized for `mode` (int8 / int4) on the device
    table, the HF modules' weights they replace freed. Returns (projections, what the weights are)."""
    bits = 4 if mode == "int4" else 8
    new: list[tuple[Any, ...]] = []
    kept = 0
    for four, layer in zip(proj, layers):
        row: list[Any] = []
        for p in four:
            n = p.weight.shape[0]
            if bits == 4 and n % 8:
                row.append(p)
                kept += 1
                continue
            qw = quant.quantize(p.weight, bits, quant.INT4_GROUP if bits == 4 else quant.INT8_GROUP)
            row.append(DeviceQuantProjection(qw, p.bias, table, dtype))
        new.append(tuple(row))
        quant.free_layer(layer)
    if kept:
        log.info("int4 on the device: %d matrices with a row count not a multiple of 8 stay unquantized", kept)
    done = sum(len(r) for r in new) - kept
    what = f"{mode} x{done}" + (f" + unquantized x{kept}" if kept else "")
    return new, what
