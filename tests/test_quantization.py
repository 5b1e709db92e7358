"""Quantized weights (engine/core/quant.py): the packed kernels against the dequantized reference on ragged shapes,
each GGUF block type decoded against the `gguf` package's own dequantization, and the bundled model served at int4,
int8 and its own Q4_1 blocks through the real engine."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from engine.core import cpu_kernels, quant


@pytest.fixture(scope="module", params=list(cpu_kernels.ISAS))
def K(request: pytest.FixtureRequest) -> cpu_kernels.CpuKernels:
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("no g++ on the path")
    try:
        return cpu_kernels.load(request.param)
    except RuntimeError as exc:
        pytest.skip(str(exc))


# K not a multiple of the group (nor of 32), odd N, row counts either side of the tiles (TR/TC) and of the 64-row
# blocks; a bias.
@pytest.mark.parametrize("rows", [1, 3, 7, 16, 65])
@pytest.mark.parametrize(("n", "k"), [(1, 32), (7, 40), (33, 200), (17, 576)])
@pytest.mark.parametrize(("bits", "group"), [(4, 32), (4, 64), (4, 128), (8, 0)])
def test_tile_kernel_matches_the_dequantized_matrix(K, rows: int, n: int, k: int, bits: int, group: int) -> None:
    g = torch.Generator().manual_seed(rows * 7919 + n * 31 + k + bits)
    w = torch.randn(n, k, generator=g)
    qw = quant.quantize(w, bits, group or quant.QB)
    assert qw.k == k and qw.kp % (group or quant.QB) == 0
    bias = torch.randn(n, generator=g)
    x = torch.randn(rows, k, generator=g)
    p = quant.QuantProjection(qw, bias, K)
    torch.testing.assert_close(p.tile(x), F.linear(x, qw.dequantize(), bias), atol=2e-4, rtol=1e-4)
    # and quantization itself is close to the matrix: half a step of its group
    step = (qw.scale if bits == 4 else qw.scale.expand(-1, 1)).repeat_interleave(qw.group, 1)[:, :k]
    assert ((qw.dequantize() - w).abs() <= step / 2 + 1e-5).all()


@pytest.mark.parametrize(("n", "k", "bits", "group"), [(16, 64, 4, 32), (48, 200, 4, 64), (33, 576, 4, 128),
                                                        (17, 40, 8, 0), (32, 576, 8, 0)])  # fmt: skip
def test_torch_packed_kernels_match_the_dequantized_matrix(n: int, k: int, bits: int, group: int) -> None:
    g = torch.Generator().manual_seed(n + k)
    qw = quant.quantize(torch.randn(n, k, generator=g), bits, group or quant.QB)
    p = quant.QuantProjection(qw, None, None)
    if not p.pack_for_torch():
        pytest.skip("this torch has no packed CPU kernel for the layout")
    x = torch.randn(5, k, generator=g)
    ref = F.linear(x.bfloat16().float(), qw.dequantize())  # the op rounds activations and scales to bf16
    torch.testing.assert_close(p.torch_matmul(x), ref, atol=0.05 * ref.abs().max().item(), rtol=0.02)


def _gguf_tensor(type_name: str, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random weights quantized by the gguf package itself: (raw blocks [n, bytes], its dequantization)."""
    from gguf import GGMLQuantizationType, quants

    qtype = GGMLQuantizationType[type_name]
    w = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32)
    if type_name == "Q4_K":  # gguf has no Q4_K quantizer: random blocks with sane scales
        rng = np.random.default_rng(seed)
        blocks = rng.integers(0, 256, (n, k // 256, 144), dtype=np.uint8)
        blocks[..., 0:4] = np.frombuffer(np.float16([0.01, 0.02]).tobytes(), np.uint8)
        raw = blocks.reshape(n, -1)
    else:
        raw = quants.quantize(w, qtype)
    return raw, quants.dequantize(raw, qtype)


@pytest.mark.parametrize(("type_name", "k"), [("Q4_0", 64), ("Q4_1", 96), ("Q8_0", 160), ("Q4_K", 512)])
def test_gguf_blocks_decode_as_gguf_dequantizes_them(type_name: str, k: int) -> None:
    raw, expected = _gguf_tensor(type_name, 7, k, seed=k)
    qw = quant.from_gguf(type_name, raw, k)
    assert qw is not None and qw.source == type_name and qw.bits == (8 if type_name == "Q8_0" else 4)
    np.testing.assert_allclose(qw.dequantize().numpy(), expected, rtol=1e-6, atol=1e-6)


def test_gguf_types_without_a_kernel_fall_back() -> None:
    raw, _ = _gguf_tensor("Q5_0", 3, 64, seed=1)
    assert quant.from_gguf("Q5_0", raw, 64) is None
