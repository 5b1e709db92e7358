"""A decode step's layers in one native call: cpu_kernels.cpp's `decode_layers`, for the lean runner on a CPU with
the kernels.

The runner's layer loop (model_runner.DecoderRunner._layers) calls about nine kernels a layer from Python: the
projections, rotary embedding with the KV write, attention, the norms with their residual adds, SiLU gating. Each
call costs 10-25 us of Python, ctypes and tensor allocation around a kernel that itself takes microseconds for a
lone stream's one row: about a quarter of a SmolLM2 decode step on 2 cores, and what llama.cpp does not pay.
`decode_layers` calls the same kernels in the same order with the same arguments from C++, so its numbers are
bit-identical to the loop's (tests/engine/core/test_fused_step.py); the loop stays the reference and the path for
everything this does not cover.

It covers a step whose every row decodes (no prompt chunk, no sliding window, no LoRA adapter in the step) with
fewer rows than each projection's kernel takes: bf16 weights through linear_bf16 (below the rows from which a
`--dtype bf16` projection switches to oneDNN), quantized ones through linear_q below quant.SPLIT_ROWS where
calibration kept the tile kernel. `FusedStep.build` says None where a model or its kernels do not fit.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.core import quant
from engine.core.cpu_kernels import StepLayer, StepProj
from engine.core.ops import CpuOps
from engine.core.projection import KERNEL_ROWS, Projection


class FusedStep:
    """The plan of one runner's layers for decode_layers (pointers into its weights and KV pools, which it keeps
    alive) with the model's shapes, and `rows`: a step must have fewer rows than this to take it."""

    def __init__(self, runner: Any, plan: Any, rows: int, keep: list[torch.Tensor]) -> None:
        self.plan, self.rows, self._keep = plan, rows, keep
        self.kern, self.first_norm, self.eps = runner.kern, runner.norm_w[0], runner.norm_eps
        k_pool = runner.layer_kv[0][0]
        hidden, inter = int(self.first_norm.shape[0]), runner.model.config.intermediate_size
        self.dims = (runner.n_heads, runner.n_kv, runner.head_dim, hidden, inter, int(k_pool.shape[1]))
        self.kv_bf16 = k_pool.dtype == torch.bfloat16

    @staticmethod
    def build(runner: Any) -> FusedStep | None:
        ops, kern = runner.ops, runner.kern
        if kern is None or not isinstance(ops, CpuOps) or ops.kern is not kern or runner.gemma is not None:
            return None
        if runner.window is not None or runner.dtype != torch.float32:
            return None
        keep: list[torch.Tensor] = []
        rows = KERNEL_ROWS + 1
        layers = []
        for li, projections in enumerate(runner.proj):
            described = []
            for p in projections:
                d = _describe(p, keep)
                if d is None:
                    return None
                described.append(d)
            rows = min([rows, *(limit for _, limit in described if limit)])
            k_pool, v_pool = runner.layer_kv[li]
            norms = [runner.norm_w[2 * li + 1], runner.norm_w[2 * li + 2]]
            qk = runner.qk_norm[li] if runner.qk_norm is not None else None
            tensors = [k_pool, v_pool, *norms, *(qk[:2] if qk else [])]
            if not all(t.is_contiguous() for t in tensors) or not all(n.dtype == torch.float32 for n in tensors[2:]):
                return None
            if k_pool.dtype != v_pool.dtype or k_pool.dtype not in (torch.float32, torch.bfloat16):
                return None
            keep.extend(tensors)
            layers.append(
                StepLayer(
                    *(d for d, _ in described),
                    norms[0].data_ptr(),
                    norms[1].data_ptr(),
                    k_pool.data_ptr(),
                    v_pool.data_ptr(),
                    qk[0].data_ptr() if qk else None,
                    qk[1].data_ptr() if qk else None,
                    qk[2] if qk else 0.0,
                    0,
                )
            )
        first = runner.norm_w[0]
        if first.dtype != torch.float32 or not first.is_contiguous():
            return None
        keep.append(first)
        return FusedStep(runner, (StepLayer * len(layers))(*layers), rows, keep)

    def run(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slots: Any, rows: Any) -> Any:
        """The final norm's output [N, hidden] of a decode step (DecoderRunner._layers' arguments); h is left as
        the last residual, as the loop leaves it."""
        return self.kern.decode_layers(
            self.plan,
            self.first_norm,
            h,
            cos,
            sin,
            slots,
            rows.table,
            rows.lens,
            self.dims,
            self.eps,
            self.kv_bf16,
        )


def _describe(p: Any, keep: list[torch.Tensor]) -> tuple[StepProj, int] | None:
    """A projection as decode_layers takes it, and the rows below which it runs that kernel (0: no limit of its
    own); None where it does not run one of them."""
    bias = getattr(p, "bias", None)
    if bias is not None and (bias.dtype != torch.float32 or not bias.is_contiguous()):
        return None
    bias_ptr = bias.data_ptr() if bias is not None else None
    if bias is not None:
        keep.append(bias)
    if isinstance(p, Projection):
        w = p.weight
        if p.kernels is None or w.dtype != torch.bfloat16 or not w.is_contiguous():
            return None
        keep.append(w)
        limit = p.bf16_from if p.mixed else 0
        return StepProj(0, w.shape[0], w.shape[1], 0, 0, 0, w.data_ptr(), None, None, bias_ptr), limit
    if isinstance(p, quant.QuantProjection):
        qw = p.qw
        if p.kernels is None or p.kernels_by_rows[0] != "tile" or qw.kp != qw.k:
            return None
        kinds = {torch.float32: 1, torch.float16: 2}
        if qw.scale.dtype not in kinds or (qw.minv.numel() and qw.minv.dtype != qw.scale.dtype):
            return None
        keep.extend([qw.q, qw.scale, qw.minv])
        minv = qw.minv.data_ptr() if qw.minv.numel() else None
        proj = StepProj(
            kinds[qw.scale.dtype],
            qw.n,
            qw.kp,
            qw.group,
            qw.bits,
            0,
            qw.q.data_ptr(),
            qw.scale.data_ptr(),
            minv,
            bias_ptr,
        )
        return proj, quant.SPLIT_ROWS
    return None
