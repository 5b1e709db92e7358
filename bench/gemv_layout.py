"""Is a lone stream's decode bound by memory bandwidth or by the BLAS? The matmuls of one decode step, three ways.

    .venv/bin/python bench/gemv_layout.py [--batch 1,2,4,8,16,32]

With SmolLM2's 30 layers of projection shapes (distinct random fp32 weights, 478 MB, so they stream from memory
as in a real step), at each batch size: the runner's way (weight [out, in]; F.linear for one row, w @ x.T for
more), the weight stored transposed ([in, out], x @ w_t), and, for one row, the vocabulary projection split over
two Python threads. For reference it times a plain sum over the same bytes on one and on two threads: what the
memory can deliver. Reported as ms and GB/s of weights read.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine  # noqa: F401  (process settings before torch)

SHAPES = ((576, 1728), (576, 576), (576, 3072), (1536, 576))  # (in, out): qkv, o, gate_up, down
LAYERS = 30


def timed(fn, repeat: int = 8) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t) / repeat * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="1,2,4,8,16,32")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    torch.set_grad_enabled(False)
    weights = [torch.randn(n, k) * 0.02 for _ in range(LAYERS) for k, n in SHAPES]
    transposed = [w.t().contiguous() for w in weights]
    mb = sum(w.numel() for w in weights) * 4 / 1e6
    flat = torch.cat([w.flatten() for w in weights])
    out: dict = {"weights_mb": round(mb)}
    # This script is its own process's composition root: it sets torch's thread count on purpose, per measurement.
    for threads in (1, 2):
        torch.set_num_threads(threads)
        ms = timed(flat.sum)
        out[f"sum_{threads}_threads"] = {"ms": round(ms, 1), "gb_s": round(mb / ms, 1)}
    torch.set_num_threads(2)
    for b in (int(x) for x in args.batch.split(",")):
        xs = {k: torch.randn(b, k) for k, _ in SHAPES}

        def runner_way(xs=xs, b=b) -> None:
            for w in weights:
                x = xs[w.shape[1]]
                F.linear(x, w) if b == 1 else torch.mm(w, x.t()).t().contiguous()

        def transposed_way(xs=xs) -> None:
            for wt in transposed:
                torch.mm(xs[wt.shape[0]], wt)

        row = {}
        for name, fn in (("runner [out,in]", runner_way), ("transposed [in,out]", transposed_way)):
            ms = timed(fn)
            row[name] = {"ms": round(ms, 1), "gb_s": round(mb / ms, 1)}
        out[f"batch_{b}"] = row
    head, x = torch.randn(49152, 576) * 0.02, torch.randn(1, 576)
    half = head.shape[0] // 2
    with concurrent.futures.ThreadPoolExecutor(1) as pool:

        def split() -> None:
            other = pool.submit(F.linear, x, head[:half])
            F.linear(x, head[half:])
            other.result()

        out["vocab_projection_1_row"] = {
            "one_call_ms": round(timed(lambda: F.linear(x, head)), 1),
            "two_threads_ms": round(timed(split), 1),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
