"""Would quantised matmuls make the lean runner faster, and at what cost in accuracy? Measures both on SmolLM2.

    .venv/bin/python bench/quant_probe.py [--batch 1,4,16,32] [--tokens 40]

Speed: every projection of the 30 layers (distinct weights, so they stream from memory as in a real step) plus the
vocabulary projection, at each batch size, for
  - fp32: what the runner does (engine/core/projection.py);
  - w8 (int8 weights, bf16 activations): torch's `_weight_int8pack_mm`;
  - w8a8 (int8 weights, int8 activations with one scale per call): fbgemm's dynamic quantised linear.
Accuracy: greedy continuations of three prompts are scored token by token (teacher-forced) by the runner with
fp32 projections and with each quantised form simulated exactly (fake quantisation in fp32), reporting top-1
agreement and KL(fp32 || quantised) of the next-token distribution. w8a8 is also run for real through fbgemm.

    .venv/bin/python bench/quant_probe.py --shape qwen0.5b [--batch 1,16]

What reading fewer bytes buys where single-stream decode is at the memory wall: the Qwen2.5-0.5B shape's
projections (24 layers and the 151,936-row vocabulary, random weights, so speed only) per batch size in
  - bf16 (what `--dtype bf16` streams): torch's bf16 linear (oneDNN);
  - w8 (int8 weights, one scale per row): `_weight_int8pack_mm`;
  - w4 (4-bit weights in groups of 32 with a scale and zero each, llama.cpp's Q4_1 layout in spirit):
    `_weight_int4pack_mm_for_cpu`;
beside a plain sum over each form's bytes (the bandwidth wall for that many bytes), with the tokens/s ceiling
the weights alone allow.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine  # noqa: F401  (process settings before torch)

PROMPTS = (
    "The history of the Roman Empire spans many centuries, beginning with the founding of the city of Rome and "
    "ending with the fall of Constantinople. During this time",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
)


def timed(fn, repeat: int = 5) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    return round((time.perf_counter() - t) / repeat * 1000, 1)


def speed(model, batches: list[int]) -> dict:
    import torch

    from engine.core.projection import Projection
    from engine.core.weights import fuse_layer

    weights = []
    for layer in model.model.layers:
        w_qkv, _, w_gate_up = fuse_layer(layer, torch.float32)
        weights += [w_qkv, layer.self_attn.o_proj.weight, w_gate_up, layer.mlp.down_proj.weight]
    weights.append(model.lm_head.weight)
    weights = [w.float() for w in weights]  # the runner's fp32 path, whatever dtype the checkpoint loaded in
    w8, w8a8 = [], []
    for w in weights:
        scale = w.float().abs().amax(dim=1).clamp_min(1e-12) / 127
        w8.append(((w.float() / scale[:, None]).round().to(torch.int8), scale.to(torch.bfloat16)))
        q = torch.quantize_per_channel(
            w.float(), scale.double(), torch.zeros(len(scale), dtype=torch.long), 0, torch.qint8
        )
        w8a8.append(torch.ops.quantized.linear_prepack(q, None))
    fp32 = [Projection(w) for w in weights]
    out = {}
    for b in batches:
        xs = {k: torch.randn(b, k) for k in {w.shape[1] for w in weights}}
        xb = {k: v.to(torch.bfloat16) for k, v in xs.items()}
        out[b] = {
            "fp32_ms": timed(lambda xs=xs: [p(xs[w.shape[1]]) for p, w in zip(fp32, weights)]),
            "w8_ms": timed(
                lambda xb=xb: [torch._weight_int8pack_mm(xb[w.shape[1]], q, s) for (q, s), w in zip(w8, weights)]
            ),
            "w8a8_ms": timed(
                lambda xs=xs: [
                    torch.ops.quantized.linear_dynamic(xs[w.shape[1]], p, True) for p, w in zip(w8a8, weights)
                ]
            ),
        }
    return out


# The (out, in) matrices of one Qwen2.5-0.5B layer (qkv, o, gate/up, down), its layers and vocabulary.
QWEN_05B = ([(1152, 896), (896, 896), (9728, 896), (896, 4864)], 24, 151936)


def int4_pack(w, group: int = 32):
    """Asymmetric 4-bit groups along the input dimension, in the layout `_weight_int4pack_mm_for_cpu` reads."""
    import torch

    n, k = w.shape
    g = w.float().reshape(n, k // group, group)
    low, high = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = ((high - low) / 15).clamp_min(1e-8)
    q = ((g - low) / scale).round().clamp(0, 15).to(torch.int32).reshape(n, k)
    zero = low + 8 * scale  # the op computes (q - 8) * scale + zero
    sz = torch.cat([scale, zero], -1).transpose(0, 1).contiguous().to(torch.bfloat16)
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1), sz, group


def byte_speed(batches: list[int]) -> dict:
    import torch
    import torch.nn.functional as F

    layer, layers, vocab = QWEN_05B
    gen = torch.Generator().manual_seed(0)
    weights = [
        torch.randn(o, i, generator=gen).div_(i**0.5).to(torch.bfloat16) for _ in range(layers) for o, i in layer
    ] + [torch.randn(vocab, 896, generator=gen).div_(30).to(torch.bfloat16)]
    forms = {
        "bf16": [w for w in weights],
        "w8": [],
        "w4": [],
    }
    for w in weights:
        scale = w.float().abs().amax(dim=1).clamp_min(1e-12) / 127
        forms["w8"].append(((w.float() / scale[:, None]).round().to(torch.int8), scale.to(torch.bfloat16)))
        forms["w4"].append(int4_pack(w))
    nbytes = {
        "bf16": sum(w.numel() * 2 for w in weights),
        "w8": sum(q.numel() + s.numel() * 2 for q, s in forms["w8"]),
        "w4": sum(q.numel() + sz.numel() * 2 for q, sz, _ in forms["w4"]),
    }
    flat = {name: torch.ones(n // 4, dtype=torch.float32) for name, n in nbytes.items()}  # touched pages
    calls = {
        "bf16": lambda x: [F.linear(x[w.shape[1]], w) for w in forms["bf16"]],
        "w8": lambda x: [torch._weight_int8pack_mm(x[q.shape[1]], q, s) for q, s in forms["w8"]],
        "w4": lambda x: [
            torch.ops.aten._weight_int4pack_mm_for_cpu(x[q.shape[1] * 2], q, g, sz) for q, sz, g in forms["w4"]
        ],
    }
    out = {"threads": torch.get_num_threads(), "weight_mb": {k: round(v / 1e6) for k, v in nbytes.items()}}
    for name, buf in flat.items():
        ms = timed(lambda buf=buf: buf.sum())
        out.setdefault("sum_over_bytes", {})[name] = {"ms": ms, "gb_s": round(nbytes[name] / ms / 1e6, 1)}
    for b in batches:
        xs = {k: torch.randn(b, k, generator=gen).to(torch.bfloat16) for k in {w.shape[1] for w in weights}}
        row = {}
        for name, call in calls.items():
            ms = timed(lambda call=call, xs=xs: call(xs))
            row[name] = {
                "ms": ms,
                "gb_s": round(nbytes[name] / ms / 1e6, 1),
                "weights_only_tok_s": round(1000 * b / ms, 1),
            }
        out[b] = row
    return out


def accuracy(loaded, tokens: int) -> dict:
    import torch
    import torch.nn.functional as F

    from engine.core import projection
    from engine.core.model_runner import DecoderRunner, KVCache, Segment

    def fake(act_levels: int | None, per_row: bool = True, bf16_act: bool = False):
        def call(self, x):
            w = self.weight.float()
            sw = w.abs().amax(1, keepdim=True).clamp_min(1e-12) / 127
            wq = (w / sw).round() * sw
            if bf16_act:
                x = x.to(torch.bfloat16).float()
            if act_levels:
                sx = (x.abs().amax(1, keepdim=True) if per_row else x.abs().amax()).clamp_min(1e-8) / act_levels
                x = (x / sx).round() * sx
            return F.linear(x, wq, self.bias)

        return call

    def real_w8a8(self, x):
        if not hasattr(self, "_packed"):
            w = self.weight.float()
            s = (w.abs().amax(1).clamp_min(1e-12) / 127).double()
            q = torch.quantize_per_channel(w, s, torch.zeros(len(s), dtype=torch.long), 0, torch.qint8)
            self._packed = torch.ops.quantized.linear_prepack(q, self.bias)
        return torch.ops.quantized.linear_dynamic(x.float(), self._packed, True)

    runner = DecoderRunner(loaded.model, "cpu", 4096)

    def score(ids: list[int], cont: list[int]) -> torch.Tensor:
        cache, rows = KVCache(), []
        rows.append(runner.forward([Segment(cache, ids)])[0])
        for t in cont[:-1]:
            rows.append(runner.forward([Segment(cache, [t])])[0])
        runner.release(cache)
        return torch.stack(rows)

    refs = []
    for text in PROMPTS:
        ids, cont, cache, step = loaded.tokenizer(text)["input_ids"], [], KVCache(), None
        step = ids
        for _ in range(tokens):
            cont.append(int(runner.forward([Segment(cache, step)])[0].argmax()))
            step = [cont[-1]]
        runner.release(cache)
        refs.append((ids, cont, score(ids, cont)))
    forms = {
        "w8 (bf16 activations)": fake(None, bf16_act=True),
        "w8a8 per row": fake(127),
        "w8a8 per call, 7-bit (simulated)": fake(63, per_row=False),
        "w8a8 per call, fbgemm": real_w8a8,
    }
    plain, out = projection.Projection.__call__, {}
    try:
        for name, call in forms.items():
            projection.Projection.__call__ = call
            res = []
            for ids, cont, ref in refs:
                got = score(ids, cont)
                p, q = ref.log_softmax(-1), got.log_softmax(-1)
                res.append(
                    {
                        "top1": round((ref.argmax(-1) == got.argmax(-1)).float().mean().item(), 3),
                        "kl": round((p.exp() * (p - q)).sum(-1).mean().item(), 4),
                    }
                )
            out[name] = res
    finally:
        projection.Projection.__call__ = plain
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="1,4,16,32")
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--shape", choices=("smollm2", "qwen0.5b"), default="smollm2")
    args = ap.parse_args()
    import torch

    if args.shape == "qwen0.5b":
        with torch.inference_mode():
            print(json.dumps(byte_speed([int(b) for b in args.batch.split(",")]), indent=1))
        return

    from engine import models

    with torch.inference_mode():  # this block only: nothing process-wide
        loaded = models.load("", models.cache_root(""), "cpu", torch.float32)
        result = {"accuracy": accuracy(loaded, args.tokens)}
        result["speed"] = speed(loaded.model, [int(b) for b in args.batch.split(",")])
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
