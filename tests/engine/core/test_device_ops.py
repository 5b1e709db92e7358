"""The device-ops seam (engine/core/ops.py): the torch reference against HF's own modules, and every backend table
present here against the reference, op by op, on ragged shapes. CPU: the kernels' table for each instruction set
this CPU runs; CUDA / MPS: the reference on the device against the reference on the CPU (skipped with the reason
where there is none). The NPU's table is tested against a fake torch_npu in tests/engine/core/test_npu_ops.py."""

from __future__ import annotations

import shutil

import pytest
import torch

from engine import device as devices
from engine.core import cpu_kernels, ops
from engine.core.kv import PAGE

H, KV, D = 4, 2, 16


def tables() -> list[tuple[str, ops.TorchOps]]:
    out: list[tuple[str, ops.TorchOps]] = []
    if shutil.which("g++") or shutil.which("c++"):
        for isa in cpu_kernels.supported_isas():
            out.append((f"cpu-{isa}", ops.CpuOps(cpu_kernels.load(isa))))
    return out


@pytest.fixture(params=[name for name, _ in tables()] or ["none"])
def table(request: pytest.FixtureRequest) -> ops.TorchOps:
    found = dict(tables())
    if request.param not in found:
        pytest.skip("no backend table here beside the reference (no g++ or no AVX2)")
    return found[request.param]


def pools(pages: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return (torch.randn(pages, PAGE, KV, D, generator=g), torch.randn(pages, PAGE, KV, D, generator=g))


def test_the_reference_norm_and_rotary_match_hf_modules() -> None:
    from transformers import LlamaConfig
    from transformers.models.llama import modeling_llama as hf

    x, w = torch.randn(5, 64), torch.rand(64) + 0.5
    norm = hf.LlamaRMSNorm(64, eps=1e-5)
    norm.weight.data = w.clone()
    ref = ops.TorchOps()
    delta = torch.randn(5, 64)
    got = ref.add_rmsnorm(x.clone(), delta, w, 1e-5)
    torch.testing.assert_close(got, norm(x + delta))

    cfg = LlamaConfig(hidden_size=H * D, num_attention_heads=H, num_key_value_heads=KV, head_dim=D)
    rotary = hf.LlamaRotaryEmbedding(cfg)
    n = 6
    pos = torch.arange(3, 3 + n)[None]
    cos, sin = rotary(torch.zeros(1, n, H * D), pos)
    qkv = torch.randn(n, (H + 2 * KV) * D)
    k_rows, v_rows = torch.zeros(40, KV, D), torch.zeros(40, KV, D)
    slots = torch.tensor([7, 1, 30, 2, 9, 11])
    q = ref.rope_store(qkv, cos[0], sin[0], slots, k_rows, v_rows, H)
    q_hf, k_hf, v_hf = qkv.split((H * D, KV * D, KV * D), dim=-1)
    q_hf, k_hf = hf.apply_rotary_pos_emb(
        q_hf.view(n, H, D).transpose(0, 1)[None], k_hf.view(n, KV, D).transpose(0, 1)[None], cos, sin
    )
    torch.testing.assert_close(q, q_hf[0].transpose(0, 1))
    torch.testing.assert_close(k_rows[slots], k_hf[0].transpose(0, 1))
    torch.testing.assert_close(v_rows[slots], v_hf.view(n, KV, D))


@pytest.mark.parametrize("rows", [1, 3, 17])
def test_each_backend_matches_the_reference_op_by_op(table: ops.TorchOps, rows: int) -> None:
    ref = ops.TorchOps()
    g = torch.Generator().manual_seed(rows)
    x, delta, w = torch.randn(rows, 96, generator=g), torch.randn(rows, 96, generator=g), torch.rand(96, generator=g)
    a, b = x.clone(), x.clone()
    torch.testing.assert_close(table.add_rmsnorm(a, delta, w, 1e-6), ref.add_rmsnorm(b, delta, w, 1e-6))
    torch.testing.assert_close(a, b)  # the residual, added in place by both

    gate_up = torch.randn(rows, 2 * 40, generator=g)
    torch.testing.assert_close(table.silu_mul(gate_up), ref.silu_mul(gate_up))

    qkv = torch.randn(rows, (H + 2 * KV) * D, generator=g)
    angles = torch.rand(rows, D // 2, generator=g) * 6
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    slots = torch.randperm(64, generator=g)[:rows]
    k1, v1, k2, v2 = (torch.zeros(64, KV, D) for _ in range(4))
    q1 = table.rope_store(qkv, cos, sin, slots, k1, v1, H)
    q2 = ref.rope_store(qkv, cos, sin, slots, k2, v2, H)
    torch.testing.assert_close(q1, q2)
    torch.testing.assert_close(k1, k2)
    torch.testing.assert_close(v1, v2)
    norm = (torch.rand(D, generator=g) + 0.5, torch.rand(D, generator=g) + 0.5, 1e-6)  # Qwen3's q / k norms
    torch.testing.assert_close(
        table.rope_store(qkv, cos, sin, slots, k1, v1, H, norm), ref.rope_store(qkv, cos, sin, slots, k2, v2, H, norm)
    )

    k_pool, v_pool = pools()
    lens = torch.randint(1, 3 * PAGE, (rows,), generator=g, dtype=torch.int32)
    width = int(-(-lens.max() // PAGE))
    table_ = torch.stack([torch.randperm(12, generator=g)[:width] for _ in range(rows)]).to(torch.int32)
    q = torch.randn(rows, H, D, generator=g)
    torch.testing.assert_close(
        table.decode_attention(q, k_pool, v_pool, table_, lens),
        ref.decode_attention(q, k_pool, v_pool, table_, lens),
        atol=1e-5,
        rtol=1e-4,
    )
    starts = (torch.rand(rows, generator=g) * lens.float()).to(torch.int32)  # sliding windows: from starts[b]
    torch.testing.assert_close(
        table.decode_attention(q, k_pool, v_pool, table_, lens, starts),
        ref.decode_attention(q, k_pool, v_pool, table_, lens, starts),
        atol=1e-5,
        rtol=1e-4,
    )
    torch.testing.assert_close(table.gelu_tanh_mul(gate_up), ref.gelu_tanh_mul(gate_up))


@pytest.mark.parametrize("windowed", [False, True])
def test_the_reference_decode_attention_is_attention_over_each_rows_own_positions(windowed: bool) -> None:
    ref = ops.TorchOps()
    k_pool, v_pool = pools()
    table_ = torch.tensor([[3, 7, 0], [5, 0, 0]], dtype=torch.int32)
    lens = torch.tensor([PAGE + 5, 9], dtype=torch.int32)
    starts = torch.tensor([PAGE - 2, 4], dtype=torch.int32) if windowed else torch.zeros(2, dtype=torch.int32)
    q = torch.randn(2, H, D)
    out = ref.decode_attention(q, k_pool, v_pool, table_, lens, starts if windowed else None)
    for b in range(2):
        at = slice(int(starts[b]), int(lens[b]))
        k = k_pool[table_[b].long()].flatten(0, 1)[at].repeat_interleave(H // KV, dim=1)  # [T, H, D]
        v = v_pool[table_[b].long()].flatten(0, 1)[at].repeat_interleave(H // KV, dim=1)
        p = torch.softmax(torch.einsum("hd,thd->ht", q[b], k) / D**0.5, dim=-1)
        torch.testing.assert_close(out[b], torch.einsum("ht,thd->hd", p, v), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(("start", "window"), [(0, 0), (5, 0), (0, 3), (5, 3), (5, 100)])
def test_the_reference_prompt_attention_is_causal_from_its_start(start: int, window: int) -> None:
    ref = ops.TorchOps()
    t = 4
    q, k, v = torch.randn(H, t, D), torch.randn(KV, start + t, D), torch.randn(KV, start + t, D)
    out = ref.prompt_attention(q, k, v, start, window)
    kk, vv = k.repeat_interleave(H // KV, dim=0), v.repeat_interleave(H // KV, dim=0)
    scores = torch.einsum("htd,hsd->hts", q, kk) / D**0.5
    rows, cols = torch.arange(t)[:, None] + start, torch.arange(start + t)[None]
    allowed = (cols <= rows) & ((rows - cols < window) if window else True)
    expect = torch.einsum("hts,hsd->htd", torch.softmax(scores.masked_fill(~allowed, -torch.inf), -1), vv)
    torch.testing.assert_close(out, expect, atol=1e-5, rtol=1e-4)


def test_device_ops_picks_the_table_and_says_which_op_is_whose(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="engine.device"):
        ref = devices.device_ops("cpu", None)
    assert ref.name == "torch" and set(ref.chosen.values()) == {"torch"}
    assert "device ops on cpu: add_rmsnorm=torch" in caplog.text
    kern = cpu_kernels.kernels()
    if kern is not None:
        table = devices.device_ops("cpu", kern)
        assert table.name == "cpu" and table.chosen["prompt_attention"] == "torch"
        assert table.chosen["decode_attention"] == f"cpu_kernels.decode_attention ({kern.isa})"
    assert devices.device_ops("mps", None).name == "torch"  # MPS and CUDA: the reference (no kernels of theirs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_the_reference_on_cuda_matches_the_cpu() -> None:  # pragma: no cover - needs a GPU
    ref = ops.TorchOps()
    k_pool, v_pool = pools()
    table_ = torch.tensor([[3, 7], [5, 0]], dtype=torch.int32)
    lens = torch.tensor([PAGE + 5, 9], dtype=torch.int32)
    q = torch.randn(2, H, D)
    cpu = ref.decode_attention(q, k_pool, v_pool, table_, lens)
    gpu = ref.decode_attention(q.cuda(), k_pool.cuda(), v_pool.cuda(), table_.cuda(), lens.cuda())
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-4, rtol=1e-3)


def test_the_reference_attends_over_bf16_pages_as_over_their_widened_values() -> None:
    """--kv-cache-dtype bf16 under float32 activations: each attention op of the reference reads bf16 pages (or a
    chunk's keys and values gathered from them) and gives what it gives on the same values widened to float32."""
    ref = ops.TorchOps()
    g = torch.Generator().manual_seed(7)
    k_pool, v_pool = (p.to(torch.bfloat16) for p in pools())
    wide_k, wide_v = k_pool.float(), v_pool.float()
    table_ = torch.tensor([[3, 7, 0], [5, 9, 11], [2, 0, 0]], dtype=torch.int32)
    lens = torch.tensor([PAGE + 5, 3 * PAGE, 1], dtype=torch.int32)
    q = torch.randn(3, H, D, generator=g)
    for starts in (None, torch.tensor([PAGE - 2, 4, 0], dtype=torch.int32)):
        got = ref.decode_attention(q, k_pool, v_pool, table_, lens, starts)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, ref.decode_attention(q, wide_k, wide_v, table_, lens, starts))
    k, v = k_pool[[3, 7]].flatten(0, 1)[: PAGE + 5].transpose(0, 1), v_pool[[3, 7]].flatten(0, 1)[: PAGE + 5]
    v = v.transpose(0, 1)
    qc = torch.randn(H, 6, D, generator=g)
    for window in (0, 4):
        got = ref.prompt_attention(qc, k, v, PAGE - 1, window)
        torch.testing.assert_close(got, ref.prompt_attention(qc, k.float(), v.float(), PAGE - 1, window))
    rows = torch.randn(9, H, D, generator=g)  # two chunks: 6 rows of 21 positions, 3 rows of 3
    got = ref.prefill_attention(rows, k_pool, v_pool, table_[:2], [6, 3], [PAGE + 5, 3])
    torch.testing.assert_close(got, ref.prefill_attention(rows, wide_k, wide_v, table_[:2], [6, 3], [PAGE + 5, 3]))


@pytest.mark.parametrize("rows", [1, 3, 17])
def test_each_backend_matches_the_reference_on_bf16_pages(table: ops.TorchOps, rows: int) -> None:
    ref = ops.TorchOps()
    g = torch.Generator().manual_seed(rows)
    qkv = torch.randn(rows, (H + 2 * KV) * D, generator=g)
    angles = torch.rand(rows, D // 2, generator=g) * 6
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    slots = torch.randperm(64, generator=g)[:rows]
    k1, v1, k2, v2 = (torch.zeros(64, KV, D, dtype=torch.bfloat16) for _ in range(4))
    torch.testing.assert_close(
        table.rope_store(qkv, cos, sin, slots, k1, v1, H), ref.rope_store(qkv, cos, sin, slots, k2, v2, H)
    )
    torch.testing.assert_close(k1.float(), k2.float(), atol=1e-5, rtol=2**-8)  # one bf16 step at most
    assert torch.equal(v1, v2)
    k_pool, v_pool = (p.to(torch.bfloat16) for p in pools())
    lens = torch.randint(1, 3 * PAGE, (rows,), generator=g, dtype=torch.int32)
    width = int(-(-lens.max() // PAGE))
    table_ = torch.stack([torch.randperm(12, generator=g)[:width] for _ in range(rows)]).to(torch.int32)
    q = torch.randn(rows, H, D, generator=g)
    starts = (torch.rand(rows, generator=g) * lens.float()).to(torch.int32)
    for s in (None, starts):
        torch.testing.assert_close(
            table.decode_attention(q, k_pool, v_pool, table_, lens, s),
            ref.decode_attention(q, k_pool, v_pool, table_, lens, s),
            atol=1e-5,
            rtol=1e-4,
        )
