"""Gemma 3 270M decode steps on the lean runner (engine/core/gemma.py) against the HF-forward runner it replaced.

    .venv/bin/python bench/gemma_runner.py [--batch 1,16] [--context 200] [--steps 8] [--rounds 2]

Two copies of the model (the lean runner rebinds its matrices to bf16 copies), the same sequences on each: per
batch size, `--rounds` rounds alternating lean / HF of `--steps` decode steps after a `--context`-token prompt
per sequence; the median ms per step of each and their ratio. Only the ratio means much on a shared machine.
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


def main() -> None:
    import torch

    from engine.core.model_runner import DecoderRunner, HFRunner, KVCache, Segment
    from engine.models import cache_root, load

    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    cache = cache_root()
    runners = {
        "lean": DecoderRunner(load("gemma-3-270m", cache, "cpu", torch.float32).model, "cpu", 32768),
        "hf": HFRunner(load("gemma-3-270m", cache, "cpu", torch.float32).model, "cpu"),
    }
    print(f"threads {torch.get_num_threads()}, lean ops: {runners['lean'].ops.chosen}")
    for batch in (int(b) for b in args.batch.split(",")):
        times: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(args.rounds):
            for name, runner in runners.items():
                with torch.inference_mode():
                    caches = [KVCache() for _ in range(batch)]
                    for i, c in enumerate(caches):
                        runner.forward([Segment(c, [(7 * i + j) % 5000 + 10 for j in range(args.context)])])
                    started = time.perf_counter()
                    for step in range(args.steps):
                        runner.forward([Segment(c, [100 + step]) for c in caches])
                    times[name].append((time.perf_counter() - started) / args.steps * 1000)
                    for c in caches:
                        runner.release(c)
        lean, hf = statistics.median(times["lean"]), statistics.median(times["hf"])
        print(
            f"batch {batch}: lean {lean:.0f} ms/step ({batch / lean * 1000:.1f} tok/s), HF forward {hf:.0f} "
            f"ms/step ({batch / hf * 1000:.1f} tok/s), lean {hf / lean:.2f}x"
        )


if __name__ == "__main__":
    main()
