"""Soak: hold a server at a fixed concurrency for a while and watch its memory.

    .venv/bin/python bench/soak.py --url http://127.0.0.1:7860 --concurrency 32 --minutes 10

It runs the load generator's streaming clients (bench/loadgen.py) back to back for --minutes and samples the
server's RSS every --every seconds. It reports the RSS after the first minute (warm: caches and allocator pools
filled), the last and the largest sample, and the growth from the warm sample to the end, with requests served,
failures and output tokens/s. Growth near zero means nothing accumulates per request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from urllib.parse import urlparse

import httpx
from loadgen import PROMPTS, one, server_rss_mib


async def soak(args: argparse.Namespace) -> dict:
    port = urlparse(args.url).port or 80
    stop_at = time.monotonic() + args.minutes * 60
    served = failed = tokens = 0
    samples: list[tuple[float, float]] = []
    limits = httpx.Limits(max_connections=args.concurrency + 4, max_keepalive_connections=args.concurrency + 4)
    start = time.monotonic()

    async def worker(i: int, client: httpx.AsyncClient) -> None:
        nonlocal served, failed, tokens
        k = i
        while time.monotonic() < stop_at:
            r = await one(client, args, PROMPTS[k % len(PROMPTS)])
            k += args.concurrency
            served += 1
            failed += not r.ok
            tokens += r.tokens

    async def sampler() -> None:
        while time.monotonic() < stop_at:
            rss = server_rss_mib(args.server_pid, port)
            if rss is not None:
                samples.append((time.monotonic() - start, rss))
            await asyncio.sleep(args.every)

    async with httpx.AsyncClient(base_url=args.url, timeout=600, limits=limits, headers=args.headers) as client:
        await asyncio.gather(sampler(), *(worker(i, client) for i in range(args.concurrency)))
    wall = time.monotonic() - start
    warm = next((rss for t, rss in samples if t >= 60), samples[-1][1] if samples else None)
    last = samples[-1][1] if samples else None
    return {
        "concurrency": args.concurrency,
        "minutes": args.minutes,
        "requests": served,
        "failed": failed,
        "output_tok_s": round(tokens / wall, 1),
        "rss_warm_mib": warm,
        "rss_end_mib": last,
        "rss_max_mib": max((rss for _, rss in samples), default=None),
        "growth_after_warm_mib": None if warm is None or last is None else round(last - warm),
        "samples": [(round(t), rss) for t, rss in samples],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:7860")
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--every", type=float, default=10)
    ap.add_argument("--server-pid", type=int)
    ap.add_argument("--api-key")
    args = ap.parse_args()
    args.headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    print(json.dumps(asyncio.run(soak(args))))


if __name__ == "__main__":
    main()
