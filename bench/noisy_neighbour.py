"""Throughput with and without a busy neighbour on one core, for any OpenAI-compatible server.

    .venv/bin/python bench/noisy_neighbour.py --url http://127.0.0.1:7860 --model SmolLM2-135M-Instruct \
        [--concurrency 1,16] [--max-tokens 64] [--core N] [--label NAME] [--json out.jsonl]

A laptop demo has the browser on the same cores as the server; a shared Space has other tenants. This runs
`loadgen.py`'s levels twice: on the machine as it is, then with a plain busy loop pinned to one core (the last
by default), a separate process that stops by itself after the run's time budget, and reports each level's
aggregate tokens/s, single-stream decode speed and TTFT in both phases and their ratio (busy / idle). Run it
once per server, with the same flags, to compare servers the same way in the same window.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from loadgen import add_load_args, level, run_level  # bench/ is not a package: its folder is on the path above

BUSY = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


@contextlib.contextmanager
def busy_core(core: int, seconds: float) -> Iterator[None]:
    """A process spinning on `core` for at most `seconds` (ended sooner when the block exits)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", BUSY.format(seconds=seconds)], preexec_fn=lambda: os.sched_setaffinity(0, {core})
    )
    try:
        time.sleep(0.5)  # let it take the core
        yield
    finally:
        proc.kill()
        proc.wait()


def run_levels(args: argparse.Namespace, levels: list[int]) -> list[dict]:
    return [run_level(args, c) for c in levels]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_load_args(ap, "1,16", 64)
    ap.add_argument("--core", type=int, default=max(os.sched_getaffinity(0)), help="the core the busy loop takes")
    ap.add_argument("--budget-s", type=float, default=900, help="the busy loop ends by itself after this long")
    ap.add_argument("--warmup", type=int, default=4, help="requests sent first, not measured")
    ap.add_argument("--label", default="")
    ap.add_argument("--json", help="append the report to this JSON-lines file")
    args = ap.parse_args()
    args.headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    levels = [int(x) for x in args.concurrency.split(",")]
    warm = argparse.Namespace(**vars(args))
    warm.requests_per_level = args.warmup
    asyncio.run(level(warm, 1))
    idle = run_levels(args, levels)
    with busy_core(args.core, args.budget_s):
        busy = run_levels(args, levels)
    report = {"label": args.label, "url": args.url, "busy_core": args.core, "levels": []}
    for a, b in zip(idle, busy):
        row = {
            "concurrency": a["concurrency"],
            "idle_tok_s": a["output_tok_s"],
            "busy_tok_s": b["output_tok_s"],
            "ratio": round(b["output_tok_s"] / a["output_tok_s"], 3) if a["output_tok_s"] else None,
            "idle_single_stream_tok_s": a["single_stream_tok_s"],
            "busy_single_stream_tok_s": b["single_stream_tok_s"],
            "idle_ttft_p50_s": a["ttft_p50_s"],
            "busy_ttft_p50_s": b["ttft_p50_s"],
            "failed": a["failed"] + b["failed"],
        }
        report["levels"].append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
