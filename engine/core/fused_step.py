"""A decode step's layers in one native call: cpu_kernels.cpp's `decode_layers`, for the lean runner on a CPU with
the kernels.

The runner's layer loop (model_runner.DecoderRunner._layers) calls about nine kernels a layer from Python: the
projections, rotary embedding with the KV write, attention, the norms with their residual adds, SiLU gating. Each
call costs 10-25 us of Python, ctypes and tensor allocation around a kernel that itself takes microseconds for a
lone stream's one row: about a quarter of a SmolLM2 decode step on 2 cores, and what llama.cpp does not pay.
`decode_layers` calls the same kernels in the same order with the same arguments from C++, so its numbers are
bit-identical to the loop's (tests/engine/core/test_fused_step.py); the loop stays the reference and the path for
everything this does not cover.

It covers a step whose every row decodes (no prompt chunk, no LoRA adapter in the step) with fewer rows than each
projection's kernel takes: bf16 weights through linear_bf16 (below the rows from which a `--dtype bf16` projection
switches to oneDNN), quantized ones through linear_q below quant.SPLIT_ROWS where calibration kept the tile kernel.
Gemma 3's layer (gemma.py) is the same call with what it adds: the norms of the attention's and the MLP's outputs,
gelu_tanh gating, q's scale, and per layer its RoPE table and, for a sliding layer with a window, the rows of the
window's own pool (StepRows). `FusedStep.build` says None where a model or its kernels do not fit.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.core import quant
from engine.core.cpu_kernels import StepLayer, StepProj, StepRows
from engine.core.kv import PAGE
from engine.core.ops import CpuOps
from engine.core.projection import KERNEL_ROWS, Projection


class FusedStep:
    """The plan of one runner's layers for decode_layers (pointers into its weights and KV pools, which it keeps
    alive) with the model's shapes, and `rows`: a step must have fewer rows than this to take it."""

    def __init__(self, runner: Any, plan: Any, rows: int, keep: list[torch.Tensor], first_norm: torch.Tensor) -> None:
        self.plan, self.rows, self._keep = plan, rows, keep
        self.kern, self.first_norm = runner.kern, first_norm
        gemma = runner.gemma
        self.eps = gemma.eps if gemma is not None else runner.norm_eps
        self.q_scale = gemma.q_scale if gemma is not None and gemma.q_scale is not None else 1.0
        self.gelu = gemma is not None
        k_pool = runner.layer_kv[0][0]
        hidden, inter = int(first_norm.shape[0]), runner.model.config.intermediate_size
        self.dims = (runner.n_heads, runner.n_kv, runner.head_dim, hidden, inter)
        self.page = runner.page
        self.kv_bf16 = k_pool.dtype == torch.bfloat16
        self.windowed = any(layer.rows for layer in plan)  # a layer reads the window's pool: run needs its rows

    @staticmethod
    def build(runner: Any) -> FusedStep | None:
        ops, kern, gemma = runner.ops, runner.kern, runner.gemma
        if kern is None or not isinstance(ops, CpuOps) or ops.kern is not kern or runner.dtype != torch.float32:
            return None
        first = runner.norm_w[0] if gemma is None else gemma.norms[0][0]
        keep: list[torch.Tensor] = [first]
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
            if gemma is None:
                mid, nxt, outs = runner.norm_w[2 * li + 1], runner.norm_w[2 * li + 2], [None, None]
                qk = runner.qk_norm[li] if runner.qk_norm is not None else None
            else:  # the sandwich norms (gemma.py): post-attention and post-feedforward on the outputs
                _, post_attn, mid, post_ff = gemma.norms[li]
                nxt = gemma.norms[li + 1][0] if li + 1 < len(gemma.norms) else gemma.final_norm
                outs, qk = [post_attn, post_ff], gemma.qk_norm[li]
            norms = [first, mid, nxt, *(qk[:2] if qk else []), *(n for n in outs if n is not None)]
            if not all(t.is_contiguous() and t.dtype == torch.float32 for t in norms):
                return None
            if not (k_pool.is_contiguous() and v_pool.is_contiguous()) or k_pool.dtype != v_pool.dtype:
                return None
            if k_pool.dtype not in (torch.float32, torch.bfloat16) or k_pool.dtype != runner.layer_kv[0][0].dtype:
                return None
            keep.extend([k_pool, v_pool, *norms])
            sliding = gemma is not None and gemma.sliding[li]
            layers.append(
                StepLayer(
                    *(d for d, _ in described),
                    mid.data_ptr(),
                    nxt.data_ptr(),
                    k_pool.data_ptr(),
                    v_pool.data_ptr(),
                    qk[0].data_ptr() if qk else None,
                    qk[1].data_ptr() if qk else None,
                    *(n.data_ptr() if n is not None else None for n in outs),
                    qk[2] if qk else 0.0,
                    int(sliding),  # its RoPE table
                    int(runner.window is not None and runner.sliding[li]),  # its rows: the window's pool
                    0,
                )
            )
        return FusedStep(runner, (StepLayer * len(layers))(*layers), rows, keep, first)

    def run(
        self,
        h: torch.Tensor,
        ropes: list[tuple[torch.Tensor, torch.Tensor]],
        slots: torch.Tensor,
        rows: Any,
        window_slots: torch.Tensor | None = None,
        window_rows: Any = None,
    ) -> torch.Tensor:
        """The final norm's output [N, hidden] of a decode step; h is left as the last residual, as the loop leaves
        it. ropes: (cos, sin) [N, head_dim] for the full layers, then for the sliding ones (Gemma 3); slots and rows
        (model_runner.DecodeRows) in the main pool, then in the window's for a model with one."""
        sets = [(slots, rows, self.page)]
        if self.windowed:
            if window_rows is None or window_slots is None:
                raise ValueError("this model's sliding layers read the window's pool: its rows are needed")
            sets.append((window_slots, window_rows, PAGE))
        step_rows = (StepRows * 2)(
            *(
                StepRows(
                    s.data_ptr(),
                    r.table.data_ptr(),
                    r.lens.data_ptr(),
                    r.starts.data_ptr() if r.starts is not None else None,
                    r.table.shape[1],
                    page,
                )
                for s, r, page in sets
            )
        )
        ropes = ropes if len(ropes) == 2 else [ropes[0], ropes[0]]
        return self.kern.decode_layers(
            self.plan, self.first_norm, h, ropes, step_rows, self.dims, self.eps, self.kv_bf16, self.q_scale, self.gelu
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
