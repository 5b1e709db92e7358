"""A FAKE torch_npu for tests: the fused functions engine/core/npu_ops.py calls, in plain torch on the CPU.

No Ascend code runs here and nothing here proves the real kernels accept these calls. Each fake function has the
documented signature of its torch_npu namesake (parameter names and order, which are keyword-only, defaults, as
the Ascend Extension for PyTorch API pages give them), so that a wrong name or an extra argument raises TypeError
as the real binding would; asserts the documented dtypes and layouts the engine relies on (4-d rotary input,
int32 slot indices and block tables, an int32 host tensor of context lengths, block sizes aligned to 16 with
block_size x head_size <= 128 x 128, TND with cumulative query ends, sparse_mode 3's 2048 x 2048 mask, int8 /
int4-in-int32 weights with scales in x's dtype, ...); records the call with its arguments bound to the
parameter names (`calls`); and returns what the documentation says the op computes (in place where the real op
writes in place: `_npu_reshape_and_cache` into the caches, `_npu_paged_attention` into `out`).

`FakeTorchNpu(version=..., missing=(...), half_only=False, private_in_c=False)`: `__version__`; functions left
out, to test the version rule and the fallbacks; `half_only` makes the attention and weight-quant functions
reject float32 as the real ones do (the tests let float32 through to compare with the float32 reference);
`private_in_c` puts the private `_npu_*` functions on `torch_npu._C` only.

(The `torch_npu` package beside this file is another fake: one whose import fails, as on a host without drivers.)
"""

from __future__ import annotations

import inspect
import math
import types
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

FUSED = (
    "npu_rms_norm",
    "npu_add_rms_norm",
    "npu_rotary_mul",
    "npu_swiglu",
    "_npu_reshape_and_cache",
    "_npu_paged_attention",
    "npu_fused_infer_attention_score",
    "npu_incre_flash_attention",
    "npu_prompt_flash_attention",
    "npu_weight_quant_batchmatmul",
    "npu_quant_matmul",
)
HALF = (torch.float16, torch.bfloat16)
MAX_INT = 2147483647


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: torch.dtype
    contiguous: bool
    device: str = "cpu"


@dataclass
class Call:
    name: str
    args: list[Any]  # TensorInfo for tensors, the value otherwise, as passed positionally
    kwargs: dict[str, Any] = field(default_factory=dict)  # as passed by keyword
    bound: dict[str, Any] = field(default_factory=dict)  # every argument given, by its parameter name


def _info(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return TensorInfo(tuple(x.shape), x.dtype, x.is_contiguous(), str(x.device))
    return x


class FakeNpuGraphTasks:
    """FAKE `torch_npu.npu`'s graph-task calls (what torch.npu.graph_task_group_begin / _end and
    graph_task_update_begin / _end are): `capturing` says whether a capture is under way; each call is recorded."""

    def __init__(self) -> None:
        self.capturing = False
        self.events: list[tuple[str, Any]] = []
        self._next = 0

    def current_stream(self) -> str:
        return "stream"

    def is_current_stream_capturing(self) -> bool:
        return self.capturing

    def graph_task_group_begin(self, stream: Any) -> None:
        assert self.capturing, "a task group is recorded inside a capture"
        self.events.append(("group_begin", stream))

    def graph_task_group_end(self, stream: Any) -> int:
        self._next += 1
        self.events.append(("group_end", self._next))
        return self._next

    def graph_task_update_begin(self, stream: Any, handle: Any) -> None:
        assert not self.capturing, "tasks are updated between replays"
        self.events.append(("update_begin", handle))

    def graph_task_update_end(self, stream: Any) -> None:
        self.events.append(("update_end", stream))


class FakeTorchNpu(types.ModuleType):
    """FAKE: stands in for `import torch_npu` (sys.modules) or is passed to NpuOps directly."""

    def __init__(
        self, version: str = "2.5.1", missing: tuple[str, ...] = (), half_only: bool = False, private_in_c: bool = False
    ) -> None:
        super().__init__("torch_npu")
        self.__version__ = version
        self.half_only = half_only
        self.calls: list[Call] = []
        self._C = types.SimpleNamespace()
        self.npu = FakeNpuGraphTasks()
        for name in FUSED:
            if name in missing:
                continue
            fn = self._recording(name, globals()[f"fake{name}" if name.startswith("_") else f"fake_{name}"])
            setattr(self._C if private_in_c and name.startswith("_") else self, name, fn)

    def _recording(self, name: str, impl: Any) -> Any:
        sig = inspect.signature(impl)

        def call(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)  # TypeError on a wrong name or too many arguments, as the binding
            self.calls.append(
                Call(
                    name,
                    [_info(a) for a in args],
                    {k: _info(v) for k, v in kwargs.items()},
                    {k: _info(v) for k, v in bound.arguments.items()},
                )
            )
            if self.half_only and name in HALF_ONLY:
                first = args[0] if args else next(iter(kwargs.values()))
                assert first.dtype in HALF, f"{name} takes fp16 / bf16, got {first.dtype}"
            return impl(*args, **kwargs)

        call.__name__ = name
        call.__signature__ = sig  # type: ignore[attr-defined]
        return call

    def named(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]


HALF_ONLY = {
    "_npu_paged_attention",
    "npu_fused_infer_attention_score",
    "npu_incre_flash_attention",
    "npu_prompt_flash_attention",
    "npu_weight_quant_batchmatmul",
}


# -- the documented semantics ------------------------------------------------------------------------------------


def fake_npu_rms_norm(self: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-06):
    """npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor y, Tensor rstd)"""
    x = self
    assert x.dtype in (*HALF, torch.float32) and gamma.dtype == x.dtype, "gamma's dtype must be x's"
    assert gamma.shape == x.shape[-1:], "gamma: x's last dim"
    h = x.float()
    rstd = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + epsilon)
    return gamma * (h * rstd).to(x.dtype), rstd


def fake_npu_add_rms_norm(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-06):
    """npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) -> (y, rstd, x): x = x1 + x2"""
    assert x1.dtype in (*HALF, torch.float32) and x2.dtype == x1.dtype and gamma.dtype == x1.dtype, "one dtype"
    assert x1.shape == x2.shape and gamma.shape == x1.shape[-1:], "x1 / x2 one shape, gamma their last dim"
    x = x1 + x2
    y, rstd = fake_npu_rms_norm(x, gamma, epsilon)
    return y, rstd, x


def fake_npu_rotary_mul(self: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half"):
    """npu_rotary_mul(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half') -> Tensor"""
    x = self
    assert x.dim() == 4 and r1.dim() == 4 and r2.dim() == 4, "npu_rotary_mul takes 4-d tensors"
    assert rotary_mode == "half"
    a, b = x.chunk(2, dim=-1)
    return r1 * x + r2 * torch.cat((-b, a), dim=-1)


def fake_npu_swiglu(self: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """npu_swiglu(Tensor self, int dim=-1) -> Tensor"""
    assert self.is_contiguous(), "npu_swiglu takes no non-contiguous tensor"
    a, b = self.chunk(2, dim=dim)
    return F.silu(a) * b


def fake_npu_reshape_and_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_indices: torch.Tensor,
) -> None:
    """_npu_reshape_and_cache(key, value, key_cache, value_cache, slot_indices): in place, slot = block * bs + off"""
    assert slot_indices.dtype == torch.int32 and slot_indices.dim() == 1, "slot_indices: int32 [num_tokens]"
    assert key.dim() == 3 and key.shape == value.shape and key.shape[0] == slot_indices.shape[0], "key [T, KV, D]"
    assert key_cache.dim() == 4 and value_cache.shape == key_cache.shape, "caches [blocks, block_size, KV, D]"
    assert key_cache.shape[2:] == key.shape[1:], "the caches' heads and head size are key's"
    assert key.dtype == key_cache.dtype and value.dtype == value_cache.dtype, "key / value in the caches' dtype"
    assert key.is_contiguous() and value.is_contiguous(), "contiguous key / value"
    blocks, bs = key_cache.shape[:2]
    assert bool((slot_indices >= 0).all()) and bool((slot_indices < blocks * bs).all()), "slots within the caches"
    kflat, vflat = key_cache.view(-1, *key.shape[1:]), value_cache.view(-1, *key.shape[1:])
    kflat.index_copy_(0, slot_indices.long(), key)
    vflat.index_copy_(0, slot_indices.long(), value)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, allowed: torch.Tensor | None):
    """q [N, Sq, D], k / v [KV, Skv, D] (N a multiple of KV), allowed [Sq, Skv] or None -> [N, Sq, D]."""
    rep = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(rep, 0).float(), v.repeat_interleave(rep, 0).float()
    scores = torch.einsum("nsd,ntd->nst", q.float(), k) * scale
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -math.inf)
    return torch.einsum("nst,ntd->nsd", scores.softmax(-1), v).to(q.dtype)


def _block_rules(block_size: int, head_size: int) -> None:
    assert block_size % 16 == 0, "block_size: a multiple of 16"
    assert block_size * head_size <= 128 * 128, "block_size x head_size <= 128 x 128"


def _pages(cache: torch.Tensor, table_row: torch.Tensor, length: int, kv: int, d: int) -> torch.Tensor:
    """One sequence's first `length` positions from its block_table row -> [KV, length, D]."""
    bs = cache.shape[1]
    blocks = -(-length // bs)
    assert table_row.shape[0] >= blocks, "block_table too narrow for the length"
    return cache[table_row[:blocks].long()].reshape(-1, kv, d)[:length].transpose(0, 1)


def fake_npu_paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    num_kv_heads: int,
    num_heads: int,
    scale_value: float,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    out: torch.Tensor,
) -> None:
    """_npu_paged_attention(query, key_cache, value_cache, num_kv_heads, num_heads, scale_value, block_table,
    context_lens, out): query [B, H, D], caches [blocks, block_size, KV, D], context_lens int32 on the host."""
    b, h, d = query.shape
    assert h == num_heads and key_cache.dim() == 4 and key_cache.shape[2:] == (num_kv_heads, d), "layouts"
    assert value_cache.shape == key_cache.shape and key_cache.dtype == query.dtype, "caches in the query's dtype"
    assert block_table.dtype == torch.int32 and block_table.shape[0] == b, "block_table int32 [B, width]"
    assert context_lens.dtype == torch.int32 and context_lens.device.type == "cpu" and context_lens.shape == (b,)
    assert out.shape == query.shape and out.dtype == query.dtype, "out: the query's shape and dtype"
    _block_rules(key_cache.shape[1], d)
    for i in range(b):
        n = int(context_lens[i])
        k, v = (
            _pages(key_cache, block_table[i], n, num_kv_heads, d),
            _pages(value_cache, block_table[i], n, num_kv_heads, d),
        )
        out[i] = _attend(query[i].view(h, 1, d), k, v, scale_value, None).view(h, d)


def _paged_decode(query, key, value, lens, block_table, block_size, num_heads, num_key_value_heads, scale):
    assert query.dim() == 3 and query.shape[1] == 1, "paged decode: query BSH with S = 1"
    assert key.dim() == 3 and key.shape == value.shape, "paged KV: (blocknum, blocksize, H) for a BSH query"
    assert block_table is not None and block_table.dtype == torch.int32 and block_table.dim() == 2
    assert block_size == key.shape[1], "block_size: the caches'"
    assert lens is not None and len(lens) == query.shape[0] and all(isinstance(n, int) for n in lens)
    b, kv = query.shape[0], num_key_value_heads or num_heads
    d = query.shape[2] // num_heads
    _block_rules(block_size, d)
    assert key.shape[2] == kv * d
    out = torch.empty_like(query)
    for i in range(b):
        k, v = _pages(key, block_table[i], lens[i], kv, d), _pages(value, block_table[i], lens[i], kv, d)
        out[i, 0] = _attend(query[i, 0].view(num_heads, 1, d), k, v, scale, None).reshape(-1)
    return out


def _compressed_mask(atten_mask) -> None:
    assert atten_mask is not None and atten_mask.dtype in (torch.bool, torch.int8, torch.uint8), "mask dtype"
    assert atten_mask.shape == (2048, 2048), "sparse_mode 3: the compressed 2048 x 2048 mask"
    assert torch.equal(atten_mask.bool(), torch.ones(2048, 2048, dtype=torch.bool).triu(1)), "the documented mask"


def _tnd_paged(
    query,
    key,
    value,
    atten_mask,
    block_table,
    block_size,
    actual_seq_lengths,
    actual_seq_lengths_kv,
    num_heads,
    num_key_value_heads,
    scale,
    sparse_mode,
):
    """TND with paged KV: query [T, N, D], key / value [blocks, block_size, KV * D], actual_seq_lengths the
    cumulative query ends, actual_seq_lengths_kv each sequence's KV length."""
    t, n, d = query.shape
    kv = num_key_value_heads or num_heads
    assert n == num_heads and key.dim() == 3 and key.shape == value.shape and key.shape[2] == kv * d, "TND layouts"
    assert block_size == key.shape[1], "block_size: the caches'"
    _block_rules(block_size, d)
    assert block_table.dtype == torch.int32 and block_table.dim() == 2
    ends, kv_lens = list(actual_seq_lengths), list(actual_seq_lengths_kv)
    assert all(isinstance(x, int) for x in ends + kv_lens), "int lists"
    assert len(ends) == len(kv_lens) == block_table.shape[0], "one length per sequence"
    assert ends == sorted(ends) and ends[-1] == t, "TND: actual_seq_lengths are cumulative, ending at T"
    assert sparse_mode == 3, "causal prefill: sparse_mode 3"
    _compressed_mask(atten_mask)
    out = torch.empty_like(query)
    a = 0
    for s, (e, total) in enumerate(zip(ends, kv_lens)):
        rows = e - a
        assert 0 < rows <= total
        k, v = _pages(key, block_table[s], total, kv, d), _pages(value, block_table[s], total, kv, d)
        allowed = torch.arange(total)[None] <= torch.arange(rows)[:, None] + (total - rows)  # right-down causal
        out[a:e] = _attend(query[a:e].transpose(0, 1), k, v, scale, allowed).transpose(0, 1)
        a = e
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
        _compressed_mask(atten_mask)
        allowed = torch.arange(skv)[None] <= torch.arange(sq)[:, None] + (skv - sq)  # right-down aligned
    elif atten_mask is not None:
        assert sparse_mode == 0
        allowed = ~atten_mask.bool().reshape(sq, skv)
    out = torch.stack([_attend(q[i], k[i], v[i], scale, allowed) for i in range(q.shape[0])])
    return to_bnsd(out)


def fake_npu_incre_flash_attention(
    query,
    key,
    value,
    *,
    padding_mask=None,
    pse_shift=None,
    atten_mask=None,
    actual_seq_lengths=None,
    antiquant_scale=None,
    antiquant_offset=None,
    block_table=None,
    dequant_scale1=None,
    quant_scale1=None,
    dequant_scale2=None,
    quant_scale2=None,
    quant_offset2=None,
    kv_padding_size=None,
    num_heads=1,
    scale_value=1.0,
    input_layout="BSH",
    num_key_value_heads=0,
    block_size=0,
    inner_precise=1,
):
    assert input_layout == "BSH" and block_table is not None, "the engine's paged BSH form"
    return _paged_decode(
        query, key, value, actual_seq_lengths, block_table, block_size, num_heads, num_key_value_heads, scale_value
    )


def fake_npu_fused_infer_attention_score(
    query,
    key,
    value,
    *,
    pse_shift=None,
    atten_mask=None,
    actual_seq_lengths=None,
    actual_seq_lengths_kv=None,
    dequant_scale1=None,
    quant_scale1=None,
    dequant_scale2=None,
    quant_scale2=None,
    quant_offset2=None,
    antiquant_scale=None,
    antiquant_offset=None,
    block_table=None,
    query_padding_size=None,
    kv_padding_size=None,
    key_antiquant_scale=None,
    key_antiquant_offset=None,
    value_antiquant_scale=None,
    value_antiquant_offset=None,
    key_shared_prefix=None,
    value_shared_prefix=None,
    actual_shared_prefix_len=None,
    query_rope=None,
    key_rope=None,
    key_rope_antiquant_scale=None,
    num_heads=1,
    scale=1.0,
    pre_tokens=MAX_INT,
    next_tokens=MAX_INT,
    input_layout="BSH",
    num_key_value_heads=0,
    sparse_mode=0,
    inner_precise=0,
    block_size=0,
    antiquant_mode=0,
    softmax_lse_flag=False,
    key_antiquant_mode=0,
    value_antiquant_mode=0,
):
    if input_layout == "TND":
        assert block_table is not None, "the engine's TND form is paged"
        out = _tnd_paged(
            query,
            key,
            value,
            atten_mask,
            block_table,
            block_size,
            actual_seq_lengths,
            actual_seq_lengths_kv,
            num_heads,
            num_key_value_heads,
            scale,
            sparse_mode,
        )
    elif block_table is not None:
        assert input_layout == "BSH"
        out = _paged_decode(
            query, key, value, actual_seq_lengths_kv, block_table, block_size, num_heads, num_key_value_heads, scale
        )
    else:
        out = _dense(query, key, value, input_layout, num_heads, num_key_value_heads, scale, atten_mask, sparse_mode)
    return out, torch.zeros(1)


def fake_npu_prompt_flash_attention(
    query,
    key,
    value,
    *,
    pse_shift=None,
    padding_mask=None,
    atten_mask=None,
    actual_seq_lengths=None,
    deq_scale1=None,
    quant_scale1=None,
    deq_scale2=None,
    quant_scale2=None,
    quant_offset2=None,
    num_heads=1,
    scale_value=1.0,
    pre_tokens=2147473647,
    next_tokens=0,
    input_layout="BSH",
    num_key_value_heads=0,
    actual_seq_lengths_kv=None,
    sparse_mode=0,
):
    return _dense(query, key, value, input_layout, num_heads, num_key_value_heads, scale_value, atten_mask, sparse_mode)


def _unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """int32 [K, N / 8] -> int8 [K, N]: eight signed nibbles per int32, the lowest first (an ASSUMPTION about
    npu_convert_weight_to_int4pack's order, not checked on hardware)."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    nib = (packed.unsqueeze(-1) >> shifts) & 0xF
    return torch.where(nib >= 8, nib - 16, nib).flatten(-2).to(torch.int8)


def fake_npu_weight_quant_batchmatmul(
    x,
    weight,
    antiquant_scale,
    antiquant_offset=None,
    quant_scale=None,
    quant_offset=None,
    bias=None,
    antiquant_group_size=0,
    inner_precise=0,
):
    """npu_weight_quant_batchmatmul(Tensor x, Tensor weight, Tensor antiquant_scale, Tensor? antiquant_offset=None,
    Tensor? quant_scale=None, Tensor? quant_offset=None, Tensor? bias=None, int antiquant_group_size=0,
    int inner_precise=0) -> Tensor: x @ ((weight + antiquant_offset) * antiquant_scale) (+ bias)"""
    assert x.dim() == 2 and weight.dim() == 2, "x (M, K), weight (K, N)"
    assert weight.dtype in (torch.int8, torch.int32), "weight int8, or int32 carrying int4"
    w = _unpack_int4(weight) if weight.dtype == torch.int32 else weight
    k, n = w.shape
    assert x.shape[1] == k
    assert antiquant_scale.dtype == x.dtype, "antiquant_scale in x's dtype"
    assert antiquant_offset is None or (
        antiquant_offset.dtype == x.dtype and antiquant_offset.shape == antiquant_scale.shape
    )
    assert quant_scale is None and quant_offset is None, "the engine asks for x's dtype out"
    g = antiquant_group_size
    if g:
        assert g % 32 == 0 and antiquant_scale.shape == (-(-k // g), n), "per-group: (ceil(K / group), N)"
        scale = antiquant_scale.repeat_interleave(g, 0)[:k]
        offset = antiquant_offset.repeat_interleave(g, 0)[:k] if antiquant_offset is not None else None
    else:
        assert antiquant_scale.shape in ((n,), (1, n), (1,)), "per-channel: (N,) or (1, N)"
        scale, offset = antiquant_scale, antiquant_offset
    wf = w.float() + (offset.float() if offset is not None else 0)
    out = x.float() @ (wf * scale.float())
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype)


def fake_npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None):
    """npu_quant_matmul(Tensor x1, Tensor x2, Tensor scale, *, Tensor? offset=None, Tensor? pertoken_scale=None,
    Tensor? bias=None, ScalarType? output_dtype=None) -> Tensor: (x1 @ x2) * scale (* pertoken_scale) (+ bias)"""
    assert x1.dtype == torch.int8 and x2.dtype == torch.int8 and x1.dim() == x2.dim() == 2, "int8 (M, K) @ (K, N)"
    assert x1.shape[1] == x2.shape[0]
    assert output_dtype in HALF, "the engine asks for fp16 / bf16 out"
    assert scale.dtype in ((torch.float32, torch.bfloat16) if output_dtype == torch.bfloat16 else (torch.float32,))
    assert scale.shape in ((x2.shape[1],), (1,))
    assert offset is None
    acc = (x1.to(torch.int64) @ x2.to(torch.int64)).float()
    out = acc * scale.float()
    if pertoken_scale is not None:
        assert pertoken_scale.dtype == torch.float32 and pertoken_scale.shape == (x1.shape[0],)
        out = out * pertoken_scale[:, None]
    if bias is not None:
        out = out + bias.float()
    return out.to(output_dtype)
