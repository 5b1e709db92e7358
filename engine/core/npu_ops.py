"""torch_npu's fused operations for the decoder layer on an Ascend NPU: engine/core/ops.py's table, op by op.

At construction the table imports torch_npu and picks, for each of the five operations, the first fused function
it has by name (and version), else the torch reference with one log line naming what was missing:

- add_rmsnorm: `npu_rms_norm(x, gamma, epsilon=)[0]` after the in-place residual add.
- rope_store: `npu_rotary_mul(x, r1, r2)` ("half" mode, the default: x * cos + rotate_half(x) * sin) on q and k
  as [1, N, heads, D] (BSND) with cos / sin as [1, N, 1, D]; one call for q and k together, two after Qwen3's
  per-head norms (`npu_rms_norm` when present). The KV write is `index_copy_`, as in the reference.
- silu_mul: `npu_swiglu(gate_up, dim=-1)` (silu of the first half times the second).
- decode_attention: `npu_fused_infer_attention_score`, else `npu_incre_flash_attention`, with paged KV: q as
  [B, 1, H * D] (BSH), the pools viewed (no copy) as [pages, PAGE, KV * D], `block_table` = the runner's page
  table (int32), `block_size` = PAGE, the lengths as `actual_seq_lengths_kv` (FIA) / `actual_seq_lengths` (IFA),
  `num_key_value_heads` = KV for GQA, scale D ** -0.5.
- prompt_attention: `npu_prompt_flash_attention`, else `npu_fused_infer_attention_score`, dense: q as
  [1, T, H, D] and k / v as [1, start + T, KV, D] (BSND), causal from `start` as `sparse_mode=3`
  (rightDownCausal: row i sees keys up to i + start) with the documented compressed 2048 x 2048 upper-triangle
  mask, no mask for a single row.

Version rule: every fused op needs torch_npu >= 2.1.0 (`MIN_VERSION`): the API pages these wrappers follow (the
Ascend Extension for PyTorch 6.0 / 7.0 op lists and Ascend/op-plugin docs) are for the 2.1+ builds; the 1.11
line carries some of these names with other argument lists. An older or unparsable `torch_npu.__version__` gives
the reference for every operation, one log line each.

The attention ops take float16 / bfloat16 only: a float32 call (`--dtype fp32` on an NPU) runs the reference for
that call (`attention_dtypes`; logged once per operation). RMSNorm, rotary and SwiGLU take float32 as well.

What was and was not run on a real NPU: nothing here has run on Ascend hardware. No NPU was available while it was
written; tests/test_npu_ops.py checks, against a FAKE torch_npu (tests/fake_torch_npu/fake_fused_npu.py, plain
torch on the CPU computing each op's documented semantics), which function each operation chose, the fallbacks
and their log lines, the version rule, the argument shapes / dtypes / keyword names passed, that every result
equals the torch reference's, and that a DecoderRunner on this table gives HF's logits. Not checked: that the
real kernels accept these calls (layout, alignment and dtype limits on a given Atlas product and CANN release),
their numerics in bf16 / fp16, and their speed.
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
    "add_rmsnorm": ("npu_rms_norm",),
    "rope_store": ("npu_rotary_mul",),
    "silu_mul": ("npu_swiglu",),
    "decode_attention": ("npu_fused_infer_attention_score", "npu_incre_flash_attention"),
    "prompt_attention": ("npu_prompt_flash_attention", "npu_fused_infer_attention_score"),
}
MASK_SIZE = 2048  # the compressed causal mask's side for sparse_mode 2 / 3 / 4


def parse_version(text: str) -> tuple[int, ...] | None:
    """'2.1.0.post3' -> (2, 1, 0); '2.5.1+cpu' -> (2, 5, 1); None when it does not start with numbers."""
    m = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g or 0) for g in m.groups()) if m else None


class NpuOps(TorchOps):
    """The reference's table with torch_npu's fused functions where this torch_npu has them (module docstring)."""

    name = "npu"
    attention_dtypes: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16)

    def __init__(self, npu: Any) -> None:
        """`npu`: the torch_npu module, which engine/device.py (the one place that imports it) hands over."""
        super().__init__()
        self.npu = npu
        self.version = str(getattr(npu, "__version__", "unknown"))
        self.fn: dict[str, tuple[str, Callable[..., Any]]] = {}  # operation -> (function name, function)
        parsed = parse_version(self.version)
        for op, names in CANDIDATES.items():
            if parsed is None or parsed < MIN_VERSION:
                log.warning("npu op %s: torch reference (torch_npu %s is older than %s, which %s needs)", op,
                            self.version, ".".join(map(str, MIN_VERSION)), " / ".join(names))  # fmt: skip
                continue
            found = next(((n, getattr(npu, n)) for n in names if callable(getattr(npu, n, None))), None)
            if found is None:
                log.warning("npu op %s: torch reference (torch_npu %s has no %s)", op, self.version,
                            " or ".join(names))  # fmt: skip
                continue
            self.fn[op] = found
            self.chosen[op] = f"torch_npu.{found[0]}"
        self._lens: tuple[torch.Tensor | None, list[int]] = (None, [])  # the last lens tensor and its host copy
        self._masks: dict[torch.device, torch.Tensor] = {}
        self._dtype_logged: set[str] = set()

    # -- elementwise --------------------------------------------------------------------------------------------

    def add_rmsnorm(self, x: torch.Tensor, delta: torch.Tensor | None, w: torch.Tensor, eps: float) -> torch.Tensor:
        if "add_rmsnorm" not in self.fn:
            return super().add_rmsnorm(x, delta, w, eps)
        if delta is not None:
            x.add_(delta)
        return self.fn["add_rmsnorm"][1](x, w, epsilon=eps)[0]

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        if "silu_mul" not in self.fn:
            return super().silu_mul(gate_up)
        return self.fn["silu_mul"][1](gate_up.contiguous(), dim=-1)

    def rope_store(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slots: torch.Tensor,
                   k_rows: torch.Tensor, v_rows: torch.Tensor, heads: int,
                   qk_norm: QKNorm | None = None) -> torch.Tensor:  # fmt: skip
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
        k_rows.index_copy_(0, slots, k.to(k_rows.dtype))
        v_rows.index_copy_(0, slots, qkv[:, (heads + kv) * d :].reshape(n, kv, d).to(v_rows.dtype))
        return q

    def _head_norm(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        if "add_rmsnorm" in self.fn:
            return self.fn["add_rmsnorm"][1](x.contiguous(), w, epsilon=eps)[0]
        h = x.float()
        return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)

    # -- attention ----------------------------------------------------------------------------------------------

    def decode_attention(self, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, table: torch.Tensor,
                         lens: torch.Tensor, starts: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        if starts is not None or not self._fused_attention("decode_attention", q.dtype):  # windows: the reference
            return super().decode_attention(q, k_pool, v_pool, table, lens, starts)
        fn_name, fn = self.fn["decode_attention"]
        b, h, d = q.shape
        pages, page, kv = k_pool.shape[0], k_pool.shape[1], k_pool.shape[2]
        query = q.reshape(b, 1, h * d)  # BSH, S = 1
        key, value = k_pool.view(pages, page, kv * d), v_pool.view(pages, page, kv * d)  # (blocknum, blocksize, H)
        kw: dict[str, Any] = dict(block_table=table.to(torch.int32), block_size=page, num_heads=h,
                                  num_key_value_heads=kv, input_layout="BSH")  # fmt: skip
        if fn_name == "npu_fused_infer_attention_score":
            out = fn(query, key, value, actual_seq_lengths_kv=self._host_lens(lens), scale=d**-0.5, **kw)[0]
        else:  # npu_incre_flash_attention: its actual_seq_lengths are the KV lengths
            out = fn(query, key, value, actual_seq_lengths=self._host_lens(lens), scale_value=d**-0.5, **kw)
        return out.view(b, h, d)

    def prompt_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int,
                         window: int = 0) -> torch.Tensor:  # fmt: skip
        if window or not self._fused_attention("prompt_attention", q.dtype):  # windows: the reference
            return super().prompt_attention(q, k, v, start, window)
        fn_name, fn = self.fn["prompt_attention"]
        h, t, d = q.shape
        kv = k.shape[0]
        # BSND: the runner's q rows and pool rows already lie this way, so these are views when they can be
        query = q.transpose(0, 1).unsqueeze(0).contiguous()  # [1, T, H, D]
        key = k.transpose(0, 1).unsqueeze(0).contiguous()  # [1, start + T, KV, D]
        value = v.transpose(0, 1).unsqueeze(0).contiguous()
        kw: dict[str, Any] = dict(num_heads=h, num_key_value_heads=kv, input_layout="BSND")
        if t > 1:  # a single row sees every key: no mask
            kw.update(atten_mask=self._causal_mask(q.device), sparse_mode=3)
        if fn_name == "npu_prompt_flash_attention":
            out = fn(query, key, value, scale_value=d**-0.5, **kw)
        else:  # npu_fused_infer_attention_score
            out = fn(query, key, value, scale=d**-0.5, **kw)[0]
        return out[0].transpose(0, 1)  # [H, T, D]

    def _fused_attention(self, op: str, dtype: torch.dtype) -> bool:
        if op not in self.fn:
            return False
        if dtype in self.attention_dtypes:
            return True
        if op not in self._dtype_logged:
            self._dtype_logged.add(op)
            log.info("npu op %s: torch reference for %s (torch_npu.%s takes %s)", op, dtype, self.fn[op][0],
                     " / ".join(str(t) for t in self.attention_dtypes))  # fmt: skip
        return False

    def _host_lens(self, lens: torch.Tensor) -> list[int]:
        """The lengths as a host list (the ops take int[]), copied once per step: the runner passes the same
        tensor to every layer. One tuple, swapped whole, so that sibling runners sharing this table stay right."""
        held, values = self._lens
        if held is not lens:
            values = [int(x) for x in lens.tolist()]
            self._lens = (lens, values)
        return values

    def _causal_mask(self, device: torch.device) -> torch.Tensor:
        """The compressed mask of sparse_mode 3: True (masked) above the diagonal of a 2048 x 2048 square."""
        mask = self._masks.get(device)
        if mask is None:
            mask = torch.ones(MASK_SIZE, MASK_SIZE, dtype=torch.bool, device=device).triu(1)
            self._masks[device] = mask
        return mask
