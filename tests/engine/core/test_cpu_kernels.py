"""The C++ kernels of the lean runner (engine/core/cpu_kernels.cpp) against torch's own ops, on awkward shapes:
batch sizes either side of each tiling boundary, widths that are not a multiple of the vector width, ragged
sequence lengths and pages scattered through the pool. Every instruction-set build this CPU can run is tested (the
AVX2 one on an AVX-512 machine too); one it cannot run is skipped with the flags it lacks."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
import torch.nn.functional as F

from engine.core import cpu_kernels

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)


@pytest.fixture(scope="module", params=list(cpu_kernels.ISAS))
def K(request: pytest.FixtureRequest) -> cpu_kernels.CpuKernels:
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("no g++ on the path: the runner uses its torch path")
    try:
        return cpu_kernels.load(request.param)
    except RuntimeError as exc:
        pytest.skip(str(exc))


def test_kernels_pick_the_best_build_this_cpu_runs() -> None:
    isas = cpu_kernels.supported_isas()
    if not isas:
        pytest.skip("this CPU has no AVX2 and FMA: no kernels")
    best = cpu_kernels.kernels()
    assert best is not None and best.isa == (os.environ.get("PLAYGROUND_CPU_ISA") or isas[0])
    assert isas == [name for name in cpu_kernels.ISAS if name in isas]  # best first


# Rows either side of every tile boundary of both builds (AVX2 tiles of 3 weight rows x 4 input rows, AVX-512 4 x 6;
# one pass up to 16 rows, widened blocks of 64 beyond); widths not a multiple of 8 or 16, and 4 x 16 + 8 (a
# full AVX-512 step plus a half one).
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6, 7, 12, 13, 16, 17, 24, 25, 33, 64, 65, 129])
@pytest.mark.parametrize(("n", "k"), [(1, 8), (7, 64), (50, 576), (9, 13), (13, 72), (4, 16)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_bf16_matches_float32_linear(K, rows: int, n: int, k: int, with_bias: bool) -> None:
    g = torch.Generator().manual_seed(rows * 1000 + n * 10 + k)
    w = torch.randn(n, k, generator=g).to(torch.bfloat16)
    x = torch.randn(rows, k, generator=g)
    bias = torch.randn(n, generator=g) if with_bias else None
    got = K.linear_bf16(x, w, bias)
    torch.testing.assert_close(got, F.linear(x, w.float(), bias), atol=1e-4, rtol=1e-5)


def test_linear_bf16_reads_a_strided_input_as_its_values(K) -> None:
    w = torch.randn(12, 16).to(torch.bfloat16)
    x = torch.randn(16, 5).t()  # not contiguous
    torch.testing.assert_close(K.linear_bf16(x, w), F.linear(x, w.float()), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("head_dim", [16, 20, 64, 128])
def test_decode_attention_matches_sdpa_on_scattered_pages(K, head_dim: int) -> None:
    g = torch.Generator().manual_seed(head_dim)
    page, kv, heads = 16, 2, 6
    lens = torch.tensor([1, 7, 8, 9, 33, 200])
    width = -(-int(lens.max()) // page)
    pool_k = torch.randn(100, page, kv, head_dim, generator=g)
    pool_v = torch.randn(100, page, kv, head_dim, generator=g)
    table = (torch.randperm(99, generator=g)[: len(lens) * width] + 1).view(len(lens), width)
    q = torch.randn(len(lens), heads, head_dim, generator=g)
    got = K.decode_attention(q, pool_k, pool_v, table, lens)
    keys = pool_k[table].flatten(1, 2).transpose(1, 2)  # [B, kv, width*page, hd]
    values = pool_v[table].flatten(1, 2).transpose(1, 2)
    mask = (torch.arange(width * page) < lens.unsqueeze(1))[:, None, None]
    want = F.scaled_dot_product_attention(q.unsqueeze(2), keys, values, attn_mask=mask, enable_gqa=True).squeeze(2)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_decode_attention_is_stable_for_large_scores(K) -> None:
    """Scores far apart (one key dominating) must give that key's value, not NaN or inf."""
    pool_k = torch.zeros(2, 16, 1, 8)
    pool_v = torch.arange(2 * 16 * 8, dtype=torch.float32).view(2, 16, 1, 8)
    pool_k[1, 3] = 100.0
    q = torch.full((1, 1, 8), 10.0)
    got = K.decode_attention(q, pool_k, pool_v, torch.tensor([[1]]), torch.tensor([16]))
    torch.testing.assert_close(got[0, 0], pool_v[1, 3, 0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_attention_of_a_lone_sequence_is_that_of_its_row_in_a_batch(K, dtype: torch.dtype) -> None:
    """One sequence of a one-KV-head model (Gemma 3 270M's 4 heads of 256) has its query heads shared out over the
    threads; in a batch each thread takes whole sequences. Either way a head's numbers are the same, to the bit."""
    if torch.get_num_threads() < 2:
        pytest.skip("one thread: nothing is shared out")
    g = torch.Generator().manual_seed(7)
    page, heads, head_dim = 16, 4, 256
    lens = torch.tensor([300, 41], dtype=torch.int32)
    pool_k = torch.randn(40, page, 1, head_dim, generator=g).to(dtype)
    pool_v = torch.randn(40, page, 1, head_dim, generator=g).to(dtype)
    table = (torch.randperm(39, generator=g) + 1)[:38].view(2, 19).to(torch.int32)
    q = torch.randn(2, heads, head_dim, generator=g)
    batch = K.decode_attention(q, pool_k, pool_v, table, lens)
    for b in range(2):
        alone = K.decode_attention(q[b : b + 1], pool_k, pool_v, table[b : b + 1], lens[b : b + 1])
        assert torch.equal(alone[0], batch[b])


@pytest.mark.parametrize("head_dim", [16, 20, 64, 128])
@pytest.mark.parametrize("windowed", [False, True])
def test_decode_attention_reads_bf16_pages_as_the_reference_does(K, head_dim: int, windowed: bool) -> None:
    """--kv-cache-dtype bf16: the kernel reads bf16 pages in place, ragged lengths (either side of the 8-position
    blocks and the 32-position value blocks), GQA, scattered pages, sliding-window starts, against the torch
    reference (engine/core/ops.py) on the same bf16 pages and against float32 attention over their widened values."""
    from engine.core.ops import TorchOps

    g = torch.Generator().manual_seed(head_dim + windowed)
    page, kv, heads = 16, 2, 6
    lens = torch.tensor([1, 7, 8, 9, 31, 33, 200, 1025], dtype=torch.int32)
    width = -(-int(lens.max()) // page)
    pool_k = torch.randn(len(lens) * width + 1, page, kv, head_dim, generator=g).to(torch.bfloat16)
    pool_v = torch.randn(len(lens) * width + 1, page, kv, head_dim, generator=g).to(torch.bfloat16)
    table = (torch.randperm(len(lens) * width, generator=g) + 1).view(len(lens), width).to(torch.int32)
    starts = (torch.rand(len(lens), generator=g) * lens.float()).to(torch.int32) if windowed else None
    q = torch.randn(len(lens), heads, head_dim, generator=g)
    got = K.decode_attention(q, pool_k, pool_v, table, lens, starts)
    assert got.dtype == torch.float32
    ref = TorchOps()
    torch.testing.assert_close(got, ref.decode_attention(q, pool_k, pool_v, table, lens, starts), atol=2e-5, rtol=1e-4)
    wide = K.decode_attention(q, pool_k.float(), pool_v.float(), table, lens, starts)  # the float32 kernel
    torch.testing.assert_close(got, wide, atol=1e-6, rtol=1e-5)  # the same sums: widening is exact


@pytest.mark.parametrize("rows", [1, 3, 17])
@pytest.mark.parametrize("qk_norm", [False, True])
def test_rope_store_rounds_into_bf16_pages_as_torch_rounds(K, rows: int, qk_norm: bool) -> None:
    from engine.core.ops import TorchOps

    g = torch.Generator().manual_seed(rows)
    heads, kv, d = 6, 2, 64
    qkv = torch.randn(rows, (heads + 2 * kv) * d, generator=g) * 3
    angles = torch.rand(rows, d // 2, generator=g) * 6
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    slots = torch.randperm(64, generator=g)[:rows]
    norm = (torch.rand(d, generator=g) + 0.5, torch.rand(d, generator=g) + 0.5, 1e-6) if qk_norm else None
    k1, v1, k2, v2 = (torch.zeros(64, kv, d, dtype=torch.bfloat16) for _ in range(4))
    q1 = K.rope_store(qkv, cos, sin, slots, k1, v1, heads, norm)
    q2 = TorchOps().rope_store(qkv, cos, sin, slots, k2, v2, heads, norm)
    torch.testing.assert_close(q1, q2)
    assert torch.equal(v1, v2)  # v is copied: rounded exactly as torch rounds
    # k is rotated in float32 first, where the two may differ in the last float32 bits (an FMA, a cancellation
    # near zero), so a value on a bf16 rounding boundary may land one bf16 step apart
    torch.testing.assert_close(k1.float(), k2.float(), atol=1e-5, rtol=2**-8)
    assert (k1 != k2).float().mean() < 0.01


def test_kernels_refuse_kv_pages_of_another_dtype(K) -> None:
    pool = torch.zeros(2, 16, 1, 8, dtype=torch.float16)
    with pytest.raises(TypeError, match="float32 or bfloat16"):
        K.decode_attention(torch.zeros(1, 1, 8), pool, pool, torch.tensor([[1]]), torch.tensor([4]))
