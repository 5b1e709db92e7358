"""A decode step's layers in one native call (engine/core/fused_step.py) against the runner's layer loop: the same
kernels in the same order, so the same bits, on the bundled model's bf16 weights and on its own Q4_1 blocks."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.core import quant
from tests.engine.core.test_quantization import _runner


def decode(runner: Any, prompts: list[list[int]], steps: int) -> torch.Tensor:
    """The logits of `steps` greedy decode steps of every prompt together, after one prefill of them all."""
    from engine.core.kv import KVCache
    from engine.core.runner import Segment

    caches = [KVCache() for _ in prompts]
    rows = []
    with torch.inference_mode():
        logits = runner.forward([Segment(c, p) for c, p in zip(caches, prompts)])
        for _ in range(steps):
            logits = runner.forward([Segment(c, [int(row.argmax())]) for c, row in zip(caches, logits)])
            rows.append(logits.clone())
    for c in caches:
        runner.release(c)
    return torch.stack(rows)


def tile_kernels(runner: Any) -> None:
    """Every quantized projection on the tile kernel below SPLIT_ROWS, the one decode_layers calls (calibration may
    have timed torch's kernel ahead on a busy machine)."""
    for p in (q for layer in runner.proj for q in layer):
        if isinstance(p, quant.QuantProjection):
            p.kernels_by_rows = ("tile", p.kernels_by_rows[1])


def fused_and_loop(run: Any, runner: Any, *args: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """`run(runner, *args)`'s logits with decode steps in the one native call, then through the layer loop."""
    runner.fuse_decode = True
    fused = run(runner, *args)
    runner.fuse_decode = False
    return fused, run(runner, *args)


@pytest.mark.parametrize("quantization", ["none", "auto"])
def test_a_fused_decode_step_gives_the_layer_loops_bits(service, settings, quantization: str) -> None:
    runner = _runner(service, settings, quantization)
    tile_kernels(runner)
    assert runner._fused() is not None, "the bundled model's decode steps take the one native call"
    prompts = [list(range(100 + i, 130 + 9 * i)) for i in range(3)]  # ragged contexts
    for batch in (prompts[:1], prompts):
        fused, loop = fused_and_loop(decode, runner, batch, 5)
        assert torch.equal(fused, loop), f"{quantization}: {len(batch)} rows"


def test_a_runner_with_a_kernel_the_fused_call_lacks_keeps_the_loop(service, settings) -> None:
    """The plan is refused (the runner's steps take the layer loop) when one projection runs another kernel below
    SPLIT_ROWS than the tile kernel decode_layers calls."""
    from engine.core.fused_step import FusedStep

    runner = _runner(service, settings, "auto")
    tile_kernels(runner)
    assert FusedStep.build(runner) is not None
    runner.proj[3][2].kernels_by_rows = ("torch", "tile")
    assert FusedStep.build(runner) is None


@pytest.mark.parametrize("kv", ["fp32", "bf16"])
@pytest.mark.parametrize("quantization", ["none", "int8", "int4"])
def test_a_fused_gemma3_step_gives_the_layer_loops_bits(quantization: str, kv: str) -> None:
    """Gemma 3's layer in the one native call (the norms of the attention's and the MLP's outputs, gelu_tanh, q's
    scale, a RoPE table per layer type, the sliding layers' own pool read from each row's window start) against the
    loop, on a tiny random Gemma 3 whose matrices bf16 holds exactly (the linear_bf16 kernel) and quantized at load:
    ragged rows, one crossing the 21-token window as it decodes."""
    from engine.core.model_runner import make_runner
    from tests.engine.core.test_gemma3 import ids, tiny_gemma

    runner = make_runner(tiny_gemma(bf16_weights=True), "cpu", quantization=quantization, kv_cache_dtype=kv)
    if runner.kern is None:
        pytest.skip("no CPU kernels on this machine")
    tile_kernels(runner)
    fused = runner._fused()
    assert fused is not None and fused.windowed and fused.q_scale != 1.0, "the tiny Gemma's decode takes the call"
    prompts = [ids(15, 1), ids(9, 2), ids(40, 3)]
    for batch in (prompts[:1], prompts):
        got, loop = fused_and_loop(decode, runner, batch, 12)
        assert torch.equal(got, loop), f"{quantization}, {kv} pages: {len(batch)} rows"
    # a speculative draft (a decode row per drafted token, each with its own window) beside a plain decode row
    got, loop = fused_and_loop(drafted, runner, prompts[2], ids(6, 4), prompts[1])
    assert torch.equal(got, loop), f"{quantization}, {kv}: drafted"


def drafted(runner: Any, prompt: list[int], draft: list[int], other: list[int]) -> torch.Tensor:
    """The logits of one step of `other`'s next token beside `prompt`'s drafted tokens (all_logits), after both
    prompts."""
    from engine.core.kv import KVCache
    from engine.core.runner import Segment

    a, b = KVCache(), KVCache()
    with torch.inference_mode():
        runner.forward([Segment(a, prompt), Segment(b, other)])
        got = runner.forward([Segment(b, [7]), Segment(a, draft, all_logits=True)])
    for c in (a, b):
        runner.release(c)
    return got
