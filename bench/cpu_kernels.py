"""What the lean runner's CPU kernels (engine/core/cpu_kernels.cpp) buy over the torch ops they replace.

    .venv/bin/python bench/cpu_kernels.py [--batch 1,8,16,32,288] [--context 200] [--shape smollm2|qwen0.5b]

1. OpenMP wake-up: the cost of one small parallel region with the workers put to sleep the moment a region ends
   (GOMP_SPINCOUNT=0, what OMP_WAIT_POLICY=PASSIVE alone gives) and with the engine's brief spin first (20000),
   each measured in a fresh process because libgomp reads the setting once.
2. Projections: SmolLM2-135M's 30 layers (qkv, o, gate/up, down; distinct weights, so they stream from memory
   as in a real step; `--shape qwen0.5b`: Qwen2.5-0.5B's 24) plus the vocabulary projection, per batch size:
   float32 weights through the BLAS (the runner's torch path) against bf16 weights through `linear_bf16` of each
   instruction-set build this CPU runs (AVX2, AVX-512), in ms and GB/s of weights read; bf16 weights widened per
   call then the BLAS (what the runner does past KERNEL_ROWS rows); and torch's own bf16 matmul (oneDNN; bf16
   activations too, so not the float32 math the kernel keeps: the library to beat where bf16 inputs are fine).
3. Decode attention at `--context` tokens per sequence: gather the pages then SDPA (the torch path) against
   `decode_attention` reading them in place, per batch size, for one layer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402,F401  (process settings before torch)

# Run in a child process of its own (libgomp reads GOMP_SPINCOUNT once), which sizes its pool on purpose.
WAKE_SNIPPET = """
import sys, time
sys.path.insert(0, {root!r})
import engine, torch
from engine.core.cpu_kernels import kernels
torch.set_num_threads(2)  # the child's own composition root: 2 threads, as measured
k = kernels()
w, x = torch.randn(16, 64).to(torch.bfloat16), torch.randn(1, 64)
for _ in range(100):
    k.linear_bf16(x, w)
t = time.perf_counter()
for _ in range(2000):
    k.linear_bf16(x, w)
print((time.perf_counter() - t) / 2000 * 1e6)
"""


# Per model shape: the (out, in) matrices of one layer (qkv, o, gate/up, down), the layers, the vocabulary.
SHAPES = {
    "smollm2": ([(960, 576), (576, 576), (3072, 576), (576, 1536)], 30, 49152),
    "qwen0.5b": ([(1152, 896), (896, 896), (9728, 896), (896, 4864)], 24, 151936),
}


def timed(fn, repeat: int) -> float:
    fn()
    fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def wake_cost_us(spincount: str) -> float:
    env = {**os.environ, "GOMP_SPINCOUNT": spincount}
    out = subprocess.run(
        [sys.executable, "-c", WAKE_SNIPPET.format(root=str(ROOT))], env=env, capture_output=True, text=True, check=True
    )
    return round(float(out.stdout.strip().splitlines()[-1]), 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="1,8,16,32,288")
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="smollm2")
    ap.add_argument("--skip-wake", action="store_true", help="leave out the OpenMP wake-up measurement")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    from engine.core import cpu_kernels

    k = cpu_kernels.kernels()
    if k is None:
        sys.exit("the CPU kernels cannot run here (see the log line above)")
    builds = {isa: cpu_kernels.load(isa) for isa in cpu_kernels.supported_isas()}
    # This script is its own composition root: it sizes torch's pool on purpose, to the 2 cores every figure in
    # bench/README.md was measured on (the engine's steps use the same count on such a machine).
    torch.set_num_threads(2)
    result: dict = {"cpu_flags": sorted(f for f in cpu_kernels.cpu_flags() if f.startswith(("avx", "amx", "fma")))}
    if not args.skip_wake:
        result["parallel_region_us"] = {
            "GOMP_SPINCOUNT=0": wake_cost_us("0"),
            "GOMP_SPINCOUNT=20000": wake_cost_us("20000"),
        }

    shapes, n_layers, vocab = SHAPES[args.shape]
    hidden = shapes[1][1]
    layers = [[torch.randn(o, i).to(torch.bfloat16) for o, i in shapes] for _ in range(n_layers)]
    layers32 = [[w.float() for w in layer] for layer in layers]
    head = torch.randn(vocab, hidden).to(torch.bfloat16)
    head32 = head.float()
    bf16_bytes = (sum(w.numel() for w in layers[0]) * n_layers + head.numel()) * 2
    proj = {}
    for b in [int(v) for v in args.batch.split(",")]:
        widths = {w.shape[1] for w in layers[0]}
        xs = {i: torch.randn(b, i) for i in widths}
        xs16 = {i: x.to(torch.bfloat16) for i, x in xs.items()}

        def blas(b=b, xs=xs):
            for layer in layers32:
                for w in layer:
                    F.linear(xs[w.shape[1]], w) if b == 1 else torch.mm(w, xs[w.shape[1]].t())
            F.linear(xs[hidden], head32) if b == 1 else torch.mm(head32, xs[hidden].t())

        def kernel(kern, xs=xs):
            for layer in layers:
                for w in layer:
                    kern.linear_bf16(xs[w.shape[1]], w)
            kern.linear_bf16(xs[hidden], head)

        def widen(xs=xs):  # the runner beyond KERNEL_ROWS: widen each layer's matrix, then the BLAS
            for layer in layers:
                for w in layer:
                    F.linear(xs[w.shape[1]], w.float())
            k.linear_bf16(xs[hidden], head)

        def onednn_bf16(xs16=xs16):
            for layer in layers:
                for w in layer:
                    F.linear(xs16[w.shape[1]], w)
            F.linear(xs16[hidden], head)

        reps = 3 if b <= 64 else 1
        t_blas = timed(blas, reps)
        row = {"fp32_blas_ms": round(t_blas * 1e3, 1), "fp32_blas_gbs": round(2 * bf16_bytes / t_blas / 1e9, 1)}
        for isa, kern in builds.items():
            t = timed(lambda kern=kern: kernel(kern), reps)
            row[f"bf16_kernel_{isa}_ms"] = round(t * 1e3, 1)
            row[f"bf16_kernel_{isa}_gbs"] = round(bf16_bytes / t / 1e9, 1)
        row["bf16_widened_blas_ms"] = round(timed(widen, reps) * 1e3, 1)
        row["torch_bf16_onednn_ms"] = round(timed(onednn_bf16, reps) * 1e3, 1)
        proj[b] = row
    result[f"projections_{n_layers}_layers_and_vocab_{args.shape}"] = proj

    page, kv, heads, hd = 16, 3, 9, 64
    attn = {}
    for b in [int(v) for v in args.batch.split(",")]:
        width = -(-(args.context + 1) // page)
        pool_k, pool_v = torch.randn(b * width + 1, page, kv, hd), torch.randn(b * width + 1, page, kv, hd)
        table = (torch.randperm(b * width) + 1).view(b, width)
        lens = torch.full((b,), args.context + 1)
        q = torch.randn(b, heads, hd)
        mask = (torch.arange(width * page) < lens.unsqueeze(1))[:, None, None]
        flat, t32, l32 = table.flatten(), table.to(torch.int32), lens.to(torch.int32)

        def gather_sdpa(b=b, pool_k=pool_k, pool_v=pool_v, q=q, mask=mask, flat=flat, width=width):
            keys = pool_k.index_select(0, flat).view(b, width * page, kv, hd).transpose(1, 2)
            values = pool_v.index_select(0, flat).view(b, width * page, kv, hd).transpose(1, 2)
            return F.scaled_dot_product_attention(q.unsqueeze(2), keys, values, attn_mask=mask, enable_gqa=True)

        t_torch = timed(gather_sdpa, 30)
        t_kernel = timed(
            lambda q=q, pool_k=pool_k, pool_v=pool_v, t32=t32, l32=l32: k.decode_attention(q, pool_k, pool_v, t32, l32),
            30,
        )
        attn[b] = {
            "gather_sdpa_us": round(t_torch * 1e6),
            "kernel_us": round(t_kernel * 1e6),
            "speedup": round(t_torch / t_kernel, 2),
        }
    result[f"decode_attention_one_layer_context_{args.context}"] = attn
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
