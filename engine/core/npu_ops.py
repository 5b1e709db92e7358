"""torch_npu's fused operations for the decoder layer on an Ascend NPU: engine/core/ops.py's table, op by op.

At construction the table imports torch_npu and picks, for each operation, the first fused function it has by
name (and version), else the torch reference with one log line naming what was missing. The calls follow the
signatures of the Ascend Extension for PyTorch API pages (torch_npu 2.1+) and the way vLLM-Ascend's attention
backend and ops call the same functions (read, not copied):

- add_rmsnorm / norm_residual: `npu_add_rms_norm(x1, x2, gamma, epsilon)` -> (y, rstd, x1 + x2): the norm and the
  new residual in one call; `npu_rms_norm(x, gamma, epsilon=)` -> (y, rstd) where there is nothing to add (the
  first layer's input norm, Qwen3's per-head q / k norms). x1, x2 and gamma share one dtype (fp16 / bf16 / fp32).
- rope_store: `npu_rotary_mul(x, r1, r2)` ("half" mode: x * cos + rotate_half(x) * sin) on q and k as
  [1, N, heads, D] (BSND), cos / sin [1, N, 1, D]; the KV write `_npu_reshape_and_cache(key=, value=, key_cache=,
  value_cache=, slot_indices=)`: key / value [N, KV, D], the caches [blocks, block_size, KV, D] (the pool's own
  pages), slot_indices int32 [N] (block * block_size + offset). Looked up as `torch_npu._npu_reshape_and_cache`,
  else `torch_npu._C._npu_reshape_and_cache`; without it, `index_copy_` as in the reference.
- silu_mul: `npu_swiglu(x, dim=-1)` (silu of the first half times the second).
- decode_attention: `_npu_paged_attention(query=, key_cache=, value_cache=, num_kv_heads=, num_heads=,
  scale_value=, block_table=, context_lens=, out=)` (what vLLM-Ascend runs for decode-only steps): query [B, H, D],
  the pools [blocks, block_size, KV, D] as they lie, block_table int32 [B, width], context_lens an int32 host tensor
  [B], out a preallocated [B, H, D]. Its documented limits are checked before the call: fp16 / bf16, a block size
  that is a multiple of 16, block_size * head_size <= 128 * 128. Else `npu_fused_infer_attention_score` in BSH
  with block_table, block_size and `actual_seq_lengths_kv` (the KV lengths, a host int list).
- prefill_attention (every prompt chunk of a step in one call, `paged_prefill`): `npu_fused_infer_attention_score`
  in the TND layout: query [N, H, D], key / value the pools viewed (no copy) as [blocks, block_size, KV * D],
  block_table int32 [chunks, width], `actual_seq_lengths` the cumulative query ends (T layout: chunk s's rows end
  at actual_seq_lengths[s]), `actual_seq_lengths_kv` each chunk's KV length, `sparse_mode=3` (right-down causal:
  a chunk's row i sees its first kv_len - q_len + i + 1 positions, which is chunked prefill) with the compressed
  2048 x 2048 int8 upper-triangle mask. Chunks of sliding-window layers (Gemma 3) stay on prompt_attention.
- prompt_attention (one chunk, dense; the windowed layers and the fallback when prefill_attention is not fused):
  `npu_prompt_flash_attention`, else `npu_fused_infer_attention_score`, BSND [1, T, H, D] / [1, start + T, KV, D],
  sparse_mode 3 with the same compressed mask, no mask for a single row.
- weight_quant_matmul (W8A16 / W4A16): `npu_weight_quant_batchmatmul(x, weight, antiquant_scale,
  antiquant_offset=None, quant_scale=None, quant_offset=None, bias=None, antiquant_group_size=0)`: x [M, K] fp16 /
  bf16, weight int8 [K, N] or int32 [K, N / 8] (int4 packed eight to an int32), antiquant_scale / offset in x's
  dtype, [N] per channel or [K / group, N] per group.
- quant_matmul (W8A8): `npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None,
  output_dtype=None)`: int8 x1 [M, K] and x2 [K, N], scale [N] float32 (bf16 output: float32 or bf16),
  pertoken_scale float32 [M], output_dtype fp16 / bf16.

Guards: these ops fail asynchronously on the device (an error surfaces at a later synchronisation, and the stream
cannot be recovered), so each wrapper checks the dtypes, ranks and documented limits of its arguments first and
raises `NpuCallError` (a ValueError) naming the op and the argument. A float32 attention call (`--dtype fp32` on an
NPU) runs the reference instead, logged once per operation, as the attention kernels take fp16 / bf16 only.

Version rule: every fused op needs torch_npu >= 2.1.0 (`MIN_VERSION`); an older or unparsable version gives the
reference for every operation, one log line each.

What was and was not run on a real NPU: nothing here has run on Ascend hardware; no NPU was available while it was
written. tests/engine/core/test_npu_ops.py and tests/engine/core/test_npu_ops_signatures.py check it against a FAKE torch_npu
(tests/fake_torch_npu/fake_fused_npu.py: plain torch on the CPU with the documented names, argument order, dtypes
and layouts, asserting them): which function each operation chose, the fallbacks, the arguments passed, the guards,
that every result equals the torch reference's, and that a DecoderRunner on this table gives HF's logits. Not
checked: that the real kernels accept these calls on a given Atlas product and CANN release, the int4 packing order
(assumed lowest nibble first), their numerics in bf16 / fp16, and their speed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import torch

from engine.core.ops import QKNorm, TorchOps

log = logging.getLogger(__name__)

MIN_VERSION = (2, 1, 0)
# operation -> the torch_npu functions that implement it, preferred first
CANDIDATES: dict[str, tuple[str, ...]] = {
    "add_rmsnorm": ("npu_add_rms_norm", "npu_rms_norm"),
    "rope_store": ("npu_rotary_mul",),
    "silu_mul": ("npu_swiglu",),
    "decode_attention": ("_npu_paged_attention", "npu_fused_infer_attention_score"),
    "prompt_attention": ("npu_prompt_flash_attention", "npu_fused_infer_attention_score"),
    "prefill_attention": ("npu_fused_infer_attention_score",),
    "weight_quant_matmul": ("npu_weight_quant_batchmatmul",),
    "quant_matmul": ("npu_quant_matmul",),
}
KV_WRITE = "_npu_reshape_and_cache"
MASK_SIZE = 2048  # the compressed causal mask's side for sparse_mode 2 / 3 / 4
HALF = (torch.float16, torch.bfloat16)
NORM_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


class NpuCallError(ValueError):
    """Arguments a torch_npu op would reject (asynchronously, on the device): raised before the call."""


def parse_version(text: str) -> tuple[int, ...] | None:
    """'2.1.0.post3' -> (2, 1, 0); '2.5.1+cpu' -> (2, 5, 1); None when it does not start with numbers."""
    m = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g or 0) for g in m.groups()) if m else None


def _check(ok: bool, op: str, what: str) -> None:
    if not ok:
        raise NpuCallError(f"torch_npu.{op}: {what}")


def _lookup(npu: Any, name: str) -> Callable[..., Any] | None:
    """torch_npu.name, else torch_npu._C.name (the private ops live in the extension module)."""
    fn = getattr(npu, name, None)
    if not callable(fn):
        fn = getattr(getattr(npu, "_C", None), name, None)
    return fn if callable(fn) else None


class NpuOps(TorchOps):
    """The reference's table with torch_npu's fused functions where this torch_npu has them (module docstring)."""

    name = "npu"
    attention_dtypes: tuple[torch.dtype, ...] = HALF

    def __init__(self, npu: Any, page: int = 128) -> None:
        """`npu`: the torch_npu module, which engine/device.py (the one place that imports it) hands over; `page`:
        the KV pool's tokens per page (engine/device.py `page_size`), the block_size of the KV write."""
        super().__init__()
        self.npu = npu
        self.page = page
        self.version = str(getattr(npu, "__version__", "unknown"))
        self.fn: dict[str, tuple[str, Callable[..., Any]]] = {}  # operation -> (function name, function)
        parsed = parse_version(self.version)
        new_enough = parsed is not None and parsed >= MIN_VERSION
        for op, names in CANDIDATES.items():
            if not new_enough:
                log.warning(
                    "npu op %s: torch reference (torch_npu %s is older than %s, which %s needs)",
                    op,
                    self.version,
                    ".".join(map(str, MIN_VERSION)),
                    " / ".join(names),
                )
                continue
            found = next(((n, f) for n in names if (f := _lookup(npu, n)) is not None), None)
            if found is None:
                log.warning("npu op %s: torch reference (torch_npu %s has no %s)", op, self.version, " or ".join(names))
                continue
            self.fn[op] = found
            self.chosen[op] = f"torch_npu.{found[0]}"
        self.rms_norm = _lookup(npu, "npu_rms_norm") if new_enough else None
        self.kv_write = _lookup(npu, KV_WRITE) if new_enough else None
        if "rope_store" in self.fn and self.kv_write is not None:
            self.chosen["rope_store"] += f" + torch_npu.{KV_WRITE}"
        self.paged_prefill = "prefill_attention" in self.fn
        # Decode graphs (engine/core/graphs.py, begin_graphs): per batch size, the host lengths the captured paged
        # attention reads and its captured tasks (graph task handle, arguments), updated before each replay.
        self.graph_mode = False
        self._graph_lens: dict[int, torch.Tensor] = {}
        self._graph_tasks: dict[int, list[tuple[Any, dict[str, Any]]]] = {}
        self._lens: tuple[torch.Tensor | None, list[int]] = (None, [])  # the last lens tensor and its host copy
        self._host_lens_t: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)
        self._masks: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}
        self._dtype_logged: set[str] = set()

    # -- elementwise --------------------------------------------------------------------------------------------

    def _norm(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        _check(
            x.dtype in NORM_DTYPES and w.dtype == x.dtype,
            "npu_rms_norm",
            f"x {x.dtype} and gamma {w.dtype} must share one of fp16 / bf16 / fp32",
        )
        _check(w.shape == x.shape[-1:], "npu_rms_norm", f"gamma {tuple(w.shape)} is not x's last dim {x.shape[-1]}")
        assert self.rms_norm is not None
        return self.rms_norm(x, w, epsilon=eps)[0]

    def _add_norm(
        self, x: torch.Tensor, delta: torch.Tensor, w: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """npu_add_rms_norm(x1, x2, gamma, epsilon) -> (y, rstd, x1 + x2): (y, the new residual)."""
        fn = self.fn["add_rmsnorm"][1]
        _check(
            x.dtype in NORM_DTYPES and delta.dtype == x.dtype and w.dtype == x.dtype,
            "npu_add_rms_norm",
            f"x1 {x.dtype}, x2 {delta.dtype} and gamma {w.dtype} must share one of fp16 / bf16 / fp32",
        )
        _check(
            delta.shape == x.shape and w.shape == x.shape[-1:],
            "npu_add_rms_norm",
            f"x1 {tuple(x.shape)}, x2 {tuple(delta.shape)}, gamma {tuple(w.shape)}",
        )
        y, _rstd, s = fn(x, delta, w, eps)
        return y, s

    def add_rmsnorm(self, x: torch.Tensor, delta: torch.Tensor | None, w: torch.Tensor, eps: float) -> torch.Tensor:
        if "add_rmsnorm" not in self.fn:
            return super().add_rmsnorm(x, delta, w, eps)
        if delta is not None and self.fn["add_rmsnorm"][0] == "npu_add_rms_norm":
            y, s = self._add_norm(x, delta, w, eps)
            x.copy_(s)  # the in-place contract of add_rmsnorm; the runner calls norm_residual and skips this
            return y
        if delta is not None:
            x.add_(delta)
        if self.rms_norm is None:  # npu_add_rms_norm without npu_rms_norm: the reference for the norm alone
            return super().add_rmsnorm(x, None, w, eps)
        return self._norm(x, w, eps)

    def norm_residual(
        self, x: torch.Tensor, delta: torch.Tensor, w: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.fn.get("add_rmsnorm", ("",))[0] == "npu_add_rms_norm":
            return self._add_norm(x, delta, w, eps)
        return self.add_rmsnorm(x, delta, w, eps), x

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        if "silu_mul" not in self.fn:
            return super().silu_mul(gate_up)
        return self.fn["silu_mul"][1](gate_up.contiguous(), dim=-1)

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
        if "rope_store" not in self.fn:
            return super().rope_store(qkv, cos, sin, slots, k_rows, v_rows, heads, qk_norm)
        rotary = self.fn["rope_store"][1]
        n = qkv.shape[0]
        _, kv, d = k_rows.shape
        c, s = cos[None, :, None, :], sin[None, :, None, :]  # [1, N, 1, D]: broadcast over the heads of BSND
        if qk_norm is None:  # q and k side by side in qkv: one rotation for both
            qk = rotary(qkv[:, : (heads + kv) * d].reshape(1, n, heads + kv, d).contiguous(), c, s)[0]
            q, k = qk[:, :heads], qk[:, heads:]
        else:  # Qwen3: each head's q and k normalised first, with their own weights
            wq, wk, eps = qk_norm
            q = self._head_norm(qkv[:, : heads * d].reshape(n, heads, d), wq, eps)
            k = self._head_norm(qkv[:, heads * d : (heads + kv) * d].reshape(n, kv, d), wk, eps)
            q, k = rotary(q[None].contiguous(), c, s)[0], rotary(k[None].contiguous(), c, s)[0]
        v = qkv[:, (heads + kv) * d :].reshape(n, kv, d)
        self.write_kv(k.to(k_rows.dtype), v.to(v_rows.dtype), k_rows, v_rows, slots)
        return q

    def write_kv(
        self, k: torch.Tensor, v: torch.Tensor, k_rows: torch.Tensor, v_rows: torch.Tensor, slots: torch.Tensor
    ) -> None:
        """k / v [N, KV, D] at rows `slots` of k_rows / v_rows ([rows, KV, D], a pool's pages end to end):
        `_npu_reshape_and_cache` over the pages viewed as [blocks, block_size, KV, D], else `index_copy_`."""
        rows, kv, d = k_rows.shape
        page = self.page if rows % self.page == 0 else 0
        if self.kv_write is None or not page:
            k_rows.index_copy_(0, slots, k)
            v_rows.index_copy_(0, slots, v)
            return
        _check(
            k.dtype == k_rows.dtype and v.dtype == v_rows.dtype,
            KV_WRITE,
            f"key {k.dtype} / value {v.dtype} differ from the caches' {k_rows.dtype}",
        )
        _check(
            k.shape == v.shape == (slots.shape[0], kv, d),
            KV_WRITE,
            f"key {tuple(k.shape)} / value {tuple(v.shape)} are not [{slots.shape[0]}, {kv}, {d}]",
        )
        self.kv_write(
            key=k.contiguous(),
            value=v.contiguous(),
            key_cache=k_rows.view(rows // page, page, kv, d),
            value_cache=v_rows.view(rows // page, page, kv, d),
            slot_indices=slots.to(torch.int32),
        )

    def _head_norm(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        if self.rms_norm is not None:
            return self._norm(x.contiguous(), w, eps)
        h = x.float()
        return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

    # -- attention ----------------------------------------------------------------------------------------------

    def _paged_checks(
        self, op: str, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, table: torch.Tensor
    ) -> None:
        page, d = k_pool.shape[1], k_pool.shape[3]
        _check(
            k_pool.dtype == q.dtype and v_pool.dtype == q.dtype,
            op,
            f"the KV pools ({k_pool.dtype}) must have the query's dtype ({q.dtype})",
        )
        _check(k_pool.dim() == 4 and v_pool.shape == k_pool.shape, op, "pools must be [blocks, block_size, KV, D]")
        _check(page % 16 == 0, op, f"block_size {page} is not a multiple of 16")
        _check(page * d <= 128 * 128, op, f"block_size x head_size = {page} x {d} exceeds 128 x 128")
        _check(
            table.dtype == torch.int32 and table.dim() == 2,
            op,
            f"block_table must be int32 [batch, width], got {table.dtype} {tuple(table.shape)}",
        )

    def decode_attention(
        self,
        q: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
        table: torch.Tensor,
        lens: torch.Tensor,
        starts: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if starts is not None or not self._fused_attention("decode_attention", q.dtype):  # windows: the reference
            return super().decode_attention(q, k_pool, v_pool, table, lens, starts)
        fn_name, fn = self.fn["decode_attention"]
        b, h, d = q.shape
        pages, page, kv = k_pool.shape[0], k_pool.shape[1], k_pool.shape[2]
        table = table.to(torch.int32)
        self._paged_checks(fn_name, q, k_pool, v_pool, table)
        _check(
            table.shape[0] == b and lens.shape == (b,),
            fn_name,
            f"block_table {tuple(table.shape)} / lengths {tuple(lens.shape)} do not match {b} queries",
        )
        _check(h % kv == 0, fn_name, f"{h} query heads are not a multiple of {kv} KV heads")
        if fn_name == "_npu_paged_attention":
            out = torch.empty_like(q)
            kw = dict(
                query=q.contiguous(),
                key_cache=k_pool,
                value_cache=v_pool,
                num_kv_heads=kv,
                num_heads=h,
                scale_value=d**-0.5,
                block_table=table,
                out=out,
            )
            if self.graph_mode:
                self._graph_paged(fn, b, kw, lens)
            else:
                fn(**kw, context_lens=self._host_lens_tensor(lens))
            return out
        query = q.reshape(b, 1, h * d)  # BSH, S = 1
        key, value = k_pool.view(pages, page, kv * d), v_pool.view(pages, page, kv * d)  # (blocknum, blocksize, H)
        out = fn(
            query,
            key,
            value,
            block_table=table,
            block_size=page,
            num_heads=h,
            num_key_value_heads=kv,
            input_layout="BSH",
            actual_seq_lengths_kv=self._host_lens(lens),
            scale=d**-0.5,
        )[0]
        return out.view(b, h, d)

    def prefill_attention(
        self,
        q: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
        table: torch.Tensor,
        q_lens: list[int],
        kv_lens: list[int],
    ) -> torch.Tensor:
        if not self._fused_attention("prefill_attention", q.dtype):
            return super().prefill_attention(q, k_pool, v_pool, table, q_lens, kv_lens)
        fn_name, fn = self.fn["prefill_attention"]
        n, h, d = q.shape
        pages, page, kv = k_pool.shape[0], k_pool.shape[1], k_pool.shape[2]
        table = table.to(torch.int32)
        self._paged_checks(fn_name, q, k_pool, v_pool, table)
        _check(
            sum(q_lens) == n and len(q_lens) == len(kv_lens) == table.shape[0],
            fn_name,
            f"{n} query rows, q_lens {q_lens}, kv_lens {kv_lens}, block_table {tuple(table.shape)}",
        )
        _check(
            all(0 < t <= total for t, total in zip(q_lens, kv_lens)),
            fn_name,
            f"each chunk's rows must be within its KV length: q_lens {q_lens}, kv_lens {kv_lens}",
        )
        _check(
            max(kv_lens) <= table.shape[1] * page,
            fn_name,
            f"a KV length of {max(kv_lens)} exceeds the {table.shape[1]} pages of block_table",
        )
        ends, at = [], 0
        for t in q_lens:
            at += t
            ends.append(at)
        key, value = k_pool.view(pages, page, kv * d), v_pool.view(pages, page, kv * d)
        out = fn(
            q.contiguous(),
            key,
            value,
            atten_mask=self._causal_mask(q.device, torch.int8),
            block_table=table,
            input_layout="TND",
            block_size=page,
            actual_seq_lengths=ends,
            actual_seq_lengths_kv=list(kv_lens),
            num_key_value_heads=kv,
            num_heads=h,
            scale=d**-0.5,
            sparse_mode=3,
        )[0]
        return out.view(n, h, d)

    def prompt_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, window: int = 0
    ) -> torch.Tensor:
        if window or not self._fused_attention("prompt_attention", q.dtype):  # windows: the reference
            return super().prompt_attention(q, k, v, start, window)
        fn_name, fn = self.fn["prompt_attention"]
        h, t, d = q.shape
        kv = k.shape[0]
        _check(
            k.dtype == q.dtype and v.dtype == q.dtype and k.shape == v.shape,
            fn_name,
            f"key {k.dtype} {tuple(k.shape)} / value {v.dtype} {tuple(v.shape)} against query {q.dtype}",
        )
        _check(
            k.shape[1] == start + t and h % kv == 0,
            fn_name,
            f"keys {tuple(k.shape)} for {t} rows from {start}, {h} query heads",
        )
        # BSND: the runner's q rows and pool rows already lie this way, so these are views when they can be
        query = q.transpose(0, 1).unsqueeze(0).contiguous()  # [1, T, H, D]
        key = k.transpose(0, 1).unsqueeze(0).contiguous()  # [1, start + T, KV, D]
        value = v.transpose(0, 1).unsqueeze(0).contiguous()
        kw: dict[str, Any] = dict(num_heads=h, num_key_value_heads=kv, input_layout="BSND")
        if t > 1:  # a single row sees every key: no mask
            kw.update(atten_mask=self._causal_mask(q.device, torch.bool), sparse_mode=3)
        if fn_name == "npu_prompt_flash_attention":
            out = fn(query, key, value, scale_value=d**-0.5, **kw)
        else:  # npu_fused_infer_attention_score
            out = fn(query, key, value, scale=d**-0.5, **kw)[0]
        return out[0].transpose(0, 1)  # [H, T, D]

    # -- decode graphs -----------------------------------------------------------------------------------------

    def begin_graphs(self) -> None:
        """Decode steps will be captured (engine/core/graphs.py): the paged attention then reads its lengths from a
        host tensor per batch size, which no device-to-host copy fills inside a capture, and each captured call is a
        graph task group whose lengths `refresh_lengths` updates before a replay (torch_npu's
        graph_task_group_begin / _end and graph_task_update_begin / _end, as vLLM-Ascend updates its captured
        paged attention). The other ops read only device tensors: the static buffers carry their new values."""
        if "decode_attention" in self.fn and self.fn["decode_attention"][0] != "_npu_paged_attention":
            raise NpuCallError(
                f"torch_npu.{self.fn['decode_attention'][0]}: decode graphs need _npu_paged_attention, whose lengths "
                "a captured graph can update; this torch_npu lacks it"
            )
        self.graph_mode = "decode_attention" in self.fn

    def _graph_paged(self, fn: Callable[..., Any], b: int, kw: dict[str, Any], lens: torch.Tensor) -> None:
        graphs = self.npu.npu
        if not graphs.is_current_stream_capturing():  # warm-up, or an eager step: a plain call
            fn(**kw, context_lens=self._host_lens_tensor(lens))
            return
        host = self._graph_lens.setdefault(b, torch.ones(b, dtype=torch.int32))
        stream = graphs.current_stream()
        graphs.graph_task_group_begin(stream)
        fn(**kw, context_lens=host)
        self._graph_tasks.setdefault(b, []).append((graphs.graph_task_group_end(stream), kw))

    def refresh_lengths(self, lens: list[int]) -> None:
        """Before a replay of the graph of len(lens) rows: its host lengths, and every captured paged-attention task
        re-issued with them."""
        host = self._graph_lens.setdefault(len(lens), torch.ones(len(lens), dtype=torch.int32))
        host.copy_(torch.tensor(lens, dtype=torch.int32))
        tasks = self._graph_tasks.get(len(lens), [])
        if not tasks:
            return
        graphs, fn = self.npu.npu, self.fn["decode_attention"][1]
        stream = graphs.current_stream()
        for handle, kw in tasks:
            graphs.graph_task_update_begin(stream, handle)
            fn(**kw, context_lens=host)
            graphs.graph_task_update_end(stream)

    # -- quantized matmuls -------------------------------------------------------------------------------------

    def weight_quant_matmul(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        scale: torch.Tensor,
        offset: torch.Tensor | None = None,
        group_size: int = 0,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if "weight_quant_matmul" not in self.fn:
            return super().weight_quant_matmul(x, weight, scale, offset, group_size, bias)
        op = "npu_weight_quant_batchmatmul"
        _check(x.dtype in HALF and x.dim() == 2, op, f"x must be fp16 / bf16 [M, K], got {x.dtype} {tuple(x.shape)}")
        _check(
            weight.dtype in (torch.int8, torch.int32) and weight.dim() == 2 and weight.shape[0] == x.shape[1],
            op,
            f"weight must be int8 [K, N] or int32 [K, N / 8] with K = {x.shape[1]}, got {weight.dtype} "
            f"{tuple(weight.shape)}",
        )
        n = weight.shape[1] * (8 if weight.dtype == torch.int32 else 1)
        groups = -(-x.shape[1] // group_size) if group_size else 0
        want = (groups, n) if group_size else (n,)
        _check(
            scale.dtype == x.dtype and tuple(scale.shape) == want,
            op,
            f"antiquant_scale must be {x.dtype} {want}, got {scale.dtype} {tuple(scale.shape)}",
        )
        _check(
            offset is None or (offset.dtype == x.dtype and offset.shape == scale.shape),
            op,
            "antiquant_offset must match antiquant_scale's dtype and shape",
        )
        return self.fn["weight_quant_matmul"][1](
            x, weight, scale, antiquant_offset=offset, bias=bias, antiquant_group_size=group_size
        )

    def quant_matmul(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        scale: torch.Tensor,
        pertoken_scale: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        out_dtype: torch.dtype = torch.bfloat16,
    ) -> torch.Tensor:
        if "quant_matmul" not in self.fn:
            return super().quant_matmul(x, weight, scale, pertoken_scale, bias, out_dtype)
        op = "npu_quant_matmul"
        _check(
            x.dtype == torch.int8 and weight.dtype == torch.int8 and x.dim() == weight.dim() == 2,
            op,
            f"x1 / x2 must be int8 2-d, got {x.dtype} {tuple(x.shape)} / {weight.dtype} {tuple(weight.shape)}",
        )
        _check(x.shape[1] == weight.shape[0], op, f"x1 {tuple(x.shape)} and x2 {tuple(weight.shape)} do not chain")
        _check(out_dtype in HALF, op, f"output_dtype must be fp16 / bf16, got {out_dtype}")
        scale_dtypes = (torch.float32, torch.bfloat16) if out_dtype == torch.bfloat16 else (torch.float32,)
        _check(
            scale.dtype in scale_dtypes and tuple(scale.shape) in ((weight.shape[1],), (1,)),
            op,
            f"scale must be {' / '.join(map(str, scale_dtypes))} [N] or [1], got {scale.dtype} {tuple(scale.shape)}",
        )
        _check(
            pertoken_scale is None
            or (pertoken_scale.dtype == torch.float32 and tuple(pertoken_scale.shape) == (x.shape[0],)),
            op,
            "pertoken_scale must be float32 [M]",
        )
        return self.fn["quant_matmul"][1](
            x, weight, scale, offset=None, pertoken_scale=pertoken_scale, bias=bias, output_dtype=out_dtype
        )

    # -- helpers ------------------------------------------------------------------------------------------------

    def _fused_attention(self, op: str, dtype: torch.dtype) -> bool:
        if op not in self.fn:
            return False
        if dtype in self.attention_dtypes:
            return True
        if op not in self._dtype_logged:
            self._dtype_logged.add(op)
            log.info(
                "npu op %s: torch reference for %s (torch_npu.%s takes %s)",
                op,
                dtype,
                self.fn[op][0],
                " / ".join(str(t) for t in self.attention_dtypes),
            )
        return False

    def _host_lens(self, lens: torch.Tensor) -> list[int]:
        """The lengths as a host list (the ops take int[]), copied once per step: the runner passes the same
        tensor to every layer. One tuple, swapped whole, so that sibling runners sharing this table stay right."""
        held, values = self._lens
        if held is not lens:
            values = [int(x) for x in lens.tolist()]
            self._lens = (lens, values)
        return values

    def _host_lens_tensor(self, lens: torch.Tensor) -> torch.Tensor:
        """The lengths as an int32 host tensor (_npu_paged_attention's context_lens), once per step as above."""
        held, host = self._host_lens_t
        if held is not lens or host is None:
            host = lens.to("cpu", torch.int32)
            self._host_lens_t = (lens, host)
        return host

    def _causal_mask(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The compressed mask of sparse_mode 3: 1 / True (masked) above the diagonal of a 2048 x 2048 square."""
        mask = self._masks.get((device, dtype))
        if mask is None:
            mask = torch.ones(MASK_SIZE, MASK_SIZE, dtype=torch.bool, device=device).triu(1).to(dtype)
            self._masks[(device, dtype)] = mask
        return mask
