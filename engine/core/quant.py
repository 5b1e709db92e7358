"""Weights kept quantized: `--quantization int8 | int4`, and a GGUF's own 4/8-bit blocks (`auto`).

One layout serves every source (`QuantWeight`): each row's weights in blocks of 32, w = q * scale + min with a
scale and min (float16 where that is exact, else float32) per group of `group` weights (a multiple of 32; 16 for
Q6_K). 4 bits: a block's 16 bytes hold weight j in byte j's low nibble and weight j + 16 in its high one, the order
of GGUF's Q4_0 / Q4_1, so their blocks (and half scales) copy in as they are; Q4_K's 6-bit sub-block scales and mins
become per-32 float32 scales and mins (d * sc, -dmin * m), exact; 8 bits: a signed byte a weight, which holds
Q8_0 as it is and Q5_0 / Q5_K / Q6_K (5- and 6-bit codes, their sub-block scales multiplied out) exactly.
`quantize` makes the same layout from a float matrix (asymmetric groups of 32 for int4 and int8, half scales and
mins for int4; symmetric Q8_0-like groups for the embedding / output head, or per channel).

`QuantProjection` runs x @ w.T on it with one kernel for decode batches (below SPLIT_ROWS rows) and one for
prompts and big batches, picked at load by timing them on the model's own matrices (`calibrate`):
  - `tile`: cpu_kernels.cpp's `linear_q`, which decodes each tile of rows into float32 in L1 once per block of up
    to 64 input rows and multiplies it as the bf16 tiles are, float32 activations (one pass over the packed bytes
    per step, whatever the batch);
  - `torch`: torch's packed CPU kernels, `_weight_int4pack_mm_for_cpu` (int4) and `_weight_int8pack_mm` (per-channel
    int8), which take bf16 activations (their float32 path is scalar: 20-200x slower, measured) and bf16 scales;
  - `fallback`, from SPLIT_ROWS only: the unquantized path on a bf16 copy of the dequantized matrix, where it
    measured faster (bf16 dot products in oneDNN outrun decoding 4-bit tiles once a step is compute-bound).
  - `amx`, from SPLIT_ROWS only, where the CPU has AMX-BF16: cpu_kernels.cpp's linear_q_amx, which decodes each
    strip of 16 rows to bf16 once a call and multiplies it on AMX tiles against bf16 inputs (no copy; 2.3-5.4x the
    tile kernel's speed at 16-256 rows on the Qwen2.5-3B shapes, 0.44-1.5x oneDNN's bf16 matmul on a bf16 copy).
A copy (torch's layout, the bf16 one) is kept only for the shapes where calibration picks it, within a budget.
Two ranges, not a kernel per row count, so a sequence's numbers (and greedy tokens) do not depend on how many share
its step.
Figures: bench/quant_serve.py, bench/README.md.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

QB = 32  # weights per block
CHOICES = ("auto", "none", "int8", "int4")
# Group sizes by teacher-forced top-1 agreement with the float32 model (SmolLM2, bench/quant_serve.py --quality):
# int4 in groups of 32 98.4% (mean KL 6e-5), of 64 68.8% (0.40); int8 per channel 93.8% (0.004), symmetric in
# groups of 32 98.5% (1.4e-3), asymmetric in groups of 32 99.3% (1.5e-4, 6 prompts x 24 tokens): int8 asymmetric.
INT4_GROUP = 32
INT8_GROUP = 32
# One kernel for every row count below SPLIT_ROWS (decode batches) and one from there on (prompts, big batches), so
# a sequence's numbers do not depend on how many others share its step below SPLIT_ROWS: the kernels round
# differently (torch's takes bf16 activations), and greedy tokens alone and batched must be the same.
SPLIT_ROWS = 16
CALIBRATION_ROWS = (1, 4, 16, 32, 64)  # timed: the first two choose the small-row kernel, the rest the large-row one
TORCH_MARGIN = 0.85  # torch's bf16-activation kernel only where it beats the float32 tile kernel by 15%
# From SPLIT_ROWS rows, the unquantized path (a bf16 copy of the dequantized matrix) where it beats the quantized
# kernels by 10% at every large row count timed: many rows are compute-bound, where the timing of cache-hot
# matrices holds for a real step; fewer rows stream the weights from memory, which is what fewer bytes speed up.
FALLBACK_MARGIN = 0.9


@dataclass
class QuantWeight:
    q: torch.Tensor  # uint8 [N, Kp / 2] (4 bits) or int8 viewed as uint8 [N, Kp] (8 bits)
    scale: torch.Tensor  # float16 or float32 [N, Kp / group] (half where exact: quantize, Q4_0 / Q4_1 / Q8_0)
    minv: torch.Tensor  # the same dtype and shape, or empty (symmetric: no offset)
    bits: int
    group: int
    k: int  # input width before padding to the group
    source: str  # "int4", "int8", or the GGUF block type ("Q4_1", ...)

    @property
    def n(self) -> int:
        return int(self.q.shape[0])

    @property
    def kp(self) -> int:
        return int(self.scale.shape[1]) * self.group

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.q, self.scale, self.minv))

    def shape_ok(self, w: torch.Tensor) -> bool:
        return tuple(w.shape) == (self.n, self.k)

    def codes(self) -> torch.Tensor:
        """The integer codes [N, Kp] (0..15 for 4 bits, -128..127 for 8)."""
        if self.bits == 8:
            return self.q.view(torch.int8).to(torch.int32)
        b = self.q.reshape(self.n, -1, 16).to(torch.int32)
        return torch.stack([b & 15, b >> 4], 2).reshape(self.n, -1)

    def dequantize(self) -> torch.Tensor:
        """The float32 matrix [N, k] the kernels compute with."""
        g = self.codes().float().reshape(self.n, -1, self.group)
        w = g * self.scale.float()[..., None] + (self.minv.float()[..., None] if self.minv.numel() else 0)
        return w.reshape(self.n, -1)[:, : self.k]


def _pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    n = codes.shape[0]
    c = codes.to(torch.uint8).reshape(n, -1, 2, 16)
    return (c[:, :, 0] | (c[:, :, 1] << 4)).reshape(n, -1).contiguous()


def _padded(k: int, group: int) -> int:
    return -(-k // group) * group


def _half_down(t: torch.Tensor) -> torch.Tensor:
    """float32 -> the nearest float16 at or below."""
    h = t.clamp(-65504, 65504).half()
    return torch.where(h.float() > t, torch.nextafter(h, torch.full_like(h, -65504)), h)


def _half_up(t: torch.Tensor) -> torch.Tensor:
    """float32 -> the nearest float16 at or above (and at least the smallest normal: never a zero scale)."""
    h = t.clamp(6.2e-5, 65504).half()
    return torch.where(h.float() < t, torch.nextafter(h, torch.full_like(h, 65504)), h)


def quantize(w: torch.Tensor, bits: int, group: int = 0, symmetric: bool = False) -> QuantWeight:
    """`w` [N, K] float, each group of `group` weights (a multiple of 32; 0: one group a row) on a grid of 2^bits
    levels from its minimum to its maximum (asymmetric: scale (max - min) / (2^bits - 1), the minimum as offset;
    int8 codes stored as code - 128 with the offset moved to match), scale and offset in float16, rounded outward
    so the grid still spans the group; int8 `symmetric` (Q8_0's layout: scale max|w| / 127 in float16, no offset);
    int8 per channel (group 0) symmetric too (float32 scale), the layout `w8a8` multiplies directly."""
    w = w.float()
    n, k = w.shape
    if bits == 8 and not group:
        kp = _padded(k, QB)
        g = F.pad(w, (0, kp - k)).reshape(n, 1, kp)
        scale = (g.abs().amax(-1) / 127).clamp_min(1e-12)
        q = (g / scale[..., None]).round().clamp(-127, 127).to(torch.int8).reshape(n, kp).view(torch.uint8)
        return QuantWeight(q.contiguous(), scale.contiguous(), torch.empty(0), 8, kp, k, "int8")
    group = group or (INT4_GROUP if bits == 4 else INT8_GROUP)
    if bits not in (4, 8) or group % QB:
        raise ValueError(f"int{bits} in groups of {group} is not a layout this engine has")
    kp = _padded(k, group)
    g = F.pad(w, (0, kp - k)).reshape(n, kp // group, group)
    if kp != k:  # padding takes no part in a group's range
        last = g[:, -1]
        real = k - (kp // group - 1) * group
        last[:, real:] = last[:, :real].mean(1, keepdim=True)
    if bits == 8 and symmetric:
        scale = _half_up(g.abs().amax(-1) / 127)
        q = (g / scale.float()[..., None]).round().clamp(-127, 127).to(torch.int8).reshape(n, kp)
        return QuantWeight(q.view(torch.uint8).contiguous(), scale.contiguous(), torch.empty(0), 8, group, k, "int8")
    levels = (1 << bits) - 1
    low = _half_down(g.amin(-1))
    scale = _half_up((g.amax(-1) - low.float()) / levels)
    codes = ((g - low.float()[..., None]) / scale.float()[..., None]).round().clamp(0, levels).reshape(n, kp)
    if bits == 4:
        return QuantWeight(_pack_nibbles(codes), scale.contiguous(), low.contiguous(), 4, group, k, "int4")
    # code - 128 in a signed byte, offset low + 128 * scale (in float32: its half would move the grid)
    q = (codes - 128).to(torch.int8).view(torch.uint8).contiguous()
    minv = (low.float() + 128 * scale.float()).contiguous()
    return QuantWeight(q, scale.float().contiguous(), minv, 8, group, k, "int8")


def concat(parts: list[QuantWeight]) -> QuantWeight:
    """Row-wise concatenation (the fused q/k/v and gate/up projections); the parts must share their layout."""
    first = parts[0]
    if any((p.bits, p.group, p.k, p.kp) != (first.bits, first.group, first.k, first.kp) for p in parts):
        raise ValueError("parts of a fused projection in different layouts")
    if any(p.scale.dtype != first.scale.dtype or bool(p.minv.numel()) != bool(first.minv.numel()) for p in parts):
        widen = lambda t: t.float() if t.numel() else t  # noqa: E731
        parts = [replace(p, scale=p.scale.float(), minv=widen(p.minv)) for p in parts]
        if any(bool(p.minv.numel()) != bool(first.minv.numel()) for p in parts):
            parts = [p if p.minv.numel() else replace(p, minv=torch.zeros_like(p.scale)) for p in parts]
    cat = lambda ts: torch.cat(ts).contiguous() if ts[0].numel() else ts[0]  # noqa: E731
    return QuantWeight(
        cat([p.q for p in parts]),
        cat([p.scale for p in parts]),
        cat([p.minv for p in parts]),
        first.bits,
        first.group,
        first.k,
        first.source,
    )


def take_rows(w: QuantWeight, index: torch.Tensor) -> QuantWeight:
    minv = w.minv[index].contiguous() if w.minv.numel() else w.minv
    return QuantWeight(w.q[index].contiguous(), w.scale[index].contiguous(), minv, w.bits, w.group, w.k, w.source)


# ---- GGUF blocks ----------------------------------------------------------------------------------------------------

GGUF_KERNEL_TYPES = (
    "Q4_0",
    "Q4_1",
    "Q8_0",
    "Q4_K",
    "Q5_0",
    "Q5_K",
    "Q6_K",
)  # what maps onto QuantWeight exactly; others fall back


def from_gguf(type_name: str, data: np.ndarray, k: int) -> QuantWeight | None:
    """A GGUF tensor's raw blocks (`data`: uint8 [N, bytes a row], as gguf.GGUFReader gives them; `k` weights a row)
    as a QuantWeight computing the same numbers as `gguf.quants.dequantize`; None for a block type with no kernel."""
    raw = np.ascontiguousarray(data, dtype=np.uint8)
    n = raw.shape[0]
    f16 = lambda a: torch.from_numpy(np.ascontiguousarray(a).view(np.float16).astype(np.float32))  # noqa: E731
    half = lambda a: torch.from_numpy(np.ascontiguousarray(a).view(np.float16).copy())  # noqa: E731
    if type_name in ("Q4_0", "Q4_1"):
        size = 18 if type_name == "Q4_0" else 20
        b = raw.reshape(n, -1, size)
        d = half(b[..., 0:2]).reshape(n, -1)
        m = (-8 * d.float()).half() if type_name == "Q4_0" else half(b[..., 2:4]).reshape(n, -1)
        qs = torch.from_numpy(np.ascontiguousarray(b[..., size - 16 :])).reshape(n, -1)
        return QuantWeight(qs.contiguous(), d.contiguous(), m.contiguous(), 4, QB, k, type_name)
    if type_name == "Q8_0":
        b = raw.reshape(n, -1, 34)
        d = half(b[..., 0:2]).reshape(n, -1)
        qs = torch.from_numpy(np.ascontiguousarray(b[..., 2:])).reshape(n, -1)
        return QuantWeight(qs.contiguous(), d.contiguous(), torch.empty(0), 8, QB, k, type_name)
    if type_name == "Q4_K":
        from gguf.quants import Q4_K

        kb = raw.reshape(-1, 144)
        d, dmin = f16(kb[:, 0:2]), f16(kb[:, 2:4])  # [blocks, 1]
        sc, mn = Q4_K.get_scale_min(np.ascontiguousarray(kb[:, 4:16]))
        scale = (d * torch.from_numpy(sc.astype(np.float32))).reshape(n, -1)
        minv = -(dmin * torch.from_numpy(mn.astype(np.float32))).reshape(n, -1)
        qs = torch.from_numpy(np.ascontiguousarray(kb[:, 16:])).reshape(-1, 4, 1, 32).to(torch.int32)
        codes = torch.cat([qs & 15, qs >> 4], 2).reshape(n, -1)  # chunk c: sub-blocks 2c (low), 2c + 1 (high)
        return QuantWeight(_pack_nibbles(codes), scale.contiguous(), minv.contiguous(), 4, QB, k, type_name)
    if type_name == "Q5_0":  # w = d * (q - 16), q 5 bits: the low 4 in qs (Q4_0's order), the 5th in qh
        b = raw.reshape(n, -1, 22)
        d5 = half(b[..., 0:2]).reshape(n, -1)
        qh5 = np.ascontiguousarray(b[..., 2:6]).view(np.uint32)  # [n, blocks, 1]
        hi5 = ((qh5 >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)  # [n, blocks, 32]
        qs5 = b[..., 6:]
        lo5 = np.concatenate([qs5 & 15, qs5 >> 4], -1)
        c5 = (lo5 | (hi5 << 4)).astype(np.int8) - np.int8(16)
        q5 = torch.from_numpy(c5.reshape(n, -1).view(np.uint8).copy())
        return QuantWeight(q5, d5.contiguous(), torch.empty(0), 8, QB, k, type_name)
    if type_name == "Q5_K":  # w = d * sc * q - dmin * m per sub-block of 32, q 5 bits
        from gguf.quants import Q4_K

        kb = raw.reshape(-1, 176)
        d5, dmin5 = f16(kb[:, 0:2]), f16(kb[:, 2:4])
        sck, mn5 = Q4_K.get_scale_min(np.ascontiguousarray(kb[:, 4:16]))
        scale5 = (d5 * torch.from_numpy(sck.astype(np.float32))).reshape(n, -1)
        minv5 = -(dmin5 * torch.from_numpy(mn5.astype(np.float32))).reshape(n, -1)
        qhk = kb[:, 16:48].reshape(-1, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
        qlk = kb[:, 48:].reshape(-1, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
        ck = (qlk & 15).reshape(-1, 8, 32) | ((qhk & 1) << 4)
        qk = torch.from_numpy(ck.astype(np.int8).reshape(n, -1).view(np.uint8).copy())
        return QuantWeight(qk, scale5.contiguous(), minv5.contiguous(), 8, QB, k, type_name)
    if type_name == "Q6_K":  # w = d * sc * (q - 32) per sub-block of 16, q 6 bits
        kb = raw.reshape(-1, 210)
        d6 = f16(kb[:, 208:210])
        sc6 = torch.from_numpy(np.ascontiguousarray(kb[:, 192:208]).view(np.int8).astype(np.float32))
        scale6 = (d6 * sc6).reshape(n, -1)
        shifted_l = kb[:, :128].reshape(-1, 2, 1, 64) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
        ql6 = (shifted_l & 15).reshape(-1, 8, 32)
        shifted_h = kb[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
        qh6 = (shifted_h & 3).reshape(-1, 8, 32)
        c6 = (ql6 | (qh6 << 4)).astype(np.int8) - np.int8(32)
        q6 = torch.from_numpy(c6.reshape(n, -1).view(np.uint8).copy())
        return QuantWeight(q6, scale6.contiguous(), torch.empty(0), 8, 16, k, type_name)
    return None


# ---- the projection ---------------------------------------------------------------------------------------------------


class QuantProjection:
    """x [B, K] float32 @ w.T (+ bias) with w a QuantWeight, the kernel picked per row count (`calibrate`)."""

    def __init__(self, weight: QuantWeight, bias: torch.Tensor | None, kernels: Any) -> None:
        self.qw, self.bias, self.kernels = weight, bias, kernels
        self.packed: tuple[torch.Tensor, torch.Tensor] | None = None  # torch's layout, where calibration picks it
        # The unquantized path on the dequantized matrix (a bf16 copy), kept only where calibration picks it.
        self.fallback: Any = None
        # int8 activations x int8 weights (`w8a8`): the matrix per channel in int8 [N, Kp] and its scales [N],
        # kept only where calibration picks it (the weights themselves where they already are per-channel int8).
        self.int8: tuple[torch.Tensor, torch.Tensor] | None = None
        # below SPLIT_ROWS, from there: "tile", "torch", "fallback", "w8a8" or "amx" (from there only)
        self.kernels_by_rows = ("tile", "tile")
        # Whether calibration may keep a second copy of the matrix (torch's layout, bf16, per-channel int8) where
        # it measures faster: not for the embedding / output head, whose bytes are what quantizing them saves.
        self.copies_ok = True

    @property
    def shape(self) -> tuple[int, int]:
        return (self.qw.n, self.qw.k)

    @property
    def nbytes(self) -> int:
        extra = sum(t.numel() * t.element_size() for t in self.packed) if self.packed is not None else 0
        if self.fallback is not None:
            for t in (self.fallback.weight, self.fallback.packed):
                extra += t.numel() * t.element_size() if t is not None else 0
        if self.int8 is not None and self.int8[0].data_ptr() != self.qw.q.data_ptr():
            extra += sum(t.numel() * t.element_size() for t in self.int8)
        return self.qw.nbytes + extra

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        kernel = self.kernels_by_rows[x.shape[0] >= SPLIT_ROWS]
        if kernel == "fallback":
            return self.fallback(x)
        if kernel == "w8a8":
            return self.w8a8(x)
        if kernel == "amx":
            return self.amx(x)
        return self.torch_matmul(x) if kernel == "torch" else self.tile(x)

    def tile(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.qw.k:  # the kernel reads kp columns a row: a narrower x would be read past its end
            raise ValueError(f"x has {x.shape[-1]} columns, the weight {self.qw.k}")
        x = x.float()
        if self.qw.kp != self.qw.k:
            x = F.pad(x, (0, self.qw.kp - self.qw.k))
        return self.kernels.linear_q(x, self.qw, self.bias)

    def amx(self, x: torch.Tensor) -> torch.Tensor:
        """The same product on AMX tiles (cpu_kernels.linear_q_amx): inputs and decoded weights in bf16, float32
        sums, no copy of the matrix; only from SPLIT_ROWS rows."""
        x = x.float()
        if self.qw.kp != self.qw.k:
            x = F.pad(x, (0, self.qw.kp - self.qw.k))
        return self.kernels.linear_q_amx(x, self.qw, self.bias)

    def pack_for_torch(self) -> bool:
        """Build torch's packed copy; False where its kernel cannot take this layout (Q8_0's blocks, a group it
        lacks) or this torch has none."""
        w = self.qw
        try:
            if w.bits == 4 and w.group in (32, 64, 128, 256):
                np_ = -(-w.n // 16) * 16  # the op wants N a multiple of 16
                codes = F.pad(w.codes(), (0, 0, 0, np_ - w.n))
                packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.contiguous(), 1)
                zero = w.minv.float() + 8 * w.scale.float()  # the op computes (q - 8) * scale + zero
                sz = torch.stack([w.scale.float(), zero], -1)  # [N, G, 2]
                sz = F.pad(sz, (0, 0, 0, 0, 0, np_ - w.n)).transpose(0, 1).contiguous().to(torch.bfloat16)
                self.packed = (packed, sz)
            elif w.bits == 8 and w.scale.shape[1] == 1:
                self.packed = (w.q.view(torch.int8), w.scale[:, 0].to(torch.bfloat16))  # K padded: 40 crashed it
            else:
                return False
            self.torch_matmul(torch.zeros(1, w.k))
            return True
        except (AttributeError, RuntimeError, NotImplementedError):
            self.packed = None
            return False

    def torch_matmul(self, x: torch.Tensor) -> torch.Tensor:
        assert self.packed is not None
        w = self.qw
        xb = x.to(torch.bfloat16)
        if w.kp != w.k:
            xb = F.pad(xb, (0, w.kp - w.k))
        if w.bits == 4:
            out = torch.ops.aten._weight_int4pack_mm_for_cpu(xb, self.packed[0], w.group, self.packed[1])[:, : w.n]
        else:
            out = torch._weight_int8pack_mm(xb, *self.packed)
        out = out.float()
        return out + self.bias if self.bias is not None else out

    def pack_int8(self, copy: bool = True) -> bool:
        """Build the per-channel int8 copy `w8a8` multiplies with (none where the weights already are per-channel
        symmetric int8); False where this CPU has no int8 dot-product instructions or torch no `_int_mm`, or
        where that needs a copy and `copy` is False."""
        if not w8a8_supported():
            return False
        w = self.qw
        if w.bits == 8 and w.group == w.kp and not w.minv.numel():
            self.int8 = (w.q.view(torch.int8), w.scale[:, 0].float().contiguous())
        elif not copy:
            return False
        else:
            per_channel = quantize(w.dequantize(), 8, 0)
            self.int8 = (per_channel.q.view(torch.int8), per_channel.scale[:, 0].contiguous())
        return True

    def w8a8(self, x: torch.Tensor) -> torch.Tensor:
        """x quantized to int8 per row (scale max|x| / 127), times the per-channel int8 weights in int32
        (`torch._int_mm`: oneDNN's VNNI / AMX int8 matmul), scaled back to float32."""
        assert self.int8 is not None
        wq, ws = self.int8
        x = x.float()
        if wq.shape[1] != x.shape[1]:
            x = F.pad(x, (0, wq.shape[1] - x.shape[1]))
        sx = x.abs().amax(1, keepdim=True).clamp_min(1e-12) / 127
        xq = (x / sx).round_().to(torch.int8)
        out = torch._int_mm(xq, wq.t()).float().mul_(sx).mul_(ws)
        return out.add_(self.bias) if self.bias is not None else out


@functools.cache
def w8a8_supported() -> bool:
    """Whether int8 x int8 matmuls pay here: a CPU with int8 dot-product instructions (AVX512-VNNI, AVX-VNNI or
    AMX-INT8, read off /proc/cpuinfo at run time) and a torch whose `_int_mm` runs on the CPU."""
    from engine.core.cpu_kernels import cpu_flags

    if not cpu_flags() & {"avx512_vnni", "avx_vnni", "amx_int8"}:
        return False
    try:
        a = torch.ones(2, 64, dtype=torch.int8)
        return int(torch._int_mm(a, a.t())[0, 0]) == 64
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def _best(fn: Any, sample: list[Any], x: torch.Tensor, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for p in sample:
            fn(p, x)
        times.append(time.perf_counter() - start)
    return min(times)


def calibrate(
    projections: list[QuantProjection],
    reference: Any = None,
    repeat: int = 3,
    rows: tuple[int, ...] = CALIBRATION_ROWS,
    cache: Any = None,
    *,
    int8_activations: bool = False,
    copy_budget: float = float("inf"),
) -> dict[tuple[int, int], dict[int, dict[str, float]]]:
    """Per matrix shape, time the tile kernel, torch's packed one (where it takes the layout) and, when `reference`
    (weight [N, K] float32, bias) -> callable(x) is given, the unquantized path on the dequantized matrices, at each
    row count on two of the model's own matrices; then pick one kernel below SPLIT_ROWS and one from there
    (`kernels_by_rows`): torch's where it beats the tile kernel by TORCH_MARGIN summed over that range's row counts,
    the unquantized path from SPLIT_ROWS where it beats both by FALLBACK_MARGIN at every one of them, and with
    `int8_activations` the same for `w8a8` (off by default: per-row int8 activations cost SmolLM2 top-1 agreement,
    87.5% at int4 and 91.7% at int8 against 99.3% with float32 activations, KL 0.06, 6 prompts x 24 tokens, from
    its activation outliers). Every kernel but the tile kernel needs a second copy of the matrix: the copies, of
    all shapes together, take at most `copy_budget` bytes, given to the shapes whose copy saves the most time a
    byte (the others run a kernel without a copy in that range), and copies that end up unused are dropped. With a `cache`
    (calibration_cache.CalibrationCache), a shape whose choice it keeps is not timed again. Returns
    {shape: {rows: {kernel: ms}}} for the shapes timed."""
    groups: dict[tuple[int, int, int, int], list[QuantProjection]] = {}
    for p in projections:
        groups.setdefault((p.qw.n, p.qw.k, p.qw.bits, p.qw.group), []).append(p)
    report: dict[tuple[int, int], dict[int, dict[str, float]]] = {}
    decided: list[tuple[list[QuantProjection], list[str], dict[str, float]]] = []  # kernels, ms saved per copy
    for (n, k, bits, group_size), group in groups.items():
        what = {"shape": [n, k], "bits": bits, "group": group_size, "source": group[0].qw.source, "rows": list(rows)}
        what |= {"repeat": repeat, "reference": reference is not None, "int8_activations": int8_activations}
        has_amx = bool(getattr(group[0].kernels, "amx", False))  # a kernel without a copy, from SPLIT_ROWS
        what |= {"amx": has_amx}
        if copy_budget <= 0 and not (int8_activations or has_amx):  # no room for a copy: the tile kernel alone
            decided.append((group, ["tile", "tile"], {}))
            continue
        kept = _kept(cache.get("quant", what), group, reference) if cache is not None else None
        if kept is not None:
            decided.append((group, list(kept[0]), kept[1]))
            continue
        sample = group[:: max(1, len(group) // 2)][:2]
        copies = all(p.copies_ok for p in sample) and copy_budget > 0
        has_torch = copies and all(p.pack_for_torch() for p in sample)
        has_int8 = int8_activations and all(p.pack_int8(copies) for p in sample)
        refs = [reference(p.qw.dequantize(), None) for p in sample] if reference is not None and copies else []
        table: dict[int, dict[str, float]] = {}
        if not (has_torch or has_int8 or refs or has_amx):  # the tile kernel is the only one: nothing to time
            decided.append((group, ["tile", "tile"], {}))
            continue
        inputs = torch.Generator().manual_seed(0)  # its own: the process's random state is the caller's
        for r in rows:
            x = torch.randn(r, k, generator=inputs)
            t = {"tile": _best(lambda p, x: p.tile(x), sample, x, repeat)}
            if has_torch:
                t["torch"] = _best(lambda p, x: p.torch_matmul(x), sample, x, repeat)
            if refs:
                t["reference"] = _best(lambda f, x: f(x), refs, x, repeat)
            if has_int8 and r >= SPLIT_ROWS:
                t["w8a8"] = _best(lambda p, x: p.w8a8(x), sample, x, repeat)
            if has_amx and r >= SPLIT_ROWS:
                t["amx"] = _best(lambda p, x: p.amx(x), sample, x, repeat)
            table[r] = {name: round(v * 1000, 3) for name, v in t.items()}
        chosen: list[str] = []
        saved: dict[str, float] = {}
        for part in ([r for r in rows if r < SPLIT_ROWS], [r for r in rows if r >= SPLIT_ROWS]):
            total = {name: sum(table[r].get(name, float("inf")) for r in part) for name in ("tile", "torch", "amx")}
            fast = min(("torch", "amx"), key=total.__getitem__)  # the bf16-input kernels, where they beat tile
            best = fast if total[fast] < TORCH_MARGIN * total["tile"] else "tile"
            if part and part[0] >= SPLIT_ROWS:  # a second copy only where it wins at every row count timed
                wins = {
                    name: sum(table[r][key] for r in part)
                    for name, key in (("fallback", "reference"), ("w8a8", "w8a8"))
                    if all(key in table[r] and table[r][key] < FALLBACK_MARGIN * table[r][best] for r in part)
                }
                best = min(wins, key=wins.__getitem__) if wins else best
            if best not in ("tile", "amx"):  # the ms a step this copy saves over the range's best without one
                key = {"fallback": "reference"}.get(best, best)
                plain = [min(table[r]["tile"], table[r].get("amx", float("inf"))) for r in part]
                saved[best] = saved.get(best, 0.0) + round(sum(p - table[r][key] for p, r in zip(plain, part)), 3)
            chosen.append(best)
        decided.append((group, chosen, saved))
        if cache is not None:
            cache.put("quant", what, [*chosen, saved])
        log.info("quantized %dx%d: ms per row count: %s", n, k, table)
        report[(n, k)] = table
    _spend(decided, copy_budget, reference)
    for group, chosen, _ in decided:
        _use(group, (chosen[0], chosen[1]), reference)
        log.info("quantized %dx%d: %s below %d rows, %s from there", *group[0].shape, chosen[0], SPLIT_ROWS, chosen[1])
    return report


def copy_budget(mode: str, projections: list[QuantProjection]) -> float:
    """The bytes calibration may spend on second copies for speed (`calibrate`'s copy_budget): none for int8 /
    int4, asked for to hold fewer bytes (the weights then stay at 0.31x of bf16 for int4, where torch's layout
    for decode rows and a bf16 copy for prompts took the Qwen2.5-3B shape to 0.58x); for a GGUF's own blocks, at
    most what the blocks themselves take (served at about the bytes they come in) and an eighth of the machine's
    memory (a 7B Q4_K_M's bf16 copies alone would be 13 GB)."""
    if mode in ("int8", "int4"):
        return 0.0
    own = sum(p.qw.nbytes for p in projections)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no such name on this OS: the blocks' own bytes bound it alone
        return float(own)
    return float(min(own, memory / 8))


def _copy_bytes(p: QuantProjection, kind: str, reference: Any) -> float:
    """The bytes the copy `kind` of p's matrix takes: torch's layout, the unquantized path's (its bytes a weight
    measured on a small one), or the per-channel int8 one."""
    w = p.qw
    if kind == "w8a8" and w.bits == 8 and w.group == w.kp and not w.minv.numel():
        return 0  # the weights themselves are per-channel int8
    if not p.copies_ok:
        return float("inf")
    if kind == "torch":  # int4pack: the codes again, a bf16 scale and zero a group; int8pack shares the codes
        return (w.q.numel() if w.bits == 4 else 0) + 4 * w.scale.numel()
    if kind == "w8a8":
        return w.n * w.kp + 4 * w.n
    if reference is None:
        return 0
    small = reference(torch.zeros(16, 64), None)
    kept = [t for t in (getattr(small, "weight", None), getattr(small, "packed", None)) if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in kept) / (16 * 64) * w.n * w.k


def _spend(
    decided: list[tuple[list[QuantProjection], list[str], dict[str, float]]], budget: float, reference: Any
) -> None:
    """Within `budget` bytes of second copies in all, keep the copies that save the most time a byte; a shape whose
    copy does not fit runs a kernel without one in that range instead (the chosen lists are changed in place)."""
    wanted = []
    for i, (group, chosen, saved) in enumerate(decided):
        for kind in dict.fromkeys(c for c in chosen if c not in ("tile", "amx")):
            each = _copy_bytes(group[0], kind, reference)
            per_byte = saved.get(kind, 0.0) / min(2, len(group)) / max(each, 1.0)  # the sample was two matrices
            wanted.append((per_byte, each * len(group), i, kind))
    left = budget
    for _, size, i, kind in sorted(wanted, key=lambda w: -w[0]):
        if math.isfinite(size) and size <= left:
            left -= size
            continue
        group, chosen, _ = decided[i]
        # the range runs a kernel that needs no copy: from SPLIT_ROWS the AMX one where there is one (2-6x the tile
        # kernel at 16-256 rows, measured on every shape timed), else the tile kernel
        amx = "amx" if getattr(group[0].kernels, "amx", False) else "tile"
        chosen[:] = [c if c != kind else ("tile" if j == 0 else amx) for j, c in enumerate(chosen)]
        log.info("quantized %dx%d: no %s copy (%.0f MB, over the copies' budget)", *group[0].shape, kind, size / 1e6)


# ---- the embedding and output head ------------------------------------------------------------------------------


class QuantEmbedding:
    """An embedding table kept as a QuantWeight (shared with a tied output head): looks up rows and dequantizes
    only those. `embed_scale` is carried over where the model scales its embeddings (Gemma)."""

    def __init__(self, weight: QuantWeight, embed_scale: Any = None) -> None:
        self.qw, self.embed_scale = weight, embed_scale

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return take_rows(self.qw, ids.reshape(-1)).dequantize().reshape(*ids.shape, self.qw.k)

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        return self.rows(ids)


def quantized_head(model: Any, mode: str, kernels: Any, gguf_path: Any = None) -> tuple[Any, Any]:
    """The output head as a QuantProjection and the input embedding as a QuantEmbedding (one QuantWeight when
    tied), their float weights freed: the GGUF's own token_embd / output blocks (`gguf`, where they have a kernel
    and match the checkpoint), else int8 in Q8_0's layout (symmetric, groups of 32, half scales: per channel lost
    SmolLM2 top-1 agreement, 85% against 98%+ over 4 prompts x 10 tokens). No second copy is kept for either."""
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    tied = head.weight.data_ptr() == embed.weight.data_ptr()
    own: dict[str, QuantWeight] = {}
    if mode == "gguf":
        from engine.core import gguf_tensors

        for t in gguf_tensors.tensors(gguf_path):  # the tensors alone: gguf.GGUFReader parses the vocabulary too
            if t.name in ("token_embd.weight", "output.weight"):
                qw = from_gguf(t.tensor_type.name, t.data, int(t.shape[0]))
                if qw is not None and qw.bits == 8 and not qw.minv.numel():
                    own[t.name] = qw

    def weight_for(w: torch.Tensor, names: tuple[str, ...], what: str) -> QuantWeight:
        for name in names:
            qw = own.get(name)
            if qw is not None and qw.shape_ok(w):
                _check_close(qw, w, what)
                return qw
        return quantize(w, 8, QB, symmetric=True)

    head_names = ("output.weight", "token_embd.weight") if tied else ("output.weight",)
    head_w = weight_for(head.weight.data, head_names, "the output head")
    embed_w = head_w if tied else weight_for(embed.weight.data, ("token_embd.weight",), "the embedding")
    bias = head.bias.data.float() if getattr(head, "bias", None) is not None else None
    projection = QuantProjection(head_w, bias, kernels)
    projection.copies_ok = False
    table = QuantEmbedding(embed_w, getattr(embed, "embed_scale", None))
    for module in (head, embed):
        module.weight = torch.nn.Parameter(torch.empty(module.weight.shape, device="meta"), requires_grad=False)
    return projection, table


def _use(group: list[QuantProjection], kernels_by_rows: tuple[str, str], reference: Any) -> None:
    """Set a shape's kernels, building the copies they need and dropping the others."""
    for p in group:
        p.kernels_by_rows = kernels_by_rows
        if "torch" in kernels_by_rows:
            if p.packed is None:
                p.pack_for_torch()
        else:
            p.packed = None
        if "fallback" in kernels_by_rows and reference is not None:
            p.fallback = reference(p.qw.dequantize(), p.bias)
        if "w8a8" in kernels_by_rows:
            if p.int8 is None:
                p.pack_int8()
        else:
            p.int8 = None


def _kept(decision: Any, group: list[QuantProjection], reference: Any) -> tuple[list[str], dict[str, float]] | None:
    """A cached choice these projections can run and the ms its copies saved when timed, or None (then they are
    timed)."""
    if not (
        isinstance(decision, list)
        and len(decision) in (2, 3)
        and all(d in ("tile", "torch", "fallback", "w8a8", "amx") for d in decision[:2])
    ):
        return None
    saved = decision[2] if len(decision) == 3 else {}
    if not (isinstance(saved, dict) and all(isinstance(v, (int, float)) for v in saved.values())):
        return None
    if decision[0] in ("fallback", "amx") or ("fallback" in decision[:2] and reference is None):
        return None
    if "amx" in decision[:2] and not getattr(group[0].kernels, "amx", False):  # no AMX tiles here (any more)
        return None
    if "torch" in decision[:2] and not group[0].pack_for_torch():  # this torch cannot pack the layout (any more)
        return None
    if "w8a8" in decision[:2] and not group[0].pack_int8():  # no int8 dot products here (any more)
        return None
    return [decision[0], decision[1]], {str(k): float(v) for k, v in saved.items()}


# ---- the runner's projections ---------------------------------------------------------------------------------------

GGUF_NAMES = (("attn_q", "attn_k", "attn_v"), ("attn_output",), ("ffn_gate", "ffn_up"), ("ffn_down",))
# Whose GGUF tensor layout is handled here, and whether llama.cpp's converter permuted its q/k rows for rotary
# (Llama's) or kept them as in the checkpoint (Gemma 3's).
GGUF_ARCHS = {"llama": True, "gemma3_text": False, "gemma3": False}


class QuantError(ValueError):
    """A --quantization this model or device cannot serve: the message names what is supported."""


def gguf_layers(path: Any, cfg: Any) -> list[list[QuantWeight | None]]:
    """Per layer, the four fused projections (qkv, o, gate_up, down) from the GGUF's own blocks, rows in the HF
    checkpoint's order (llama.cpp's converter permutes q and k for its rotary layout; undone here as transformers'
    GGUF loader does); None where a part's block type has no kernel or the parts differ in layout."""
    from engine.core import gguf_tensors

    tensors = {t.name: t for t in gguf_tensors.tensors(path)}  # the tensors alone: gguf.GGUFReader took 2-3 s
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    out: list[list[QuantWeight | None]] = []
    skipped: dict[str, int] = {}
    for li in range(cfg.num_hidden_layers):
        fused: list[QuantWeight | None] = []
        for names in GGUF_NAMES:
            parts: list[QuantWeight] = []
            for name in names:
                t = tensors[f"blk.{li}.{name}.weight"]
                qw = from_gguf(t.tensor_type.name, t.data, int(t.shape[0]))
                if qw is None:
                    skipped[t.tensor_type.name] = skipped.get(t.tensor_type.name, 0) + 1
                    break
                if name in ("attn_q", "attn_k") and GGUF_ARCHS.get(cfg.model_type, False):
                    h = heads if name == "attn_q" else kv
                    index = torch.arange(qw.n).reshape(h, qw.n // h // 2, 2).transpose(1, 2).reshape(-1)
                    qw = take_rows(qw, index)
                parts.append(qw)
            try:
                fused.append(concat(parts) if len(parts) == len(names) else None)
            except ValueError:
                skipped["mixed layouts"] = skipped.get("mixed layouts", 0) + 1
                fused.append(None)
        out.append(fused)
    for kind, count in skipped.items():
        log.info(
            "GGUF %s: %d tensors of %s have no kernel here: their projections are served dequantized", path, count, kind
        )
    return out


def quantized_projections(
    proj: list[tuple[Any, ...]], layers: list[Any], mode: str, kernels: Any, gguf_path: Any = None, cfg: Any = None
) -> tuple[list[tuple[Any, ...]], str]:
    """The runner's projections (per layer qkv, o, gate_up, down) with their weights quantized for `mode` (int8,
    int4: from the float weights; gguf: the GGUF's own blocks), the HF modules' weights they replace freed (kept as
    meta tensors of their shapes). Returns (projections, what the weights are, for the log and /v1/models)."""

    direct = gguf_layers(gguf_path, cfg) if mode == "gguf" else None
    new: list[tuple[Any, ...]] = []
    sources: dict[str, int] = {}
    for li, (four, layer) in enumerate(zip(proj, layers)):
        row: list[Any] = []
        for j, p in enumerate(four):
            if direct is not None:
                qw = direct[li][j]
                if qw is not None:
                    if not qw.shape_ok(p.weight):
                        raise QuantError(
                            f"GGUF layer {li} projection {j}: {qw.n}x{qw.k}, the checkpoint has {tuple(p.weight.shape)}"
                        )
                    _check_close(qw, p.weight, f"layer {li} projection {j}")
            else:
                qw = quantize(p.weight, 8, INT8_GROUP) if mode == "int8" else quantize(p.weight, 4, INT4_GROUP)
            if qw is None:
                row.append(p)
                sources["dequantized"] = sources.get("dequantized", 0) + 1
                continue
            row.append(QuantProjection(qw, p.bias, kernels))
            sources[qw.source] = sources.get(qw.source, 0) + 1
        new.append(tuple(row))
        free_layer(layer)
    what = " + ".join(f"{k} x{v}" for k, v in sorted(sources.items(), key=lambda kv: -kv[1]))
    return new, what


CHECK_ROWS = 64  # rows of each matrix _check_close compares, spread over it (every head of q and k has some)


def _check_close(qw: QuantWeight, w: torch.Tensor, what: str) -> None:
    """The GGUF's blocks against the (bf16-rounded) checkpoint made from the same file: never silently wrong rows.
    Compares CHECK_ROWS rows spread over the matrix (rows permuted the wrong way, or a GGUF that is not the
    checkpoint's, differ in any of them): dequantizing all 120 of SmolLM2's took 1-2 s of every start."""
    rows = torch.arange(0, qw.n, max(1, qw.n // CHECK_ROWS))
    ref = w[rows].float()
    err = (take_rows(qw, rows).dequantize() - ref).abs().max().item()
    if err > 0.01 * ref.abs().max().item() + 1e-6:
        raise QuantError(f"GGUF blocks of {what} do not match the checkpoint made from them (max error {err:.3g})")


def free_layer(layer: Any) -> None:
    """Layer's HF projection weights replaced by meta tensors of their shapes (the runner holds them now)."""
    attn, mlp = layer.self_attn, layer.mlp
    for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj):
        m.weight = torch.nn.Parameter(torch.empty(m.weight.shape, device="meta"), requires_grad=False)


def plan(
    requested: str, device: str, kernels: Any, lean: bool, gguf_path: Any, model_type: str, table: Any = None
) -> str:
    """What `--quantization requested` means for this model here: "none", "int8", "int4" or "gguf" (the GGUF's own
    blocks); QuantError for a request that cannot be served, naming what can. int8 / int4 run on a CPU with the
    kernels, or on an accelerator through its device `table`'s weight_quant_matmul (engine/core/device_quant.py:
    the NPU table's fused op, the torch reference on CUDA / MPS)."""
    if requested not in CHOICES:
        raise QuantError(f"--quantization must be one of {', '.join(CHOICES)}, got {requested!r}")
    if requested == "none":
        return "none"
    usable = lean and kernels is not None and str(device) == "cpu"
    if requested == "auto":
        return "gguf" if usable and gguf_path is not None and model_type in GGUF_ARCHS else "none"
    if not lean:
        raise QuantError(
            f"--quantization {requested}: quantized weights need the lean runner (Llama, Mistral, "
            "Qwen2, Qwen3, Gemma 3 text); this model runs the HF forward: use auto or none"
        )
    accelerator = str(device) != "cpu" or (
        table is not None and table.chosen.get("weight_quant_matmul", "torch") != "torch"
    )
    if not (usable or accelerator):
        raise QuantError(
            f"--quantization {requested}: quantized weights run on an accelerator (NPU, CUDA, MPS) or on an "
            "x86-64 CPU with AVX2 and FMA and a g++ (the CPU kernels, not off by PLAYGROUND_CPU_KERNELS=0); on this "
            f"{device} only auto and none are supported"
        )
    return requested
