"""KV pages in float32 against bf16 (--kv-cache-dtype), same model, same run: decode-step time and tokens/s of the
model runner alone (no HTTP, no sampling) at a long context, and the prefill of one such prompt.

    .venv/bin/python bench/kv_dtype.py [--batch 1,16] [--context 1024,2048] [--steps 8] [--rounds 3]
                                       [--isa avx2] [--no-kernels]

The bundled SmolLM2-135M is loaded twice, once per KV dtype. Each sequence's `--context`-token prompt is prefilled
once (in chunks of 256 tokens, as the engine's --max-batched-tokens does; timed) and forked to the batch size; then
the two runners decode in turns, `--rounds` times `--steps` steps each, so a busy neighbour slows both alike; the
best round per runner is reported (ms per step, tokens/s, and the process's CPU time per step, steadier than wall
time on a shared machine), with bf16's speed-up. `--isa avx2` runs the AVX2 build
of the kernels (PLAYGROUND_CPU_ISA), `--no-kernels` the torch reference. First, decode attention alone (the 30
layers' calls of a step, best of several: steadier than whole steps on a busy machine) over float32 and bf16 pages,
for each kernel build the CPU runs. Prints one JSON object, with the CPU's kernel-relevant flags.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine  # noqa: F401  (process settings before torch; the kernels read PLAYGROUND_CPU_* on first use)

FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_bf16", "avx512_vnni")


def attention_only(batches: list[int], contexts: list[int], reps: int) -> list[dict]:
    """Decode attention alone, the step's 30 layers of SmolLM2's shape (9 query heads, 3 KV heads of 64) over pools
    of float32 and of bf16 pages, each kernel build this CPU runs: the best of `reps` steps (the least disturbed by
    a neighbour), in ms per step."""
    import torch

    from engine.core import cpu_kernels
    from engine.core.kv import PAGE

    layers, heads, kv, d = 30, 9, 3, 64
    rows = []
    for isa in cpu_kernels.supported_isas():
        kern = cpu_kernels.load(isa)
        for context in contexts:
            for batch in batches:
                width = -(-context // PAGE)
                pages = batch * width + 1
                table = (torch.randperm(pages - 1)[: batch * width] + 1).view(batch, width).to(torch.int32)
                lens = torch.full((batch,), context, dtype=torch.int32)
                q = torch.randn(batch, heads, d)
                best = {}
                for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
                    k = torch.randn(layers, pages, PAGE, kv, d).to(dtype)
                    v = torch.randn(layers, pages, PAGE, kv, d).to(dtype)
                    times = []
                    for _ in range(reps):
                        t = time.perf_counter()
                        for li in range(layers):
                            kern.decode_attention(q, k[li], v[li], table, lens)
                        times.append((time.perf_counter() - t) * 1000)
                    best[name] = min(times)
                    del k, v
                rows.append(
                    {
                        "isa": isa,
                        "context": context,
                        "batch": batch,
                        "fp32_attention_ms": round(best["fp32"], 2),
                        "bf16_attention_ms": round(best["bf16"], 2),
                        "bf16_speedup": round(best["fp32"] / best["bf16"], 2),
                    }
                )
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--context", default="1024,2048")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--isa", default="", help="avx2 or avx512: the kernel build to run (default: the best)")
    ap.add_argument("--no-kernels", action="store_true", help="the torch reference ops instead of the kernels")
    ap.add_argument("--attention-only", action="store_true", help="only the attention kernels' part")
    args = ap.parse_args()
    if args.isa:
        os.environ["PLAYGROUND_CPU_ISA"] = args.isa
    if args.no_kernels:
        os.environ["PLAYGROUND_CPU_KERNELS"] = "0"
    import torch

    from engine import models
    from engine.core import cpu_kernels
    from engine.core.model_runner import KVCache, Segment, make_runner

    # This script is its own composition root: the thread count and grad mode are set here, on purpose.
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    batches = [int(b) for b in args.batch.split(",")]
    contexts = [int(c) for c in args.context.split(",")]
    kv_tokens = max(batches) * (max(contexts) + 64) + 1024
    kern = cpu_kernels.kernels()
    out: dict = {
        "cpu_flags": sorted(set(FLAGS) & cpu_kernels.cpu_flags()),
        "kernels": kern.isa if kern is not None else "off (torch reference)",
        "threads": args.threads,
        "attention": attention_only(batches, contexts, args.rounds * 3) if kern is not None else [],
    }
    if args.attention_only:
        print(json.dumps(out))
        return
    runners = {}
    for name in ("fp32", "bf16"):
        loaded = models.load("", models.cache_root(""), "cpu", torch.float32)
        runners[name] = make_runner(loaded.model, "cpu", kv_tokens, kv_cache_dtype=name)
    out["kv_bytes_per_token"] = {n: r.pool.bytes_per_token for n, r in runners.items()}
    out["runs"] = []
    with torch.inference_mode():
        for context in contexts:
            prompt = [100 + (i * 37) % 20000 for i in range(context)]
            seeds, prefill_ms, prefill_cpu_ms = {}, {}, {}
            for name, r in runners.items():
                cache = KVCache()
                t, cpu = time.perf_counter(), time.process_time()
                for a in range(0, context, 256):
                    r.forward([Segment(cache, prompt[a : a + 256], want_logits=a + 256 >= context)])
                prefill_ms[name] = round((time.perf_counter() - t) * 1000, 1)
                prefill_cpu_ms[name] = round((time.process_time() - cpu) * 1000, 1)
                seeds[name] = cache
            for batch in batches:
                caches = {n: [seeds[n]] + [r.fork(seeds[n]) for _ in range(batch - 1)] for n, r in runners.items()}
                best = {n: float("inf") for n in runners}
                best_cpu = {n: float("inf") for n in runners}
                for _ in range(args.rounds):
                    for name, r in runners.items():
                        step = [Segment(c, [7]) for c in caches[name]]
                        r.forward(step)  # warm
                        t, cpu = time.perf_counter(), time.process_time()
                        for _ in range(args.steps):
                            r.forward(step)
                        best[name] = min(best[name], (time.perf_counter() - t) / args.steps * 1000)
                        best_cpu[name] = min(best_cpu[name], (time.process_time() - cpu) / args.steps * 1000)
                        for c in caches[name]:
                            c.length -= args.steps + 1  # the same context every round
                out["runs"].append(
                    {
                        "context": context,
                        "batch": batch,
                        **{f"{n}_ms_per_step": round(best[n], 1) for n in runners},
                        **{f"{n}_tok_s": round(batch * 1000 / best[n], 1) for n in runners},
                        "bf16_speedup": round(best["fp32"] / best["bf16"], 2),
                        **{f"{n}_cpu_ms_per_step": round(best_cpu[n], 1) for n in runners},
                        "bf16_cpu_speedup": round(best_cpu["fp32"] / best_cpu["bf16"], 2),
                        **({f"{n}_prefill_ms": prefill_ms[n] for n in runners} if batch == batches[0] else {}),
                        **({f"{n}_prefill_cpu_ms": prefill_cpu_ms[n] for n in runners} if batch == batches[0] else {}),
                    }
                )
                for name, r in runners.items():
                    for c in caches[name][1:]:
                        r.release(c)
                print(json.dumps(out["runs"][-1]), file=sys.stderr, flush=True)
            for name, r in runners.items():
                r.release(seeds[name])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
