"""The NPU's table (engine/core/npu_ops.py) against a FAKE torch_npu: no Ascend hardware or code runs here.

tests/fake_torch_npu/fake_fused_npu.py is the fake: plain torch on the CPU with the documented semantics and keyword
names of torch_npu's fused functions, recording each call. These tests check which function each operation
chose, the fallbacks (by name and by version) with their log lines, the shapes / dtypes / keywords passed, that
every result equals the torch reference's, and that a DecoderRunner on the table gives HF's logits. Whether the
real kernels accept these calls, and their bf16 numerics, can only be checked on an NPU (not done here).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import torch

from engine import device as devices
from engine.core import npu_ops, ops
from engine.core.kv import PAGE
from engine.core.model_runner import DecoderRunner
from tests.engine.core.test_model_runner import check_runner, tiny
from tests.fake_torch_npu.fake_fused_npu import FakeTorchNpu, TensorInfo
from tests.paths import FAKE_NPU, ROOT

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)

H, KV, D = 4, 2, 16
ALL_FUSED = {
    "add_rmsnorm": "torch_npu.npu_add_rms_norm",
    "rope_store": "torch_npu.npu_rotary_mul + torch_npu._npu_reshape_and_cache",
    "silu_mul": "torch_npu.npu_swiglu",
    "decode_attention": "torch_npu._npu_paged_attention",
    "prompt_attention": "torch_npu.npu_prompt_flash_attention",
    "prefill_attention": "torch_npu.npu_fused_infer_attention_score",
    "weight_quant_matmul": "torch_npu.npu_weight_quant_batchmatmul",
    "quant_matmul": "torch_npu.npu_quant_matmul",
    "gelu_tanh_mul": "torch",  # no fused function: the reference
}


def fake_table(version: str = "2.5.1", missing: tuple[str, ...] = ()) -> tuple[npu_ops.NpuOps, FakeTorchNpu]:
    """A table over the FAKE torch_npu, its attention ops let through float32 (the fake computes any dtype; the
    real ones take fp16 / bf16 only)."""
    fake = FakeTorchNpu(version, missing)
    table = npu_ops.NpuOps(fake, PAGE)
    table.attention_dtypes = (torch.float32, torch.float16, torch.bfloat16)
    return table, fake


def fallback_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "engine.core.npu_ops"]


def test_every_operation_takes_its_fused_function_when_torch_npu_has_it(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="engine.core.npu_ops"):
        table, _ = fake_table()
    assert table.chosen == ALL_FUSED
    assert fallback_lines(caplog) == []


@pytest.mark.parametrize(
    ("missing", "op", "expect"),
    [
        (("_npu_paged_attention",), "decode_attention", "torch_npu.npu_fused_infer_attention_score"),
        (("npu_prompt_flash_attention",), "prompt_attention", "torch_npu.npu_fused_infer_attention_score"),
    ],
)
def test_an_attention_op_takes_the_next_fused_function(missing: tuple[str, ...], op: str, expect: str) -> None:
    table, _ = fake_table(missing=missing)
    assert table.chosen == {**ALL_FUSED, op: expect}


@pytest.mark.parametrize(
    ("missing", "op", "line"),
    [
        (("npu_swiglu",), "silu_mul", "npu op silu_mul: torch reference (torch_npu 2.5.1 has no npu_swiglu)"),
        (
            ("npu_add_rms_norm", "npu_rms_norm"),
            "add_rmsnorm",
            "npu op add_rmsnorm: torch reference (torch_npu 2.5.1 has no npu_add_rms_norm or npu_rms_norm)",
        ),
        (
            ("npu_rotary_mul",),
            "rope_store",
            "npu op rope_store: torch reference (torch_npu 2.5.1 has no npu_rotary_mul)",
        ),
        (
            ("npu_quant_matmul",),
            "quant_matmul",
            "npu op quant_matmul: torch reference (torch_npu 2.5.1 has no npu_quant_matmul)",
        ),
    ],
)
def test_a_missing_function_falls_back_to_the_reference_with_one_log_line(
    caplog: pytest.LogCaptureFixture, missing: tuple[str, ...], op: str, line: str
) -> None:
    with caplog.at_level(logging.INFO, logger="engine.core.npu_ops"):
        table, fake = fake_table(missing=missing)
    assert fallback_lines(caplog) == [line]
    assert table.chosen[op] == "torch" and all(table.chosen[o] == v for o, v in ALL_FUSED.items() if o != op)
    check_op_by_op(table, fake)  # the fallen-back op still matches the reference


@pytest.mark.parametrize("version", ["1.11.0.post8", "2.0.1", "unknown"])
def test_a_torch_npu_older_than_2_1_uses_the_reference_for_every_operation(
    caplog: pytest.LogCaptureFixture, version: str
) -> None:
    with caplog.at_level(logging.INFO, logger="engine.core.npu_ops"):
        table, fake = fake_table(version)
    assert set(table.chosen.values()) == {"torch"}
    lines = fallback_lines(caplog)
    assert len(lines) == len(npu_ops.CANDIDATES) and all(
        f"(torch_npu {version} is older than 2.1.0, which" in m for m in lines
    )
    check_op_by_op(table, fake)
    assert fake.calls == []


@pytest.mark.parametrize("version", ["2.1.0", "2.1.0.post3", "2.3.1rc2", "2.6.0+git1234"])
def test_versions_from_2_1_on_use_the_fused_functions(version: str) -> None:
    assert fake_table(version)[0].chosen == ALL_FUSED


def test_parse_version() -> None:
    assert npu_ops.parse_version("2.1.0.post3") == (2, 1, 0)
    assert npu_ops.parse_version("2.5") == (2, 5, 0)
    assert npu_ops.parse_version("dev") is None


def inputs(rows: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x, delta, w = torch.randn(rows, 96, generator=g), torch.randn(rows, 96, generator=g), torch.rand(96, generator=g)
    gate_up = torch.randn(rows, 2 * 40, generator=g)
    qkv = torch.randn(rows, (H + 2 * KV) * D, generator=g)
    angles = torch.rand(rows, D // 2, generator=g) * 6
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    slots = torch.randperm(64, generator=g)[:rows]
    norm = (torch.rand(D, generator=g) + 0.5, torch.rand(D, generator=g) + 0.5, 1e-6)
    k_pool, v_pool = torch.randn(12, PAGE, KV, D, generator=g), torch.randn(12, PAGE, KV, D, generator=g)
    lens = torch.randint(1, 3 * PAGE, (rows,), generator=g, dtype=torch.int32)
    width = int(-(-lens.max() // PAGE))
    table = torch.stack([torch.randperm(12, generator=g)[:width] for _ in range(rows)]).to(torch.int32)
    q = torch.randn(rows, H, D, generator=g)
    return x, delta, w, gate_up, qkv, cos, sin, slots, norm, k_pool, v_pool, table, lens, q


def check_op_by_op(table: ops.TorchOps, fake: FakeTorchNpu, rows: int = 5) -> None:
    """Every operation of `table` equals the reference's on random float32 inputs."""
    ref = ops.TorchOps()
    x, delta, w, gate_up, qkv, cos, sin, slots, norm, k_pool, v_pool, pages, lens, q = inputs(rows)
    a, b = x.clone(), x.clone()
    torch.testing.assert_close(table.add_rmsnorm(a, delta, w, 1e-6), ref.add_rmsnorm(b, delta, w, 1e-6))
    torch.testing.assert_close(a, b)  # the residual, added in place by both
    torch.testing.assert_close(table.add_rmsnorm(x, None, w, 1e-5), ref.add_rmsnorm(x, None, w, 1e-5))
    torch.testing.assert_close(table.silu_mul(gate_up), ref.silu_mul(gate_up))
    for qk_norm in (None, norm):
        k1, v1, k2, v2 = (torch.zeros(64, KV, D) for _ in range(4))
        torch.testing.assert_close(
            table.rope_store(qkv, cos, sin, slots, k1, v1, H, qk_norm),
            ref.rope_store(qkv, cos, sin, slots, k2, v2, H, qk_norm),
        )
        torch.testing.assert_close(k1, k2)
        torch.testing.assert_close(v1, v2)
    torch.testing.assert_close(
        table.decode_attention(q, k_pool, v_pool, pages, lens),
        ref.decode_attention(q, k_pool, v_pool, pages, lens),
        atol=1e-5,
        rtol=1e-4,
    )
    g = torch.Generator().manual_seed(3)
    for start, t in ((0, 6), (5, 4), (9, 1), (0, 1)):
        qp = torch.randn(H, t, D, generator=g)
        kp, vp = torch.randn(KV, start + t, D, generator=g), torch.randn(KV, start + t, D, generator=g)
        torch.testing.assert_close(
            table.prompt_attention(qp, kp, vp, start), ref.prompt_attention(qp, kp, vp, start), atol=1e-5, rtol=1e-4
        )


def attention_functions(missing: tuple[str, ...]) -> set[str]:
    """The (decode, prompt) functions a table over a fake without `missing` calls."""
    decode = "npu_fused_infer_attention_score" if "_npu_paged_attention" in missing else "_npu_paged_attention"
    prompt = (
        "npu_fused_infer_attention_score" if "npu_prompt_flash_attention" in missing else "npu_prompt_flash_attention"
    )
    return {decode, prompt}


PATHS = [(), ("_npu_paged_attention",), ("npu_prompt_flash_attention",)]
ELEMENTWISE = {"npu_add_rms_norm", "npu_rms_norm", "npu_rotary_mul", "_npu_reshape_and_cache", "npu_swiglu"}


@pytest.mark.parametrize("missing", PATHS)
def test_the_fused_table_matches_the_reference_op_by_op(missing: tuple[str, ...]) -> None:
    table, fake = fake_table(missing=missing)
    check_op_by_op(table, fake)
    assert {c.name for c in fake.calls} == {*ELEMENTWISE, *attention_functions(missing)}


def test_the_arguments_passed_are_the_documented_layouts() -> None:
    table, fake = fake_table()
    rows = 3
    x, delta, w, gate_up, qkv, cos, sin, slots, norm, k_pool, v_pool, pages, lens, q = inputs(rows)
    f32 = torch.float32

    table.add_rmsnorm(x, None, w, 1e-6)
    (call,) = fake.named("npu_rms_norm")
    assert call.args == [TensorInfo((rows, 96), f32, True), TensorInfo((96,), f32, True)]
    assert call.kwargs == {"epsilon": 1e-6}

    table.silu_mul(gate_up)
    assert fake.named("npu_swiglu")[0].kwargs == {"dim": -1}

    table.rope_store(qkv, cos, sin, slots, torch.zeros(64, KV, D), torch.zeros(64, KV, D), H)
    (call,) = fake.named("npu_rotary_mul")  # q and k in one call: BSND, cos / sin BS1D
    assert call.args == [
        TensorInfo((1, rows, H + KV, D), f32, True),
        TensorInfo((1, rows, 1, D), f32, True),
        TensorInfo((1, rows, 1, D), f32, True),
    ]
    fake.calls.clear()
    table.rope_store(qkv, cos, sin, slots, torch.zeros(64, KV, D), torch.zeros(64, KV, D), H, norm)
    assert [c.name for c in fake.calls] == [
        "npu_rms_norm",
        "npu_rms_norm",
        "npu_rotary_mul",
        "npu_rotary_mul",
        "_npu_reshape_and_cache",
    ]
    assert [c.args[0].shape for c in fake.calls[:4]] == [(rows, H, D), (rows, KV, D), (1, rows, H, D), (1, rows, KV, D)]

    fake.calls.clear()
    qp, kp, vp = torch.randn(H, 4, D), torch.randn(KV, 9, D), torch.randn(KV, 9, D)
    table.prompt_attention(qp, kp, vp, 5)
    (call,) = fake.named("npu_prompt_flash_attention")
    assert call.args == [
        TensorInfo((1, 4, H, D), f32, True),
        TensorInfo((1, 9, KV, D), f32, True),
        TensorInfo((1, 9, KV, D), f32, True),
    ]
    assert call.kwargs == {
        "num_heads": H,
        "num_key_value_heads": KV,
        "input_layout": "BSND",
        "scale_value": D**-0.5,
        "atten_mask": TensorInfo((2048, 2048), torch.bool, True),
        "sparse_mode": 3,
    }
    table.prompt_attention(qp[:, :1], kp[:, :6], vp[:, :6], 5)  # one row: no mask
    assert "atten_mask" not in fake.calls[-1].kwargs and "sparse_mode" not in fake.calls[-1].kwargs

    fia, fia_fake = fake_table(missing=("_npu_paged_attention",))  # decode on FIA in BSH
    fia.decode_attention(q, k_pool, v_pool, pages, lens)
    (call,) = fia_fake.calls
    assert call.args == [
        TensorInfo((rows, 1, H * D), f32, True),
        TensorInfo((12, PAGE, KV * D), f32, True),
        TensorInfo((12, PAGE, KV * D), f32, True),
    ]
    assert call.kwargs == {
        "block_table": TensorInfo(tuple(pages.shape), torch.int32, True),
        "block_size": PAGE,
        "num_heads": H,
        "num_key_value_heads": KV,
        "input_layout": "BSH",
        "actual_seq_lengths_kv": lens.tolist(),
        "scale": D**-0.5,
    }


def test_the_lengths_go_to_the_host_once_per_step() -> None:
    table, fake = fake_table(missing=("_npu_paged_attention",))
    *_, k_pool, v_pool, pages, lens, q = inputs(3)
    for _ in range(3):  # three layers of one step: the same lens tensor
        table.decode_attention(q, k_pool, v_pool, pages, lens)
    held, values = table._lens
    assert held is lens and values == lens.tolist()
    other = lens.clone()
    other[0] = 1
    table.decode_attention(q, k_pool, v_pool, pages, other)  # the next step: a new tensor, new values
    assert fake.calls[-1].kwargs["actual_seq_lengths_kv"] == other.tolist()


def test_float32_attention_runs_the_reference_as_the_real_ops_take_fp16_bf16(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeTorchNpu()
    table = npu_ops.NpuOps(fake, PAGE)  # the real dtype rule
    assert table.attention_dtypes == (torch.float16, torch.bfloat16)
    *_, k_pool, v_pool, pages, lens, q = inputs(2)
    ref = ops.TorchOps()
    with caplog.at_level(logging.INFO, logger="engine.core.npu_ops"):
        for _ in range(2):
            out = table.decode_attention(q, k_pool, v_pool, pages, lens)
    torch.testing.assert_close(out, ref.decode_attention(q, k_pool, v_pool, pages, lens))
    assert fake.calls == []
    assert fallback_lines(caplog) == [
        "npu op decode_attention: torch reference for torch.float32 "
        "(torch_npu._npu_paged_attention takes torch.float16 / "
        "torch.bfloat16)"
    ]
    table.decode_attention(q.bfloat16(), k_pool.bfloat16(), v_pool.bfloat16(), pages, lens)  # bf16: the fused op
    assert [c.name for c in fake.calls] == ["_npu_paged_attention"]


def test_device_ops_on_an_npu_imports_torch_npu_and_logs_the_choice(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeTorchNpu("2.1.0.post3", missing=("npu_swiglu",))
    monkeypatch.setitem(sys.modules, "torch_npu", fake)  # the FAKE stands in for `import torch_npu`
    with caplog.at_level(logging.INFO):
        table = devices.device_ops("npu:0", None)
    assert isinstance(table, npu_ops.NpuOps) and table.npu is fake and table.version == "2.1.0.post3"
    assert table.page == devices.page_size("npu:0") == 128
    assert table.chosen == {**ALL_FUSED, "silu_mul": "torch"}
    assert (
        "device ops on npu:0: add_rmsnorm=torch_npu.npu_add_rms_norm, rope_store=torch_npu.npu_rotary_mul + "
        "torch_npu._npu_reshape_and_cache, silu_mul=torch, " in caplog.text
    )
    assert "npu op silu_mul: torch reference (torch_npu 2.1.0.post3 has no npu_swiglu)" in caplog.text


@pytest.mark.parametrize(("arch", "missing"), [("llama", ()), ("llama", PATHS[1]), ("llama", PATHS[2]), ("qwen3", ())])
def test_a_runner_on_the_fused_table_matches_hf(arch: str, missing: tuple[str, ...]) -> None:
    """The wrappers wired end to end: chunked prompts, ragged decode batches, prompt beside decode, forks."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    if arch == "qwen3":
        model = tiny(Qwen3Config, Qwen3ForCausalLM, head_dim=16)
    else:
        model = tiny(LlamaConfig, LlamaForCausalLM)
    runner = DecoderRunner(model, "cpu", use_kernels=False)
    runner.ops, fake = fake_table(missing=missing)
    check_runner(runner, model)
    names = {c.name for c in fake.calls}
    assert names == {*ELEMENTWISE, "npu_fused_infer_attention_score", *attention_functions(missing)} - {
        "npu_prompt_flash_attention"
    }  # prompt chunks go to prefill_attention (FIA in TND), not the dense op
    tnd = [c for c in fake.named("npu_fused_infer_attention_score") if c.bound["input_layout"] == "TND"]
    assert tnd and all(c.bound["block_size"] == PAGE and c.bound["sparse_mode"] == 3 for c in tnd)


@pytest.mark.skipif(devices.ascend_drivers_present(), reason="this host has Ascend drivers")
def test_npu_without_a_driver_starts_on_the_next_device_and_says_why() -> None:
    """torch_npu installed, no Ascend driver (the import-failing fake beside fake_fused_npu.py): `import torch`
    still works, and `--device npu` as `--device auto` start on the CPU, with one warning naming the reason.
    `--device cuda` where there is none stays an error."""
    code = (
        "import logging; logging.basicConfig(level=logging.WARNING, format='%(message)s')\n"
        "from engine import device; device.prepare_torch_import(); import torch\n"
        "print('NPU', device.placement('npu', 'auto'))\n"
        "print('AUTO', device.placement('auto', 'auto'))\n"
        "try:\n    device.resolve_device('cuda')\nexcept RuntimeError as e:\n    print('ERROR', e)\n"
    )
    fake_dir = FAKE_NPU
    env = {**os.environ, "PYTHONPATH": f"{fake_dir}{os.pathsep}{ROOT}"}
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "NPU Placement(device='cpu', dtype_name='fp32')" in out.stdout
    assert "AUTO Placement(device='cpu', dtype_name='fp32')" in out.stdout
    assert "--device npu: torch_npu is installed but no Ascend driver was found; starting on the next device" in (
        out.stderr
    )
    if not torch.cuda.is_available():
        assert "ERROR --device cuda: CUDA is not available" in out.stdout


@pytest.mark.parametrize("mode", ["int4", "int8"])
def test_a_runner_quantized_on_the_npu_table_multiplies_with_its_weight_quant_matmul(mode: str) -> None:
    """--quantization int4 / int8 on an NPU: the projections kept in the op's layout (int4 eight to an int32 [K, N / 8],
    int8 [K, N], a scale and an offset per 32 rows of K in x's dtype) and multiplied by npu_weight_quant_batchmatmul;
    the logits those of the same model with its weights on the quantized grid, unquantized, at a third (int4) or
    three fifths (int8) of the bf16 bytes."""
    import copy

    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.core import quant
    from engine.core.device_quant import DeviceQuantProjection
    from engine.core.kv import KVCache
    from engine.core.runner import Segment

    bits = 4 if mode == "int4" else 8
    model = tiny(LlamaConfig, LlamaForCausalLM)
    grid = copy.deepcopy(model)  # the reference: each projection's weights on the grid int4 / int8 puts them on
    for layer in grid.model.layers:
        a, m = layer.self_attn, layer.mlp
        for lin in (a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj):
            lin.weight.data = quant.quantize(lin.weight.data, bits, 32).dequantize()
    model, grid = model.to(torch.bfloat16), grid.to(torch.bfloat16)
    bf16_bytes = sum(
        lin.weight.numel() * 2
        for layer in model.model.layers
        for lin in (*(getattr(layer.self_attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")),)
        + tuple(getattr(layer.mlp, n) for n in ("gate_proj", "up_proj", "down_proj"))
    )
    table, fake = fake_table()
    runner = DecoderRunner(model, "cpu", use_kernels=False, quantization=mode, ops=table)
    plain = DecoderRunner(grid, "cpu", use_kernels=False, ops=fake_table()[0])
    assert runner.quantization == f"{mode} x8"
    assert runner.weights_label == f"{mode} · torch_npu.npu_weight_quant_batchmatmul"
    qp = [p for layer in runner.proj for p in layer]
    assert all(isinstance(p, DeviceQuantProjection) for p in qp)
    assert sum(p.nbytes for p in qp) <= bf16_bytes * (0.34 if bits == 4 else 0.6)
    prompt = [1, 17, 300, 4000, 52, 9, 77]
    with torch.inference_mode():
        got, want = [], []
        for r, out in ((runner, got), (plain, want)):
            cache = KVCache()
            out.append(r.forward([Segment(cache, prompt)])[0].float())
            for t in (42, 43):  # decode steps
                out.append(r.forward([Segment(cache, [t])])[0].float())
            r.release(cache)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=0.05 * w.abs().max().item(), rtol=0)  # bf16 rounding
    calls = fake.named("npu_weight_quant_batchmatmul")
    assert len(calls) == 8 * 3  # every projection of both layers, at each of the three steps
    qkv = calls[0].bound  # the first layer's q, k and v: N = 64 + 2 * 32, K = 64
    assert qkv["weight"].dtype == (torch.int32 if bits == 4 else torch.int8)
    assert qkv["weight"].shape == ((64, 128 // 8) if bits == 4 else (64, 128))
    assert qkv["antiquant_group_size"] == 32
    assert qkv["antiquant_scale"] == qkv["antiquant_offset"] == TensorInfo((2, 128), torch.bfloat16, True)


def test_quantized_weights_need_the_fused_op_or_an_accelerator() -> None:
    """On the CPU without the kernels, int4 / int8 need a table with a fused weight-quant matmul (the fake NPU's
    here); a table without one (the reference, which dequantizes per call) is refused there, as it would be slower
    than the plain weights; on an accelerator the reference serves (its runner's label says "dequantized per
    call")."""
    from engine.core import quant

    fused, _ = fake_table()
    reference, _ = fake_table(missing=("npu_weight_quant_batchmatmul",))
    assert quant.plan("int4", "cpu", None, True, None, "llama", fused) == "int4"
    with pytest.raises(quant.QuantError, match="only auto and none"):
        quant.plan("int8", "cpu", None, True, None, "llama", reference)
    assert quant.plan("int8", "npu:0", None, True, None, "llama", reference) == "int8"
