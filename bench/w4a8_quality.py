"""What int8 activations with 4-bit weights would cost in quality, before a kernel is written for them.

    .venv/bin/python bench/w4a8_quality.py [--prompts 16] [--tokens 64] [--group 32] [--only TEXT]

Issue 32's batches on an AMX CPU would need `tdpbusd` (int8 x int8, int32 sums) to beat vLLM's bf16: 4-bit codes
widened to int8 tiles against int8 activations. An integer product has one scale per weight row, not one per group
of 32, so the groups' scales must become small integers under a float scale per row (two-level scales, as QServe's
W4A8 does). This script simulates each format's numbers in float32 on SmolLM2's projections (the output head and
embedding stay float32 in every variant, so only the projections differ) and measures them as bench/quant_serve.py
measures the modes: 16 prompts x 64 greedy tokens of the float32 model, teacher-forced through each variant, top-1
agreement and mean KL(fp32 || variant) per token:

- `int4 g32`: the engine's `int4` format (quant.quantize: asymmetric, a scale and min per group of 32), inputs
  float32;
- `float weights + int8 act per token` / `per 32 inputs`: the activations' cost alone: each input row rounded to
  int8 with one float scale, or with one per 32 inputs (which an integer product could apply only per block of
  32, as it must the weights' group scales);
- `int4 g32 + int8 act per token` / `per 32 inputs`: both;
- `w4a8 two-level` (inputs per token or per 32): each row first to int8 with one float scale (symmetric,
  max |w| / 127), then each group of 32 of those int8 values to 4-bit codes with an integer scale and an integer
  zero point (scale times zero an int8 value); a weight is row_scale * int_scale * (code - zero), clamped to int8:
  with per-token inputs, what `tdpbusd` could multiply exactly over a whole row.

SmolLM2's bundled weights are its Q4_1 GGUF dequantized, so they already sit on a 16-level grid per group of 32:
the engine's `int4` format reproduces that grid almost exactly, a row-scaled integer grid cannot. Prints the
CPU-independent figures only (no timing).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine  # noqa: F401  (process settings before torch)


def int4_group(w: Any, group: int) -> Any:
    """The engine's own `int4` format (quant.quantize), dequantized to the float32 values its kernels use."""
    from engine.core import quant

    return quant.quantize(w, 4, group).dequantize()


def two_level(w: Any, group: int) -> Any:
    """Per row int8 (symmetric), then per group 4-bit codes with integer scale and zero: row_scale * s * (q - z)."""
    import torch

    n, k = w.shape
    row = w.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 127
    w8 = torch.clamp(torch.round(w / row), -127, 127).reshape(n, k // group, group)
    lo, hi = w8.amin(-1, keepdim=True), w8.amax(-1, keepdim=True)
    s = torch.clamp(torch.ceil((hi - lo) / 15), min=1)
    z = torch.round(-lo / s)  # any integer: s * z is an int8 value, subtracted after the product as QServe does
    q = torch.clamp(torch.round(w8 / s) + z, 0, 15)
    return (torch.clamp(s * (q - z), -128, 127) * row.unsqueeze(-1)).reshape(n, k)


def int8_rows(x: Any, group: int = 0) -> Any:
    """Each input row rounded to int8 with one float scale max|x| / 127 (QuantProjection.w8a8's rounding), or with
    one per `group` inputs; back in float."""
    import torch

    shape = x.shape
    g = x.reshape(*shape[:-1], shape[-1] // group, group) if group else x
    a = g.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 127
    return (torch.clamp(torch.round(g / a), -127, 127) * a).reshape(shape)


class Simulated:
    """A projection computing x @ w.T + bias in float32 from the simulated weights, the inputs simulated too when
    `act8`; the runner's layer loop only calls it."""

    def __init__(self, w: Any, bias: Any, act8: int) -> None:
        self.w, self.bias, self.act8 = w, bias, act8
        self.shape = tuple(w.shape)

    def __call__(self, x: Any) -> Any:
        import torch.nn.functional as F

        return F.linear(int8_rows(x, max(self.act8, 0)) if self.act8 >= 0 else x, self.w, self.bias)


def simulated_runner(weights_of: Any, act8: int, group: int) -> Any:
    """SmolLM2 with every projection Simulated: `act8` -1 float inputs, 0 int8 per row, G int8 per G inputs."""
    from quant_serve import runner_for

    runner, _ = runner_for("smollm2", "none")
    runner.fuse_decode = False  # the fused native step would take the projections' own kernels
    runner.proj = [
        tuple(Simulated(weights_of(p.weight.float(), group), p.bias, act8) for p in layer) for layer in runner.proj
    ]
    return runner


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--group", type=int, default=32)
    ap.add_argument("--only", help="the variants whose names contain this text (default: all)")
    args = ap.parse_args()
    import torch
    from quant_serve import greedy, prompts_for, runner_for

    from tests.engine.core.test_quantization import top1_agreement

    reference, tok = runner_for("smollm2", "none")
    prompts = prompts_for(tok, args.prompts, 0)
    with torch.inference_mode():
        outs = greedy(reference, prompts, args.tokens)
        variants = {
            "int4 g32": (int4_group, -1),
            "float weights + int8 act per token": (lambda w, g: w, 0),
            "float weights + int8 act per 32 inputs": (lambda w, g: w, 32),
            "int4 g32 + int8 act per token": (int4_group, 0),
            "int4 g32 + int8 act per 32 inputs": (int4_group, 32),
            "w4a8 two-level, int8 act per token": (two_level, 0),
            "w4a8 two-level, int8 act per 32 inputs": (two_level, 32),
        }
        for name, (weights_of, act8) in variants.items():
            if args.only and args.only not in name:
                continue
            runner = simulated_runner(weights_of, act8, args.group)
            agree, kl = top1_agreement(reference, runner, prompts, outs)
            print(
                json.dumps(
                    {
                        "variant": name,
                        "group": args.group,
                        "top1_agreement": round(agree, 4),
                        "mean_kl": float(f"{kl:.3g}"),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
