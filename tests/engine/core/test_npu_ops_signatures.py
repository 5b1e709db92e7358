"""The NPU table (engine/core/npu_ops.py) against the documented torch_npu signatures, on a FAKE torch_npu.

No NPU here: tests/fake_torch_npu/fake_fused_npu.py implements each op in plain torch with the documented parameter
names, order and defaults, and asserts the documented dtypes and layouts. These tests check that the table calls
npu_add_rms_norm / _npu_reshape_and_cache / _npu_paged_attention / npu_fused_infer_attention_score (TND) /
npu_weight_quant_batchmatmul / npu_quant_matmul as documented (arguments bound by name), that the guards raise a
clear Python error before any call, that the results equal the torch reference (the CPU path), and that the device's
page size (128 on an NPU) flows into the runner's pool and page tables. Whether the real kernels accept the calls
can only be checked on an NPU (bench/device_check.py --device npu).
"""

from __future__ import annotations

import inspect

import pytest
import torch

from engine import device as devices
from engine.core import npu_ops, ops
from engine.core.kv import PAGE, PagePool
from engine.core.model_runner import DecoderRunner
from engine.core.prefix_cache import PrefixCache
from tests.engine.core.test_model_runner import check_runner, tiny
from tests.fake_torch_npu.fake_fused_npu import FakeTorchNpu, TensorInfo

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)

H, KV, D = 4, 2, 16
BF16 = torch.bfloat16

# The documented parameter lists (Ascend Extension for PyTorch API pages; vLLM-Ascend calls them by these names).
DOCUMENTED = {
    "npu_add_rms_norm": ["x1", "x2", "gamma", "epsilon"],
    "npu_rms_norm": ["self", "gamma", "epsilon"],
    "_npu_reshape_and_cache": ["key", "value", "key_cache", "value_cache", "slot_indices"],
    "_npu_paged_attention": [
        "query",
        "key_cache",
        "value_cache",
        "num_kv_heads",
        "num_heads",
        "scale_value",
        "block_table",
        "context_lens",
        "out",
    ],
    "npu_weight_quant_batchmatmul": [
        "x",
        "weight",
        "antiquant_scale",
        "antiquant_offset",
        "quant_scale",
        "quant_offset",
        "bias",
        "antiquant_group_size",
        "inner_precise",
    ],
    "npu_quant_matmul": ["x1", "x2", "scale", "offset", "pertoken_scale", "bias", "output_dtype"],
}
FIA_KEYWORDS = {
    "atten_mask",
    "actual_seq_lengths",
    "actual_seq_lengths_kv",
    "block_table",
    "num_heads",
    "scale",
    "input_layout",
    "num_key_value_heads",
    "sparse_mode",
    "block_size",
}


def table(page: int = PAGE, **fake_kw) -> tuple[npu_ops.NpuOps, FakeTorchNpu]:
    fake = FakeTorchNpu(**fake_kw)
    return npu_ops.NpuOps(fake, page), fake


def pools(pages: int, page: int, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(pages, page, KV, D, generator=g).to(dtype),
        torch.randn(pages, page, KV, D, generator=g).to(dtype),
    )


def test_the_table_names_the_documented_functions_and_the_fake_has_their_signatures() -> None:
    named = {n for names in npu_ops.CANDIDATES.values() for n in names} | {npu_ops.KV_WRITE}
    assert set(DOCUMENTED) - {"npu_rms_norm"} <= named  # npu_rms_norm: the fallback of add_rmsnorm, also named
    assert "npu_rms_norm" in npu_ops.CANDIDATES["add_rmsnorm"]
    fake = FakeTorchNpu()
    for name, params in DOCUMENTED.items():
        assert list(inspect.signature(getattr(fake, name)).parameters) == params, name
    fia = inspect.signature(fake.npu_fused_infer_attention_score).parameters
    assert list(fia)[:3] == ["query", "key", "value"] and set(fia) >= FIA_KEYWORDS
    assert all(fia[k].kind is inspect.Parameter.KEYWORD_ONLY for k in FIA_KEYWORDS)


def test_norm_with_residual_is_one_npu_add_rms_norm_call() -> None:
    t, fake = table()
    g = torch.Generator().manual_seed(1)
    x, delta, w = torch.randn(3, 96, generator=g), torch.randn(3, 96, generator=g), torch.rand(96, generator=g)
    before = x.clone()
    normed, residual = t.norm_residual(x, delta, w, 1e-6)
    (call,) = fake.calls
    assert call.name == "npu_add_rms_norm"
    assert call.bound == {
        "x1": TensorInfo((3, 96), torch.float32, True),
        "x2": TensorInfo((3, 96), torch.float32, True),
        "gamma": TensorInfo((96,), torch.float32, True),
        "epsilon": 1e-6,
    }
    assert torch.equal(x, before)  # the sum is the op's third output, not written into x
    ref_x = before.clone()
    torch.testing.assert_close(normed, ops.TorchOps().add_rmsnorm(ref_x, delta, w, 1e-6))
    torch.testing.assert_close(residual, ref_x)
    # add_rmsnorm keeps its in-place contract on the fused op
    fake.calls.clear()
    y = t.add_rmsnorm(x, delta, w, 1e-6)
    assert [c.name for c in fake.calls] == ["npu_add_rms_norm"]
    torch.testing.assert_close(x, ref_x)
    torch.testing.assert_close(y, normed)


@pytest.mark.parametrize("private_in_c", [False, True])
def test_the_kv_write_is_reshape_and_cache_with_int32_slots(private_in_c: bool) -> None:
    page = 32
    t, fake = table(page, private_in_c=private_in_c)
    assert t.chosen["rope_store"] == "torch_npu.npu_rotary_mul + torch_npu._npu_reshape_and_cache"
    g = torch.Generator().manual_seed(2)
    n = 5
    qkv = torch.randn(n, (H + 2 * KV) * D, generator=g)
    angles = torch.rand(n, D // 2, generator=g) * 6
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    slots = torch.tensor([70, 3, 127, 32, 64])  # int64, as the runner builds them
    k1, v1, k2, v2 = (torch.zeros(4 * page, KV, D) for _ in range(4))
    q1 = t.rope_store(qkv, cos, sin, slots, k1, v1, H)
    q2 = ops.TorchOps().rope_store(qkv, cos, sin, slots, k2, v2, H)
    torch.testing.assert_close(q1, q2)
    torch.testing.assert_close(k1, k2)
    torch.testing.assert_close(v1, v2)
    (call,) = fake.named("_npu_reshape_and_cache")
    assert call.bound == {
        "key": TensorInfo((n, KV, D), torch.float32, True),
        "value": TensorInfo((n, KV, D), torch.float32, True),
        "key_cache": TensorInfo((4, page, KV, D), torch.float32, True),
        "value_cache": TensorInfo((4, page, KV, D), torch.float32, True),
        "slot_indices": TensorInfo((n,), torch.int32, True),
    }


def decode_inputs(b: int, page: int, dtype=BF16):
    g = torch.Generator().manual_seed(3)
    k_pool, v_pool = pools(10, page, dtype)
    lens = torch.randint(1, 3 * page, (b,), generator=g, dtype=torch.int32)
    width = int(-(-lens.max() // page))
    pages = torch.stack([torch.randperm(9, generator=g)[:width] + 1 for _ in range(b)]).to(torch.int32)
    q = torch.randn(b, H, D, generator=g).to(dtype)
    return q, k_pool, v_pool, pages, lens


def test_decode_is_paged_attention_with_host_int32_context_lens() -> None:
    page = 128
    t, fake = table(page, half_only=True)
    q, k_pool, v_pool, pages, lens = decode_inputs(3, page)
    out = t.decode_attention(q, k_pool, v_pool, pages, lens)
    (call,) = fake.calls
    assert call.name == "_npu_paged_attention" and not call.args  # all by keyword, as vLLM-Ascend calls it
    bound = call.bound
    assert bound["query"] == TensorInfo((3, H, D), BF16, True)
    assert bound["key_cache"] == bound["value_cache"] == TensorInfo((10, page, KV, D), BF16, True)
    assert (bound["num_kv_heads"], bound["num_heads"], bound["scale_value"]) == (KV, H, D**-0.5)
    assert bound["block_table"] == TensorInfo(tuple(pages.shape), torch.int32, True)
    assert bound["context_lens"] == TensorInfo((3,), torch.int32, True, "cpu")
    assert bound["out"] == TensorInfo((3, H, D), BF16, True)
    ref = ops.TorchOps().decode_attention(q.float(), k_pool.float(), v_pool.float(), pages, lens)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)


def test_prefill_is_one_fused_infer_attention_call_in_tnd() -> None:
    page = 16
    t, fake = table(page, half_only=True)
    assert t.paged_prefill and not ops.TorchOps().paged_prefill
    k_pool, v_pool = pools(12, page, BF16)
    q_lens, kv_lens = [6, 4, 1], [6, 37, 20]  # a whole prompt, a later chunk (chunked prefill), a one-row chunk
    table_ = torch.tensor([[3, 0, 0], [5, 7, 9], [2, 11, 0]], dtype=torch.int32)
    q = torch.randn(sum(q_lens), H, D).to(BF16)
    out = t.prefill_attention(q, k_pool, v_pool, table_, q_lens, kv_lens)
    (call,) = fake.calls
    assert call.name == "npu_fused_infer_attention_score"
    assert call.args == [
        TensorInfo((11, H, D), BF16, True),
        TensorInfo((12, page, KV * D), BF16, True),
        TensorInfo((12, page, KV * D), BF16, True),
    ]
    assert call.kwargs == {
        "atten_mask": TensorInfo((2048, 2048), torch.int8, True),
        "block_table": TensorInfo((3, 3), torch.int32, True),
        "input_layout": "TND",
        "block_size": page,
        "actual_seq_lengths": [6, 10, 11],
        "actual_seq_lengths_kv": kv_lens,
        "num_key_value_heads": KV,
        "num_heads": H,
        "scale": D**-0.5,
        "sparse_mode": 3,
    }
    ref = ops.TorchOps().prefill_attention(q.float(), k_pool.float(), v_pool.float(), table_, q_lens, kv_lens)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)


def guard_cases():
    q, k_pool, v_pool, pages, lens = decode_inputs(2, 16)
    k8, v8 = pools(10, 8, BF16)
    k256, v256 = (torch.zeros(4, 256, KV, 128, dtype=BF16) for _ in range(2))
    x = torch.randn(2, 32)
    return [
        ("decode_attention", (q, k_pool.float(), v_pool.float(), pages, lens), "must have the query's dtype"),
        ("decode_attention", (q, k8, v8, pages, lens), "block_size 8 is not a multiple of 16"),
        ("decode_attention", (torch.zeros(2, H, 128, dtype=BF16), k256, v256, pages, lens), "exceeds 128 x 128"),
        ("decode_attention", (q, k_pool, v_pool, pages[:1], lens), "do not match 2 queries"),
        ("prefill_attention", (q, k_pool, v_pool, pages, [1, 2], [5, 5]), "query rows"),
        ("prefill_attention", (q, k_pool, v_pool, pages, [1, 1], [5, 500]), "exceeds the"),
        ("norm_residual", (x, x.bfloat16(), torch.ones(32), 1e-6), "must share one of"),
        ("quant_matmul", (x, torch.zeros(32, 8, dtype=torch.int8), torch.ones(8)), "must be int8"),
        (
            "weight_quant_matmul",
            (x.bfloat16(), torch.zeros(32, 8, dtype=torch.int8), torch.ones(8)),
            "antiquant_scale must be torch.bfloat16",
        ),
    ]


@pytest.mark.parametrize("case", range(len(guard_cases())))
def test_bad_arguments_raise_a_clear_error_before_any_call(case: int) -> None:
    op, args, message = guard_cases()[case]
    t, fake = table()
    with pytest.raises(npu_ops.NpuCallError, match=message):
        getattr(t, op)(*args)
    assert fake.calls == []  # nothing reached the (asynchronous) device op


@pytest.mark.parametrize("group", [0, 32])
def test_weight_quant_matmul_w8a16_and_w4a16(group: int) -> None:
    t, fake = table(half_only=True)
    g = torch.Generator().manual_seed(4)
    k, n = 64, 16
    x = torch.randn(3, k, generator=g).to(BF16)
    shape = (k // group, n) if group else (n,)
    scale = (torch.rand(shape, generator=g) * 0.1).to(BF16)
    offset = torch.randint(-2, 3, shape, generator=g).to(BF16)
    if group:  # W4A16: int4 packed eight to an int32
        w = torch.randint(-8, 8, (k, n), generator=g, dtype=torch.int8)
        weight = ops.pack_int4(w)
        assert weight.dtype == torch.int32 and weight.shape == (k, n // 8)
    else:  # W8A16
        weight = torch.randint(-128, 128, (k, n), generator=g, dtype=torch.int8)
    out = t.weight_quant_matmul(x, weight, scale, offset, group)
    (call,) = fake.calls
    assert call.name == "npu_weight_quant_batchmatmul"
    assert call.bound["x"] == TensorInfo((3, k), BF16, True) and call.bound["weight"].dtype == weight.dtype
    assert call.bound["antiquant_scale"] == TensorInfo(shape, BF16, True)
    assert call.bound["antiquant_offset"] == TensorInfo(shape, BF16, True)
    assert call.bound["antiquant_group_size"] == group
    ref = ops.TorchOps().weight_quant_matmul(x.float(), weight, scale.float(), offset.float(), group)
    torch.testing.assert_close(out.float(), ref, atol=0.05, rtol=0.02)


def test_quant_matmul_w8a8() -> None:
    t, fake = table()
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-128, 128, (3, 64), generator=g, dtype=torch.int8)
    w = torch.randint(-128, 128, (64, 16), generator=g, dtype=torch.int8)
    scale, per_token = torch.rand(16, generator=g) * 1e-3, torch.rand(3, generator=g)
    out = t.quant_matmul(x, w, scale, per_token, out_dtype=BF16)
    (call,) = fake.calls
    assert call.name == "npu_quant_matmul"
    assert call.bound["x1"] == TensorInfo((3, 64), torch.int8, True) and call.bound["x2"].dtype == torch.int8
    assert call.bound["scale"] == TensorInfo((16,), torch.float32, True)
    assert call.bound["pertoken_scale"] == TensorInfo((3,), torch.float32, True)
    assert call.bound["output_dtype"] == BF16 and out.dtype == BF16
    torch.testing.assert_close(out, ops.TorchOps().quant_matmul(x, w, scale, per_token, out_dtype=BF16))


def test_page_size_is_a_property_of_the_device() -> None:
    assert devices.page_size("npu:0") == devices.page_size("npu:0", 64) == 128
    assert devices.page_size("npu:0", 256) == 64  # block_size x head_size <= 128 x 128
    assert devices.page_size("cpu") == devices.page_size("cuda:0") == devices.page_size("mps") == PAGE == 16
    pool = PagePool(2, 300, KV, D, torch.float32, "cpu", page=128)
    assert pool.k.shape == (2, 1 + 3, 128, KV, D) and pool.page == 128
    assert PrefixCache(1024, 128).capacity_blocks == 8 and PrefixCache(1024).block == PAGE


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_a_runner_with_the_npu_page_and_table_matches_hf(arch: str) -> None:
    """The NPU's 128-token pages through the runner's pool, slots and page tables, on the fused table: prompts in
    one TND call per layer, decode through _npu_paged_attention, the KV through _npu_reshape_and_cache."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    if arch == "qwen3":
        model = tiny(Qwen3Config, Qwen3ForCausalLM, head_dim=16)
    else:
        model = tiny(LlamaConfig, LlamaForCausalLM)
    runner = DecoderRunner(model, "cpu", kv_tokens=1024, use_kernels=False)
    assert runner.page == PAGE and runner.pool.page == PAGE  # the CPU keeps its page
    runner.page = devices.page_size("npu:0")
    runner._own_pool(1024)
    fake = FakeTorchNpu()
    runner.ops = npu_ops.NpuOps(fake, runner.page)
    runner.ops.attention_dtypes = (torch.float32, *npu_ops.HALF)  # the fake computes float32 too
    check_runner(runner, model)
    names = {c.name for c in fake.calls}
    assert {"npu_add_rms_norm", "_npu_reshape_and_cache", "_npu_paged_attention"} <= names
    assert "npu_prompt_flash_attention" not in names
    writes = fake.named("_npu_reshape_and_cache")
    assert all(c.bound["key_cache"].shape[1] == 128 for c in writes)
    decodes = fake.named("_npu_paged_attention")
    assert all(c.bound["key_cache"].shape[1] == 128 for c in decodes)
    tnd = fake.named("npu_fused_infer_attention_score")
    assert tnd and all(c.kwargs["block_size"] == 128 and c.kwargs["input_layout"] == "TND" for c in tnd)
