"""A FAKE torch_npu for tests: the fused functions engine/core/npu_ops.py calls, in plain torch on the CPU.

No Ascend code runs here and nothing here proves the real kernels accept these calls. Each fake function has the
documented keyword names of its torch_npu namesake (a wrong name raises TypeError, as the real binding would),
checks the documented layout rules that the engine relies on (4-d rotary input, BSH paged KV with an int32 block
table, a block size aligned to 16, sparse_mode 3's 2048 x 2048 mask), records the call (`calls`), and returns
what the documentation says the op computes. `FakeTorchNpu(version=..., missing=(...))` sets `__version__` and
leaves functions out, to test the version rule and the fallbacks.

(The `torch_npu` package beside this file is another fake: one whose import fails, as on a host without drivers.)
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

FUSED = ("npu_rms_norm", "npu_rotary_mul", "npu_swiglu", "npu_fused_infer_attention_score",
         "npu_incre_flash_attention", "npu_prompt_flash_attention")  # fmt: skip


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: torch.dtype
    contiguous: bool


@dataclass
class Call:
    name: str
    args: list[Any]  # TensorInfo for tensors, the value otherwise
    kwargs: dict[str, Any] = field(default_factory=dict)


def _info(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return TensorInfo(tuple(x.shape), x.dtype, x.is_contiguous())
    return x


class FakeTorchNpu(types.ModuleType):
    """FAKE: stands in for `import torch_npu` (sys.modules) or is passed to NpuOps directly."""

    def __init__(self, version: str = "2.5.1", missing: tuple[str, ...] = ()) -> None:
        super().__init__("torch_npu")
        self.__version__ = version
        self.calls: list[Call] = []
        for name in FUSED:
            if name not in missing:
                setattr(self, name, self._recording(name, globals()[f"_{name}"]))

    def _recording(self, name: str, impl: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(Call(name, [_info(a) for a in args], {k: _info(v) for k, v in kwargs.items()}))
            return impl(*args, **kwargs)

        call.__name__ = name
        return call

    def named(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]


# -- the documented semantics ------------------------------------------------------------------------------------


def _npu_rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    assert gamma.dtype == x.dtype, "gamma's dtype must be x's"
    h = x.float()
    rstd = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + epsilon)
    return gamma * (h * rstd).to(x.dtype), rstd


def _npu_rotary_mul(x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half") -> torch.Tensor:
    assert x.dim() == 4 and r1.dim() == 4 and r2.dim() == 4, "npu_rotary_mul takes 4-d tensors"
    assert rotary_mode == "half"
    a, b = x.chunk(2, dim=-1)
    return r1 * x + r2 * torch.cat((-b, a), dim=-1)


def _npu_swiglu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    assert x.is_contiguous(), "npu_swiglu takes no non-contiguous tensor"
    a, b = x.chunk(2, dim=dim)
    return F.silu(a) * b


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, allowed: torch.Tensor | None):
    """q [N, Sq, D], k / v [KV, Skv, D] (N a multiple of KV), allowed [Sq, Skv] or None -> [N, Sq, D]."""
    rep = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(rep, 0).float(), v.repeat_interleave(rep, 0).float()
    scores = torch.einsum("nsd,ntd->nst", q.float(), k) * scale
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -math.inf)
    return torch.einsum("nst,ntd->nsd", scores.softmax(-1), v).to(q.dtype)


def _paged_decode(query, key, value, lens, block_table, block_size, num_heads, num_key_value_heads, scale):
    assert query.dim() == 3 and query.shape[1] == 1, "paged decode: query BSH with S = 1"
    assert key.dim() == 3 and key.shape == value.shape, "paged KV: (blocknum, blocksize, H) for a BSH query"
    assert block_table is not None and block_table.dtype == torch.int32 and block_table.dim() == 2
    assert block_size == key.shape[1] and block_size % 16 == 0, "block_size: the pool's, 16-aligned for fp16/bf16"
    assert lens is not None and len(lens) == query.shape[0] and all(isinstance(n, int) for n in lens)
    b, kv = query.shape[0], num_key_value_heads or num_heads
    d = query.shape[2] // num_heads
    assert key.shape[2] == kv * d
    out = torch.empty_like(query)
    for i in range(b):
        blocks = -(-lens[i] // block_size)
        assert block_table.shape[1] >= blocks
        pages = block_table[i, :blocks].long()
        k = key[pages].reshape(-1, kv, d)[: lens[i]].transpose(0, 1)  # [KV, L, D]
        vv = value[pages].reshape(-1, kv, d)[: lens[i]].transpose(0, 1)
        out[i, 0] = _attend(query[i, 0].view(num_heads, 1, d), k, vv, scale, None).reshape(-1)
    return out


def _dense(query, key, value, layout, num_heads, num_key_value_heads, scale, atten_mask, sparse_mode):
    """BSND / BNSD dense attention with sparse_mode 0 (mask or none) or 3 (the compressed right-down causal)."""
    assert layout in ("BSND", "BNSD"), layout
    assert query.is_contiguous() and key.is_contiguous() and value.is_contiguous(), "no non-contiguous tensor"
    to_bnsd = (lambda x: x.transpose(1, 2)) if layout == "BSND" else (lambda x: x)
    q, k, v = to_bnsd(query), to_bnsd(key), to_bnsd(value)
    assert q.shape[1] == num_heads and k.shape[1] == (num_key_value_heads or num_heads)
    sq, skv = q.shape[2], k.shape[2]
    allowed = None
    if sparse_mode == 3:
        assert atten_mask is not None and atten_mask.dtype == torch.bool and atten_mask.shape == (2048, 2048)
        assert torch.equal(atten_mask, torch.ones(2048, 2048, dtype=torch.bool).triu(1)), "the documented mask"
        allowed = torch.arange(skv)[None] <= torch.arange(sq)[:, None] + (skv - sq)  # right-down aligned
    elif atten_mask is not None:
        assert sparse_mode == 0
        allowed = ~atten_mask.bool().reshape(sq, skv)
    out = torch.stack([_attend(q[i], k[i], v[i], scale, allowed) for i in range(q.shape[0])])
    return to_bnsd(out)


def _npu_incre_flash_attention(query, key, value, *, padding_mask=None, pse_shift=None, atten_mask=None,
                               actual_seq_lengths=None, block_table=None, kv_padding_size=None, num_heads=1,
                               scale_value=1.0, input_layout="BSH", num_key_value_heads=0, block_size=0,
                               inner_precise=1):  # fmt: skip
    assert input_layout == "BSH" and block_table is not None, "the engine's paged BSH form"
    return _paged_decode(query, key, value, actual_seq_lengths, block_table, block_size, num_heads,
                         num_key_value_heads, scale_value)  # fmt: skip


def _npu_fused_infer_attention_score(query, key, value, *, pse_shift=None, atten_mask=None, actual_seq_lengths=None,
                                     actual_seq_lengths_kv=None, block_table=None, num_heads=1, scale=1.0,
                                     pre_tokens=2147483647, next_tokens=2147483647, input_layout="BSH",
                                     num_key_value_heads=0, sparse_mode=0, inner_precise=0, block_size=0,
                                     softmax_lse_flag=False):  # fmt: skip
    if block_table is not None:
        assert input_layout == "BSH"
        out = _paged_decode(query, key, value, actual_seq_lengths_kv, block_table, block_size, num_heads,
                            num_key_value_heads, scale)  # fmt: skip
    else:
        out = _dense(query, key, value, input_layout, num_heads, num_key_value_heads, scale, atten_mask, sparse_mode)
    return out, torch.zeros(1)


def _npu_prompt_flash_attention(query, key, value, *, pse_shift=None, padding_mask=None, atten_mask=None,
                                actual_seq_lengths=None, num_heads=1, scale_value=1.0, pre_tokens=2147473647,
                                next_tokens=0, input_layout="BSH", num_key_value_heads=0, actual_seq_lengths_kv=None,
                                sparse_mode=0):  # fmt: skip
    return _dense(query, key, value, input_layout, num_heads, num_key_value_heads, scale_value, atten_mask,
                  sparse_mode)  # fmt: skip
