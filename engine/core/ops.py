"""The device operations of a decoder layer, one table per backend: where backends differ, and nowhere else.

`TorchOps` is the reference: plain torch, runs on any device, and is what every other implementation is tested
against (tests/test_device_ops.py). A backend subclasses it and overrides the operations it does better; each
table says which implementation it chose for each operation (`chosen`), so a start-up log line and a test can
tell. engine/device.py `device_ops` picks the table for a device; the runner (model_runner.py) only calls it.

The operations, with the shapes the runner passes (N tokens on one flat axis, H query heads, KV key/value heads,
D head size, pools of [pages, PAGE, KV, D]):

- `add_rmsnorm(x, delta, w, eps)`: x += delta in place (when given), then RMSNorm(x) * w as a new tensor.
- `rope_store(qkv, cos, sin, slots, k_rows, v_rows, heads, qk_norm=None)`: rotary embedding on the q and k of
  qkv [N, (H + 2 KV) D] (cos / sin [N, D]), after Qwen3's per-head norms when `qk_norm` is given; k and v
  written at row slots[n] of k_rows / v_rows ([rows, KV, D]); returns q [N, H, D].
- `silu_mul(gate_up)`: silu(gate) * up of gate_up [N, 2 F] -> [N, F].
- `gelu_tanh_mul(gate_up)`: gelu_tanh(gate) * up, the same shapes (Gemma 3's MLP).
- `decode_attention(q, k_pool, v_pool, table, lens, starts=None)`: q [B, H, D], one new token per sequence,
  against the first lens[b] positions of the pages table[b] lists ([B, width], zero-padded) -> [B, H, D]; from
  position starts[b] of that list when given (a sliding window that begins inside the list's first page).
- `prompt_attention(q, k, v, start, window=0)`: a prompt chunk q [H, T, D] at positions start.. against its keys
  and values k / v [KV, start + T, D], causal -> [H, T, D]; with a window, a query sees only the `window` latest
  positions up to its own (Gemma 3's sliding layers; positions are relative to k's first row).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

OPS = ("add_rmsnorm", "rope_store", "silu_mul", "gelu_tanh_mul", "decode_attention", "prompt_attention")
QKNorm = tuple[torch.Tensor, torch.Tensor, float]  # Qwen3's per-head q and k norm weights, and their eps


class TorchOps:
    """The reference implementation: what runs anywhere (CPU without the kernels, CUDA, MPS, an NPU's fallback)."""

    name = "torch"

    def __init__(self) -> None:
        self.chosen: dict[str, str] = {op: "torch" for op in OPS}  # operation -> the implementation used

    def add_rmsnorm(self, x: torch.Tensor, delta: torch.Tensor | None, w: torch.Tensor, eps: float) -> torch.Tensor:
        if delta is not None:
            x.add_(delta)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return w * h.to(x.dtype)  # as HF's LlamaRMSNorm: normalise in float32, scale in the model's dtype

    def rope_store(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slots: torch.Tensor,
                   k_rows: torch.Tensor, v_rows: torch.Tensor, heads: int,
                   qk_norm: QKNorm | None = None) -> torch.Tensor:  # fmt: skip
        n = qkv.shape[0]
        _, kv, d = k_rows.shape
        q, k, v = qkv.split((heads * d, kv * d, kv * d), dim=-1)
        q, k = q.reshape(n, heads, d), k.reshape(n, kv, d)
        if qk_norm is not None:  # Qwen3: each head's q and k normalised before the rotation
            wq, wk, eps = qk_norm
            q, k = _rms(q, wq, eps), _rms(k, wk, eps)
        c, s = cos[:, None, :], sin[:, None, :]
        q = q * c + rotate_half(q) * s
        k = k * c + rotate_half(k) * s
        k_rows.index_copy_(0, slots, k.to(k_rows.dtype))
        v_rows.index_copy_(0, slots, v.reshape(n, kv, d).to(v_rows.dtype))
        return q

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up

    def gelu_tanh_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.gelu(gate, approximate="tanh") * up

    def decode_attention(self, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, table: torch.Tensor,
                         lens: torch.Tensor, starts: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """Gathers each row's pages into a padded [B, width * PAGE] copy and masks the padding."""
        b, h, d = q.shape
        page, kv = k_pool.shape[1], k_pool.shape[2]
        flat = table.long().flatten()
        shape = (b, table.shape[1] * page, kv, d)
        k = k_pool.index_select(0, flat).view(shape).transpose(1, 2)  # [B, KV, width, D]
        v = v_pool.index_select(0, flat).view(shape).transpose(1, 2)
        at = torch.arange(shape[1], device=q.device)
        mask = at < lens.to(q.device).unsqueeze(1)
        if starts is not None:
            mask &= at >= starts.to(q.device).unsqueeze(1)
        mask = mask[:, None, None]
        o = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, enable_gqa=h != kv)
        return o.view(b, h, d)

    def prompt_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int,
                         window: int = 0) -> torch.Tensor:  # fmt: skip
        t, total = q.shape[1], k.shape[1]
        mask = None
        windowed = 0 < window < total  # some query has keys beyond its window
        causal = t > 1 and start == 0 and not windowed
        if (t > 1 and start > 0) or windowed:
            rows = torch.arange(t, device=q.device).unsqueeze(1) + start
            cols = torch.arange(total, device=q.device).unsqueeze(0)
            mask = cols <= rows
            if windowed:
                mask &= rows - cols < window
        o = F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), attn_mask=mask,
                                           is_causal=causal, enable_gqa=q.shape[0] != k.shape[0])  # fmt: skip
        return o[0]


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class CpuOps(TorchOps):
    """The C++ kernels of cpu_kernels.py for the five elementwise / decode operations (float32); prompt
    attention stays torch's SDPA, which is already one fused call per chunk."""

    name = "cpu"

    def __init__(self, kern: Any) -> None:
        super().__init__()
        self.kern = kern
        for op in ("add_rmsnorm", "silu_mul", "gelu_tanh_mul", "decode_attention"):
            setattr(self, op, getattr(kern, op))
        for op in ("add_rmsnorm", "rope_store", "silu_mul", "gelu_tanh_mul", "decode_attention"):
            self.chosen[op] = f"cpu_kernels.{op} ({kern.isa})"

    def rope_store(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slots: torch.Tensor,
                   k_rows: torch.Tensor, v_rows: torch.Tensor, heads: int,
                   qk_norm: QKNorm | None = None) -> torch.Tensor:  # fmt: skip
        return self.kern.rope_store(qkv, cos, sin, slots, k_rows, v_rows, heads, qk_norm)
