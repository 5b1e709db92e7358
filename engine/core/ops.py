"""The device operations of a decoder layer, one table per backend: where backends differ, and nowhere else.

`TorchOps` is the reference: plain torch, runs on any device, and is what every other implementation is tested
against (tests/engine/core/test_device_ops.py). A backend subclasses it and overrides the operations it does better; each
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
KV pools (and the k / v a prompt chunk reads from them) may hold another dtype than q, the activations':
`--kv-cache-dtype bf16` keeps them in bf16 under float32 activations (engine/core/kv.py `kv_dtype`). rope_store
rounds into them, and the attention operations read them as they are and compute in q's dtype, returning it.

- `decode_attention(q, k_pool, v_pool, table, lens, starts=None)`: q [B, H, D], one new token per sequence,
  against the first lens[b] positions of the pages table[b] lists ([B, width], zero-padded) -> [B, H, D]; from
  position starts[b] of that list when given (a sliding window that begins inside the list's first page).
- `prompt_attention(q, k, v, start, window=0)`: a prompt chunk q [H, T, D] at positions start.. against its keys
  and values k / v [KV, start + T, D], causal -> [H, T, D]; with a window, a query sees only the `window` latest
  positions up to its own (Gemma 3's sliding layers; positions are relative to k's first row).
- `prefill_attention(q, k_pool, v_pool, table, q_lens, kv_lens)`: every prompt chunk of a step at once, q [N, H, D]
  (the chunks' rows one after another, q_lens[s] rows for chunk s), each chunk's last q_lens[s] positions of its
  kv_lens[s] causal against the pages table[s] lists -> [N, H, D]. Only a table with `paged_prefill` set gets it
  from the runner (the NPU's, one fused call per layer); the reference runs `prompt_attention` chunk by chunk.
- `norm_residual(x, delta, w, eps)`: (RMSNorm(x + delta) * w, x + delta); the reference adds in place and hands x
  back as the new residual, a fused backend returns its own sum (the NPU's add-and-norm op).
- `weight_quant_matmul(x, weight, scale, offset=None, group_size=0, bias=None)`: W8A16 / W4A16, x [M, K] in the
  model's dtype against an int8 weight [K, N] (int4: int32 [K, N / 8], eight values per int32, lowest nibble
  first), dequantised as (w + offset) * scale, per channel (scale [N]) or per group of `group_size` rows of K
  (scale [K / group_size, N]) -> [M, N] in x's dtype.
- `quant_matmul(x, weight, scale, pertoken_scale=None, bias=None, out_dtype=torch.bfloat16)`: W8A8, int8 x [M, K]
  and weight [K, N], int32 accumulation, times scale [N] (and pertoken_scale [M]) -> [M, N] in out_dtype.
  `--quantization int8 | int4` on an accelerator multiplies with `weight_quant_matmul` (engine/core/device_quant.py);
  no model path calls `quant_matmul` yet: it is here so that the NPU's table and its fake are held to its
  documented call.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

OPS = (
    "add_rmsnorm",
    "rope_store",
    "silu_mul",
    "gelu_tanh_mul",
    "decode_attention",
    "prompt_attention",
    "prefill_attention",
    "weight_quant_matmul",
    "quant_matmul",
)
QKNorm = tuple[torch.Tensor, torch.Tensor, float]  # Qwen3's per-head q and k norm weights, and their eps


class TorchOps:
    """The reference implementation: what runs anywhere (CPU without the kernels, CUDA, MPS, an NPU's fallback)."""

    name = "torch"
    paged_prefill = False  # whether the runner hands every prompt chunk of a step to one prefill_attention call

    def __init__(self) -> None:
        self.chosen: dict[str, str] = {op: "torch" for op in OPS}  # operation -> the implementation used

    def norm_residual(
        self, x: torch.Tensor, delta: torch.Tensor, w: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.add_rmsnorm(x, delta, w, eps), x

    def add_rmsnorm(self, x: torch.Tensor, delta: torch.Tensor | None, w: torch.Tensor, eps: float) -> torch.Tensor:
        if delta is not None:
            x.add_(delta)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return w * h.to(x.dtype)  # as HF's LlamaRMSNorm: normalise in float32, scale in the model's dtype

    def rope_store(
        self,
        qkv: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        slots: torch.Tensor,
        k_rows: torch.Tensor,
        v_rows: torch.Tensor,
        heads: int,
        qk_norm: QKNorm | None = None,
    ) -> torch.Tensor:
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

    def decode_attention(
        self,
        q: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
        table: torch.Tensor,
        lens: torch.Tensor,
        starts: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Gathers each row's pages into a padded [B, width * PAGE] copy and masks the padding."""
        b, h, d = q.shape
        page, kv = k_pool.shape[1], k_pool.shape[2]
        flat = table.long().flatten()
        shape = (b, table.shape[1] * page, kv, d)
        k = k_pool.index_select(0, flat).view(shape).transpose(1, 2).to(q.dtype)  # [B, KV, width, D]
        v = v_pool.index_select(0, flat).view(shape).transpose(1, 2).to(q.dtype)
        at = torch.arange(shape[1], device=q.device)
        mask = at < lens.to(q.device).unsqueeze(1)
        if starts is not None:
            mask &= at >= starts.to(q.device).unsqueeze(1)
        mask = mask[:, None, None]
        o = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, enable_gqa=h != kv)
        return o.view(b, h, d)

    def prompt_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, window: int = 0
    ) -> torch.Tensor:
        t, total = q.shape[1], k.shape[1]
        k, v = k.to(q.dtype), v.to(q.dtype)  # bf16 pages under float32 activations: widened once per chunk
        mask = None
        windowed = 0 < window < total  # some query has keys beyond its window
        causal = t > 1 and start == 0 and not windowed
        if (t > 1 and start > 0) or windowed:
            rows = torch.arange(t, device=q.device).unsqueeze(1) + start
            cols = torch.arange(total, device=q.device).unsqueeze(0)
            mask = cols <= rows
            if windowed:
                mask &= rows - cols < window
        o = F.scaled_dot_product_attention(
            q.unsqueeze(0),
            k.unsqueeze(0),
            v.unsqueeze(0),
            attn_mask=mask,
            is_causal=causal,
            enable_gqa=q.shape[0] != k.shape[0],
        )
        return o[0]

    def prefill_attention(
        self,
        q: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
        table: torch.Tensor,
        q_lens: list[int],
        kv_lens: list[int],
    ) -> torch.Tensor:
        out = torch.empty_like(q)
        page, a = k_pool.shape[1], 0
        for s, (t, total) in enumerate(zip(q_lens, kv_lens)):
            pages = table[s, : -(-total // page)].long()
            k = k_pool[pages].flatten(0, 1)[:total].transpose(0, 1)  # [KV, total, D]
            v = v_pool[pages].flatten(0, 1)[:total].transpose(0, 1)
            out[a : a + t] = self.prompt_attention(q[a : a + t].transpose(0, 1), k, v, total - t).transpose(0, 1)
            a += t
        return out

    def weight_quant_matmul(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        scale: torch.Tensor,
        offset: torch.Tensor | None = None,
        group_size: int = 0,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        w = unpack_int4(weight) if weight.dtype == torch.int32 else weight
        w = w.to(x.dtype)
        if group_size:
            scale = scale.repeat_interleave(group_size, 0)[: w.shape[0]]
            offset = offset.repeat_interleave(group_size, 0)[: w.shape[0]] if offset is not None else None
        if offset is not None:
            w = w + offset.to(x.dtype)
        out = x @ (w * scale.to(x.dtype))
        return out + bias.to(out.dtype) if bias is not None else out

    def quant_matmul(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        scale: torch.Tensor,
        pertoken_scale: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        out_dtype: torch.dtype = torch.bfloat16,
    ) -> torch.Tensor:
        acc = (x.to(torch.int64) @ weight.to(torch.int64)).to(torch.float32)  # exact int32 accumulation
        out = acc * scale.float()
        if pertoken_scale is not None:
            out = out * pertoken_scale.float()[:, None]
        if bias is not None:
            out = out + bias.float()
        return out.to(out_dtype)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """int32 [K, N / 8], eight signed 4-bit values per int32 with the lowest nibble first -> int8 [K, N]."""
    shifts = torch.arange(0, 32, 4, device=packed.device, dtype=torch.int32)
    nibbles = (packed.unsqueeze(-1) >> shifts) & 0xF  # [K, N / 8, 8]
    nibbles = torch.where(nibbles >= 8, nibbles - 16, nibbles)
    return nibbles.flatten(-2).to(torch.int8)


def pack_int4(w: torch.Tensor) -> torch.Tensor:
    """int8 [K, N] of values in [-8, 7] -> int32 [K, N / 8], `unpack_int4`'s inverse."""
    k, n = w.shape
    nibbles = (w.to(torch.int32) & 0xF).view(k, n // 8, 8)
    shifts = torch.arange(0, 32, 4, device=w.device, dtype=torch.int64)
    return _to_int32((nibbles.to(torch.int64) << shifts).sum(-1))


def _to_int32(v: torch.Tensor) -> torch.Tensor:
    """int64 values in [0, 2**32) -> their two's-complement int32."""
    return torch.where(v >= 2**31, v - 2**32, v).to(torch.int32)


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class CpuOps(TorchOps):
    """The C++ kernels of cpu_kernels.py for the five elementwise / decode operations (float32 activations, KV
    pages of float32 or bf16); prompt attention stays torch's SDPA, which is already one fused call per chunk (bf16
    pages widened to float32 once per chunk and layer, a pass over the chunk's KV beside the SDPA's
    chunk x context work)."""

    name = "cpu"

    def __init__(self, kern: Any) -> None:
        super().__init__()
        self.kern = kern
        for op in ("add_rmsnorm", "silu_mul", "gelu_tanh_mul", "decode_attention"):
            setattr(self, op, getattr(kern, op))
        for op in ("add_rmsnorm", "rope_store", "silu_mul", "gelu_tanh_mul", "decode_attention"):
            self.chosen[op] = f"cpu_kernels.{op} ({kern.isa})"

    def rope_store(
        self,
        qkv: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        slots: torch.Tensor,
        k_rows: torch.Tensor,
        v_rows: torch.Tensor,
        heads: int,
        qk_norm: QKNorm | None = None,
    ) -> torch.Tensor:
        return self.kern.rope_store(qkv, cos, sin, slots, k_rows, v_rows, heads, qk_norm)
