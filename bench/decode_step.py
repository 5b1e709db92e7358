"""Decode-step time of the model runner alone (no HTTP, no sampling), at several batch sizes.

    .venv/bin/python bench/decode_step.py [--batch 1,8,16,32] [--context 200] [--steps 10]

Each sequence gets a `--context`-token prompt, then all of them decode together; it reports ms per step and
tokens/s per batch size, and the process's CPU time per step (steadier than wall time on a shared machine). Compare two versions of the runner by running this in each checkout back to back
(the machine is shared: only ratios from the same window mean much).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine  # noqa: F401  (process settings before torch)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="1,8,16,32")
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch

    from engine import models
    from engine.core.model_runner import KVCache, Segment, make_runner

    # This script is its own process's composition root: the thread count and grad mode are set here, on purpose.
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    loaded = models.load("", models.cache_root(""), "cpu", torch.float32)
    runner = make_runner(loaded.model, "cpu")
    prompt = list(range(100, 100 + args.context))
    out = {}
    with torch.inference_mode():
        for batch in (int(b) for b in args.batch.split(",")):
            caches = [KVCache() for _ in range(batch)]
            for c in caches:
                runner.forward([Segment(c, prompt)])
            step = [Segment(c, [7]) for c in caches]
            for _ in range(2):
                runner.forward(step)
            t, cpu = time.perf_counter(), time.process_time()
            for _ in range(args.steps):
                runner.forward(step)
            ms = (time.perf_counter() - t) / args.steps * 1000
            cpu_ms = (time.process_time() - cpu) / args.steps * 1000
            out[batch] = {
                "ms_per_step": round(ms, 1),
                "tok_s": round(batch * 1000 / ms, 1),
                "cpu_ms_per_step": round(cpu_ms, 1),
            }
            for c in caches:
                getattr(runner, "release", lambda c: None)(c)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
