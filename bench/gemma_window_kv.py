"""Gemma 3 270M's KV held per sequence at long context: the sliding layers' own pool (engine/core/window_kv.py)
against one pool for every layer, as it was before.

    .venv/bin/python bench/gemma_window_kv.py [--context 512,2048,8192] [--steps 4] [--dtype fp32|bf16]

Per context length: one sequence prefilled in 512-token chunks (the server's default is 256) and decoded
`--steps` tokens on the lean runner; the pages it holds in each pool and their bytes, against what one pool of
every layer holds for the same positions (its main pages x every layer's bytes); how many such sequences 1 GiB
of KV holds either way; and the median decode step. Resident memory of a server under long prompts, before and
after, is loadgen.py's `--prompt-tokens` (bench/README.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402,F401  (process settings before torch)

GIB = 1 << 30


def main() -> None:
    import torch

    from engine.core.kv import PAGE
    from engine.core.model_runner import DecoderRunner, KVCache, Segment, make_runner
    from engine.models import cache_root, load

    ap = argparse.ArgumentParser()
    ap.add_argument("--context", default="512,2048,8192")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    args = ap.parse_args()
    contexts = [int(c) for c in args.context.split(",")]
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = load("gemma-3-270m", cache_root(), "cpu", dtype).model
    runner = make_runner(model, "cpu", max(contexts) + 2 * PAGE * (args.steps + 2), seqs=1, step_tokens=512)
    assert isinstance(runner, DecoderRunner) and runner.window is not None
    full, sliding = runner.pool.bytes_per_token, runner.window.pool.bytes_per_token  # one position's KV in each pool
    print(
        f"threads {torch.get_num_threads()}, ops {runner.ops.name}, {sum(runner.sliding)} sliding layers of "
        f"{len(runner.layers)}, window {runner.window.window}, KV bytes a position: {full} full layers, {sliding} "
        f"sliding ({runner.dtype})"
    )
    print(
        "| context | main pages | window pages | KV held | one pool of every layer | held | sequences per GiB: "
        "now / before | decode ms/step |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in contexts:
        prompt = [(7 * j) % 200_000 + 10 for j in range(n)]
        cache = KVCache()
        with torch.inference_mode():
            for a in range(0, n, 512):
                runner.forward([Segment(cache, prompt[a : a + 512], want_logits=a + 512 >= n)])
            times = []
            for step in range(args.steps):
                t0 = time.perf_counter()
                runner.forward([Segment(cache, [100 + step])])
                times.append((time.perf_counter() - t0) * 1000)
        main, window = len(cache.pages), runner.window.held(cache)
        held = (main * full + window * sliding) * PAGE
        before = main * (full + sliding) * PAGE
        print(
            f"| {n} | {main} | {window} | {held / 2**20:.1f} MiB | {before / 2**20:.1f} MiB | "
            f"{100 * held / before:.0f}% | {GIB // held} / {GIB // before} | "
            f"{statistics.median(times):.0f} |"
        )
        runner.release(cache)


if __name__ == "__main__":
    main()
