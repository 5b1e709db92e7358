"""The C++ kernels of the lean runner (engine/core/cpu_kernels.cpp) against torch's own ops, on awkward shapes:
batch sizes either side of each tiling boundary, widths that are not a multiple of 8, ragged sequence lengths and
pages scattered through the pool."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.core.cpu_kernels import kernels

K = kernels()
pytestmark = pytest.mark.skipif(K is None, reason="needs x86-64 with AVX2/FMA and g++")


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 16, 17, 33, 64, 129])
@pytest.mark.parametrize(("n", "k"), [(1, 8), (7, 64), (50, 576), (9, 13)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_bf16_matches_float32_linear(rows: int, n: int, k: int, with_bias: bool) -> None:
    g = torch.Generator().manual_seed(rows * 1000 + n * 10 + k)
    w = torch.randn(n, k, generator=g).to(torch.bfloat16)
    x = torch.randn(rows, k, generator=g)
    bias = torch.randn(n, generator=g) if with_bias else None
    got = K.linear_bf16(x, w, bias)
    torch.testing.assert_close(got, F.linear(x, w.float(), bias), atol=1e-4, rtol=1e-5)


def test_linear_bf16_reads_a_strided_input_as_its_values() -> None:
    w = torch.randn(12, 16).to(torch.bfloat16)
    x = torch.randn(16, 5).t()  # not contiguous
    torch.testing.assert_close(K.linear_bf16(x, w), F.linear(x, w.float()), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("head_dim", [16, 20, 64, 128])
def test_decode_attention_matches_sdpa_on_scattered_pages(head_dim: int) -> None:
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


def test_decode_attention_is_stable_for_large_scores() -> None:
    """Scores far apart (one key dominating) must give that key's value, not NaN or inf."""
    pool_k = torch.zeros(2, 16, 1, 8)
    pool_v = torch.arange(2 * 16 * 8, dtype=torch.float32).view(2, 16, 1, 8)
    pool_k[1, 3] = 100.0
    q = torch.full((1, 1, 8), 10.0)
    got = K.decode_attention(q, pool_k, pool_v, torch.tensor([[1]]), torch.tensor([16]))
    torch.testing.assert_close(got[0, 0], pool_v[1, 3, 0])
