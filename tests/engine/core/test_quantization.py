"""Quantized weights (engine/core/quant.py): the packed kernels against the dequantized reference on ragged shapes,
each GGUF block type decoded against the `gguf` package's own dequantization, and the bundled model served at int4,
int8 and its own Q4_1 blocks through the real engine."""

from __future__ import annotations

import copy
import shutil
import time
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from engine.core import cpu_kernels, quant
from tests.conftest import MODEL


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
@pytest.mark.parametrize("rows", [1, 7, 65])
@pytest.mark.parametrize(("n", "k"), [(1, 32), (7, 40), (33, 200), (17, 576)])
@pytest.mark.parametrize(("bits", "group"), [(4, 32), (4, 64), (4, 128), (8, 0), (8, 32)])
def test_tile_kernel_matches_the_dequantized_matrix(K, rows: int, n: int, k: int, bits: int, group: int) -> None:
    g = torch.Generator().manual_seed(rows * 7919 + n * 31 + k + bits)
    w = torch.randn(n, k, generator=g)
    qw = quant.quantize(w, bits, group)
    assert qw.k == k and qw.kp % qw.group == 0
    bias = torch.randn(n, generator=g)
    x = torch.randn(rows, k, generator=g)
    p = quant.QuantProjection(qw, bias, K)
    torch.testing.assert_close(p.tile(x), F.linear(x, qw.dequantize(), bias), atol=2e-4, rtol=1e-4)
    # and quantization itself is close to the matrix: half a step of its group
    step = qw.scale.repeat_interleave(qw.group, 1)[:, :k]
    assert ((qw.dequantize() - w).abs() <= step / 2 + 1e-5).all()


def test_the_amx_kernel_gives_a_row_the_same_numbers_whatever_the_batch() -> None:
    """From SPLIT_ROWS every row of a step takes the AMX path: a row's result must not depend on how many rows share
    the call (greedy tokens alone and batched stay the same)."""
    K = cpu_kernels.kernels()
    if K is None or not K.amx:
        pytest.skip("no AMX-BF16 tiles on this CPU")
    g = torch.Generator().manual_seed(11)
    qw = quant.quantize(torch.randn(40, 224, generator=g), 4, 32)
    x = torch.randn(130, 224, generator=g)
    alone = K.linear_q_amx(x[:16], qw)
    for rows in (17, 33, 40, 64, 65, 130):
        assert torch.equal(K.linear_q_amx(x[:rows], qw)[:16], alone), rows


# Row counts either side of a 16-row tile and of a pass of 2 tiles; N either side of a 16-row strip; K ragged.
@pytest.mark.parametrize("rows", [16, 17, 64, 65])
@pytest.mark.parametrize(("n", "k"), [(1, 32), (33, 200), (17, 576)])
@pytest.mark.parametrize(("bits", "group", "half"), [(4, 32, True), (4, 64, False), (8, 0, False), (8, 32, True)])
def test_amx_kernel_matches_the_bf16_rounded_matrix(
    rows: int, n: int, k: int, bits: int, group: int, half: bool
) -> None:
    """The AMX path (bf16 inputs and decoded weights, float32 sums): the float32 product of the same bf16-rounded
    operands, up to summation order; scales and mins in half or float32 (a GGUF's K-quants)."""
    K = cpu_kernels.kernels()
    if K is None or not K.amx:
        pytest.skip("no AMX-BF16 tiles on this CPU")
    g = torch.Generator().manual_seed(rows + n * 13 + k + bits)
    qw = quant.quantize(torch.randn(n, k, generator=g), bits, group, symmetric=bits == 8 and group == 32)
    if not half:
        qw = replace(qw, scale=qw.scale.float(), minv=qw.minv.float())
    bias = torch.randn(n, generator=g)
    x = torch.randn(rows, k, generator=g)
    p = quant.QuantProjection(qw, bias, K)
    ref = F.linear(x.bfloat16().float(), qw.dequantize().bfloat16().float(), bias)
    torch.testing.assert_close(p.amx(x), ref, atol=1e-4 * ref.abs().max().item(), rtol=1e-4)
    p.kernels_by_rows = ("tile", "amx")  # what calibration sets where it wins from SPLIT_ROWS
    torch.testing.assert_close(p(x), p.amx(x), atol=0, rtol=0)


@pytest.mark.parametrize(
    ("n", "k", "bits", "group"), [(16, 64, 4, 32), (48, 200, 4, 64), (33, 576, 4, 128), (17, 40, 8, 0), (32, 576, 8, 0)]
)
def test_torch_packed_kernels_match_the_dequantized_matrix(n: int, k: int, bits: int, group: int) -> None:
    g = torch.Generator().manual_seed(n + k)
    qw = quant.quantize(torch.randn(n, k, generator=g), bits, group)
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
    blocks_of = {"Q4_K": (144, 0), "Q5_K": (176, 0), "Q6_K": (210, 208), "Q2_K": (84, 80)}
    if type_name in blocks_of:  # gguf has no K-quant quantizer: random blocks with sane super-block scales
        size, at = blocks_of[type_name]
        rng = np.random.default_rng(seed)
        blocks = rng.integers(0, 256, (n, k // 256, size), dtype=np.uint8)
        scales = [0.01] if type_name == "Q6_K" else [0.01, 0.02]  # d (and dmin)
        blocks[..., at : at + 2 * len(scales)] = np.frombuffer(np.float16(scales).tobytes(), np.uint8)
        raw = blocks.reshape(n, -1)
    else:
        raw = quants.quantize(w, qtype)
    return raw, quants.dequantize(raw, qtype)


GGUF_TYPES = [("Q4_0", 64), ("Q4_1", 96), ("Q8_0", 160), ("Q4_K", 512), ("Q5_0", 96), ("Q5_K", 512), ("Q6_K", 768)]


@pytest.mark.parametrize(("type_name", "k"), GGUF_TYPES)
def test_gguf_blocks_decode_as_gguf_dequantizes_them(type_name: str, k: int) -> None:
    raw, expected = _gguf_tensor(type_name, 7, k, seed=k)
    qw = quant.from_gguf(type_name, raw, k)
    assert qw is not None and qw.source == type_name
    assert qw.bits == (4 if type_name in ("Q4_0", "Q4_1", "Q4_K") else 8)
    np.testing.assert_allclose(qw.dequantize().numpy(), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows", [1, 7, 65])
@pytest.mark.parametrize(("type_name", "k"), GGUF_TYPES)
def test_tile_kernel_runs_each_gguf_block_type(K, rows: int, type_name: str, k: int) -> None:
    """The kernel on each block type's own layout (half or float32 scales, offsets or none, Q6_K's groups of 16),
    against gguf's dequantization, 33 rows (not a multiple of the tiles)."""
    raw, expected = _gguf_tensor(type_name, 33, k, seed=rows + k)
    qw = quant.from_gguf(type_name, raw, k)
    assert qw is not None
    bias = torch.randn(33, generator=torch.Generator().manual_seed(rows))
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(k))
    ref = F.linear(x, torch.from_numpy(expected), bias)
    torch.testing.assert_close(quant.QuantProjection(qw, bias, K).tile(x), ref, atol=1e-3, rtol=1e-4)
    if rows >= quant.SPLIT_ROWS and K.amx:  # and on AMX tiles, with bf16 operands
        ref16 = F.linear(x.bfloat16().float(), torch.from_numpy(expected).bfloat16().float(), bias)
        got = quant.QuantProjection(qw, bias, K).amx(x)
        torch.testing.assert_close(got, ref16, atol=1e-4 * ref16.abs().max().item(), rtol=1e-4)


def test_gguf_types_without_a_kernel_fall_back() -> None:
    raw, _ = _gguf_tensor("Q2_K", 3, 256, seed=1)
    assert quant.from_gguf("Q2_K", raw, 256) is None


# ---- the bundled model, served quantized ------------------------------------------------------------------------------


def _prompts(service: Any) -> list[list[int]]:
    from tests.engine.core.test_model_runner import GREEDY_PROMPTS

    tok = service.engine.tokenizer
    texts = [
        tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in GREEDY_PROMPTS
    ]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def _runner(service: Any, settings: Any, quantization: str) -> Any:
    from engine import models
    from engine.core.model_runner import DecoderRunner

    if service.engine.runner.kern is None:
        pytest.skip("no CPU kernels here: quantized weights need them")
    gguf = models.gguf_source(settings.model, models.cache_root(settings.cache_dir))
    if quantization == "auto" and gguf is None:
        pytest.skip("the bundled GGUF is not on disk")
    model = copy.deepcopy(service.engine.runner.model).float()  # as loaded: float32
    return DecoderRunner(model, "cpu", kv_tokens=4096, quantization=quantization, gguf=gguf)


@pytest.mark.parametrize("quantization", ["int4", "int8", "auto"])
def test_greedy_tokens_alone_and_batched_are_the_same_quantized(service, settings, quantization: str) -> None:
    """int4 / int8 at load and the GGUF's own Q4_1 blocks (auto): each prompt alone (C1) and the four together
    (C4) give the same greedy tokens, and the projections really are quantized, at a fraction of the bytes."""
    from tests.engine.core.test_model_runner import greedy

    runner = _runner(service, settings, quantization)
    expected = {"int4": "int4 x120", "int8": "int8 x120", "auto": "Q4_1 x120"}[quantization]
    assert runner.quantization == expected
    assert (
        runner.weights_label
        == {"int4": "int4 · quantized at load", "int8": "int8 · quantized at load", "auto": "Q4_1 · int4 kernels"}[
            quantization
        ]
    )
    qp = [p for layer in runner.proj for p in layer]
    assert all(isinstance(p, quant.QuantProjection) for p in qp)
    params = sum(p.qw.n * p.qw.k for p in qp)
    # int8: a byte a weight and a float32 scale and offset per 32; int4 and Q4_1: half a byte, half scales and mins
    assert sum(p.qw.nbytes for p in qp) <= params * (1.25 if quantization == "int8" else 0.625)
    # the embedding and the tied output head quantized too (int8 in groups of 32, or the GGUF's own Q8_0 blocks)
    head = runner.lm_head
    assert isinstance(head, quant.QuantProjection) and runner.embed_tokens.qw is head.qw
    # int8 / int4 are asked for to hold fewer bytes: no second copy for speed; a GGUF's blocks at most double
    copies = sum(p.nbytes - p.qw.nbytes for p in [*qp, head])
    assert copies <= (0 if quantization in ("int4", "int8") else sum(p.qw.nbytes for p in [*qp, head])), copies
    assert head.qw.bits == 8 and head.qw.nbytes <= head.qw.n * head.qw.k * 1.07
    prompts = _prompts(service)
    together = greedy(runner, prompts, 10)
    alone = [greedy(runner, [p], 10)[0] for p in prompts]
    assert together == alone
    # and they are the model's answers: teacher-forced on the unquantized runner's greedy tokens, the same top-1
    reference = greedy(service.engine.runner, prompts, 10)
    agree, kl = top1_agreement(service.engine.runner, runner, prompts, reference)
    # of 40 tokens (one near-tie flips 2.5%); the bench's 16 prompts x 64 tokens hold them to 95% / 99% / 99.5%
    assert agree >= 0.95 and kl < {"int4": 1e-3, "int8": 1e-2, "auto": 2e-4}[quantization], (agree, kl)


def teacher_forced(runner: Any, prompt: list[int], tokens: list[int], stepwise: bool = False) -> torch.Tensor:
    """Log-probabilities [len(tokens), vocab] of each of `tokens` after the prompt and the tokens before it: in one
    prefill, or `stepwise` as decode steps (the prompt, then one token a step: the kernels of a decode batch)."""
    from engine.core.kv import KVCache
    from engine.core.runner import Segment

    cache = KVCache()
    with torch.inference_mode():
        if stepwise:
            rows = [runner.forward([Segment(cache, prompt)])[-1:]]
            rows += [runner.forward([Segment(cache, [t])]) for t in tokens[:-1]]
            logits = torch.cat(rows)
        else:
            seg = Segment(cache, prompt + tokens[:-1], all_logits=True)
            logits = runner.forward([seg])[len(prompt) - 1 :]
    runner.release(cache)
    return torch.log_softmax(logits.float(), -1)


def top1_agreement(
    ref: Any, test: Any, prompts: list[list[int]], outs: list[list[int]], stepwise: bool = False
) -> tuple[float, float]:
    """Share of positions where both runners' top-1 tokens agree, and mean KL(ref || test), teacher-forced (the
    test runner `stepwise` when asked: its decode path)."""
    same = total = 0
    kl = 0.0
    for p, o in zip(prompts, outs):
        a, b = teacher_forced(ref, p, o), teacher_forced(test, p, o, stepwise)
        same += int((a.argmax(-1) == b.argmax(-1)).sum())
        total += len(o)
        kl += float((a.exp() * (a - b)).sum(-1).sum())
    return same / total, kl / total


def test_the_api_serves_int4(settings) -> None:
    from tests.conftest import built_and_served

    server = built_and_served(settings.replace(quantization="int4"))
    live = next(server)
    try:
        assert live.service.engine.runner.quantization == "int4 x120"
        with live.client() as http:
            card = http.get(f"/v1/models/{MODEL}").json()
            assert card["quantization"] == "int4 x120"
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": "Name a colour."}],
                "max_tokens": 6,
                "temperature": 0,
            }
            r = http.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["completion_tokens"] >= 1 and r.json()["choices"][0]["message"]["content"]
            r = http.post("/v1/chat/completions", json={**body, "stream": True})
            assert r.status_code == 200 and "data: [DONE]" in r.text
            r = http.post("/v1/chat/completions", json={**body, "max_tokens": -1})
            assert r.status_code in (400, 422) and "max_tokens" in r.text
        from playground.page.capabilities import header_html

        assert "int4 · quantized at load" in header_html(live.service)  # the page's header says it too
    finally:
        server.close()


def test_a_bad_quantization_is_a_clear_error() -> None:
    from app import settings_from

    with pytest.raises(SystemExit):
        settings_from(["--quantization", "int3"])
    with pytest.raises(ValueError, match="PLAYGROUND_QUANTIZATION must be one of auto, none, int8, int4"):
        settings_from([], environ={"PLAYGROUND_QUANTIZATION": "fp4"})
    with pytest.raises(
        quant.QuantError, match="accelerator.*AVX2 and FMA.*on this cpu only auto and none are supported"
    ):
        quant.plan("int4", "cpu", None, True, None, "llama")  # a CPU without the kernels
    assert quant.plan("int4", "cuda", None, True, None, "llama") == "int4"  # the device table's matmul
    with pytest.raises(quant.QuantError, match="lean runner"):
        quant.plan("int8", "cpu", object(), False, None, "whisper")
    assert quant.plan("auto", "cuda", None, True, "x.gguf", "llama") == "none"  # auto never fails


def test_an_hf_forward_model_refuses_int4() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    from engine.core.model_runner import make_runner

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32))
    with pytest.raises(quant.QuantError, match="use auto or none"):
        make_runner(model, "cpu", quantization="int4")
    make_runner(model, "cpu", quantization="auto")  # served as it is


def test_calibration_keeps_the_unquantized_path_where_it_is_faster(K) -> None:
    """A shape whose unquantized path measures faster at many rows runs it from SPLIT_ROWS (a bf16 copy, counted in
    the bytes), and a quantized kernel below; one whose reference is slower keeps no copy."""
    # A matrix big enough that the kernels take a millisecond or more from 16 rows, against the microseconds of
    # the stand-in below, and the best of 3 timings: a preempted timing on a busy machine cannot turn the outcome.
    n, k = 512, 768
    g = torch.Generator().manual_seed(3)
    qw = quant.quantize(torch.randn(n, k, generator=g), 4, 32)
    fast = [quant.QuantProjection(qw, None, K)]

    class Instant:  # the "unquantized path": faster than any kernel, and recognisable
        def __init__(self, w: torch.Tensor, bias: Any) -> None:
            self.weight, self.packed = w.to(torch.bfloat16), None

        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return torch.full((x.shape[0], n), 7.0)

    quant.calibrate(fast, Instant, repeat=3)
    p = fast[0]
    assert p.kernels_by_rows[1] == "fallback" and p.kernels_by_rows[0] != "fallback"
    assert p.nbytes > qw.nbytes + n * k  # the copy counts
    assert (p(torch.randn(quant.SPLIT_ROWS, k)) == 7).all()
    x = torch.randn(4, k)
    ref = F.linear(x, qw.dequantize())  # the tile kernel, or torch's (bf16 activations) where it won
    torch.testing.assert_close(p(x), ref, atol=0.05 * ref.abs().max().item(), rtol=0.02)

    def slow(w: torch.Tensor, bias: Any) -> Any:
        return lambda x: (time.sleep(0.05), F.linear(x, w))[1]

    other = [quant.QuantProjection(qw, None, K)]
    quant.calibrate(other, slow, repeat=1)
    assert other[0].fallback is None and "fallback" not in other[0].kernels_by_rows


def test_second_copies_stay_within_their_budget(K) -> None:
    """Copies for speed go to the shapes that save the most time a byte while they fit the budget; the others run
    the tile kernel in that range (or the AMX one, which needs no copy); with no budget no copy is even timed."""

    class Instant:  # the "unquantized path": faster than any kernel (so it wins everywhere), a bf16 copy in bytes
        def __init__(self, w: torch.Tensor, bias: Any) -> None:
            self.weight, self.packed = w.to(torch.bfloat16), None

        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return torch.zeros(x.shape[0], self.weight.shape[0])

    g = torch.Generator().manual_seed(5)
    shapes = [(512, 768), (256, 768), (128, 768)]

    def fresh() -> list[quant.QuantProjection]:
        return [
            quant.QuantProjection(quant.quantize(torch.randn(n, k, generator=g), 4, 32), None, K) for n, k in shapes
        ]

    none = fresh()
    timed = quant.calibrate(none, Instant, repeat=1, copy_budget=0)
    assert all("reference" not in t and "torch" not in t for table in timed.values() for t in table.values())
    assert timed or not K.amx  # nothing timed, unless the AMX kernel (no copy) is there to time against tile
    assert all(p.kernels_by_rows[0] == "tile" and p.kernels_by_rows[1] in ("tile", "amx") for p in none)
    assert all(p.nbytes == p.qw.nbytes for p in none)
    bf16 = {n: n * k * 2 for n, k in shapes}
    some = fresh()
    budget = bf16[512] + bf16[128]  # room for two of the three copies, whichever two
    quant.calibrate(some, Instant, repeat=1, copy_budget=budget)
    spent = sum(p.nbytes - p.qw.nbytes for p in some)
    assert 0 < spent <= budget
    assert sum(p.kernels_by_rows[1] == "fallback" for p in some) in (1, 2)
    for p in some:  # a shape without its copy runs a kernel that needs none there
        if p.kernels_by_rows[1] != "fallback":
            assert p.fallback is None and p.kernels_by_rows[1] in ("tile", "amx", "torch")
    assert quant.copy_budget("int4", some) == quant.copy_budget("int8", some) == 0
    assert 0 < quant.copy_budget("gguf", some) <= sum(p.qw.nbytes for p in some)


@pytest.mark.parametrize("rows", [1, 16, 65])
@pytest.mark.parametrize(("n", "k"), [(7, 40), (33, 200), (17, 576)])
@pytest.mark.parametrize(("bits", "group"), [(4, 32), (8, 0), (8, 32)])
def test_w8a8_matches_the_dequantized_matrix(rows: int, n: int, k: int, bits: int, group: int) -> None:
    """int8 activations x int8 weights (torch._int_mm, where the CPU has VNNI or AMX): within the rounding of
    per-row int8 activations and per-channel int8 weights of the dequantized matrix, bias added in float32."""
    if not quant.w8a8_supported():
        pytest.skip("no VNNI / AMX int8 on this CPU, or no torch._int_mm")
    g = torch.Generator().manual_seed(rows + n * 13 + k)
    qw = quant.quantize(torch.randn(n, k, generator=g), bits, group)
    bias = torch.randn(n, generator=g)
    p = quant.QuantProjection(qw, bias, cpu_kernels.kernels())
    assert p.pack_int8()
    if bits == 8 and group == 0:  # already per-channel int8: no second copy
        assert p.int8 is not None and p.int8[0].data_ptr() == qw.q.data_ptr() and p.nbytes == qw.nbytes
    x = torch.randn(rows, k, generator=g)
    ref = F.linear(x, qw.dequantize(), bias)
    out = p.w8a8(x)
    assert out.shape == ref.shape and out.dtype == torch.float32
    err = (out - ref).norm() / (ref - bias).norm()
    assert err < 0.02, err
    if rows >= quant.SPLIT_ROWS:
        p.kernels_by_rows = ("tile", "w8a8")  # what calibration sets where it wins from SPLIT_ROWS
        torch.testing.assert_close(p(x), out)


@pytest.mark.parametrize(
    ("bits", "group", "source"), [(4, 32, "int4"), (4, 128, "int4"), (8, 32, "int8"), (8, 0, "int8")]
)
def test_a_decode_batch_gets_the_same_numbers_as_a_prompt(K, bits: int, group: int, source: str) -> None:
    """Below 16 rows the kernel decodes each block in registers (never storing it), from 16 it decodes tiles into a
    float32 copy: the same multiply-adds in the same order, so each row's result is bit-identical whichever path,
    and whatever else shares the step (a sequence's greedy tokens cannot depend on its neighbours)."""
    g = torch.Generator().manual_seed(bits * 100 + group)
    qw = quant.quantize(torch.randn(37, 200, generator=g), bits, group)
    bias = torch.randn(37, generator=g)
    x = torch.randn(20, 200, generator=g)
    p = quant.QuantProjection(qw, bias, K)
    many = p.tile(x)  # 20 rows: the decoded-copy path
    for rows in (1, 2, 5, 15):
        assert torch.equal(p.tile(x[:rows]), many[:rows]), f"{source}: {rows} rows"
    assert torch.equal(p.tile(x[7:8]), many[7:8])


@pytest.mark.parametrize(("type_name", "k"), GGUF_TYPES)
def test_each_gguf_layout_gets_the_same_numbers_alone_and_in_a_prompt(K, type_name: str, k: int) -> None:
    """The direct path's tiles for each block type's own layout (half or float32 scales, mins or none, Q6_K's groups
    of 16) against the decoded-copy path's: bit for bit, in tiles of 8 rows, of 4 and one at a time (37 rows)."""
    raw, _ = _gguf_tensor(type_name, 37, k, seed=k + 1)
    qw = quant.from_gguf(type_name, raw, k)
    assert qw is not None
    x = torch.randn(20, k, generator=torch.Generator().manual_seed(k))
    p = quant.QuantProjection(qw, None, K)
    many = p.tile(x)
    for rows in (1, 3, 15):
        assert torch.equal(p.tile(x[:rows]), many[:rows]), f"{type_name}: {rows} rows"


def test_the_memory_estimate_counts_packed_weights() -> None:
    """The registry's estimate (what the pool unloads models by) holds weights as they will be held: a GGUF under
    `auto` at its bytes on disk, int4 / int8 packed, a precision entry at its own quantization and dtype."""
    from engine.model_registry import Candidate, variant
    from engine.serving.model_pool import ModelPool

    hf = Candidate("m", "", "hf", 4000, 1000, "llama", 2048, kv_bytes_per_token=100)
    gguf = Candidate("g", "x.gguf", "gguf", 700, 1000, "llama", 2048, kv_bytes_per_token=100)
    kv = 100 * 64 * 2  # float32 pages
    assert hf.memory_bytes(4, 64) == 4000 + kv
    assert hf.memory_bytes(4, 64, quantization="auto") == 4000 + kv  # an HF checkpoint: as before
    assert hf.memory_bytes(4, 64, quantization="int4") == 625 + kv
    assert hf.memory_bytes(4, 64, quantization="int8") == 1125 + kv
    assert gguf.memory_bytes(4, 64, quantization="auto") == 700 + kv
    assert gguf.memory_bytes(4, 64, quantization="none") == 4000 + kv
    assert variant(gguf, "int4").memory_bytes(4, 64, quantization="auto") == 625 + kv
    assert variant(gguf, "bf16").memory_bytes(4, 64, quantization="auto") == 2000 + kv // 2
    pool = ModelPool([hf, gguf], lambda candidate, report: None, bytes_per_param=4, kv_tokens=64, quantization="auto")
    assert pool.memory_bytes("g") == 700 + kv and pool.memory_bytes("m") == 4000 + kv


def test_the_bundled_model_is_estimated_at_its_gguf_bytes(settings) -> None:
    """The bundled SmolLM2 is a directory converted from its Q4_1 GGUF; under `auto` the pool counts the GGUF's
    bytes, under `none` its parameters at the compute dtype."""
    from engine.serving.model_catalog import model_candidates

    auto = next(c for c in model_candidates(settings.replace(quantization="auto")) if c.source == "")
    assert auto.format == "hf" and 50e6 < auto.gguf_bytes < 120e6
    assert auto.memory_bytes(4, 0, quantization="auto") == auto.gguf_bytes
    assert auto.memory_bytes(4, 0, quantization="none") == auto.parameters * 4
