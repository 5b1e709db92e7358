"""TTFT with a shared ~1,000-token system prompt: first request (cold) vs later ones (prefix cache hit).

    .venv/bin/python bench/prefix_cache.py [--runs 3]

Runs through the real ChatService in-process; TTFT is the engine's own first-token time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: F401  (process settings before torch)

SYSTEM = " ".join(f"Rule {i}: answer politely, briefly and truthfully." for i in range(110))


async def ttft(service, question: str) -> tuple[float, int, int]:
    from engine.protocol.request import parse_chat_request

    body = {
        "model": service.served_name,
        "max_tokens": 4,
        "temperature": 0,
        "stream": True,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
    }
    first, usage = None, None
    async for chunk in await service.start(parse_chat_request(body)):
        if chunk.timeline and chunk.timeline.token_times_ms and first is None:
            first = chunk.timeline.token_times_ms[0]
        if chunk.usage is not None and not chunk.choices:
            usage = chunk.usage
    return first, usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from app import build_service, settings_from

    cold, warm = [], []
    for run in range(args.runs):
        service = build_service(settings_from([], environ={}))  # a fresh, empty prefix cache
        t0, prompt, cached0 = asyncio.run(ttft(service, f"Question {run}: what is the capital of France?"))
        t1, _, cached1 = asyncio.run(ttft(service, f"Question {run}: name a primary colour."))
        service.engine.shutdown()
        cold.append(t0)
        warm.append(t1)
        print(
            json.dumps(
                {
                    "prompt_tokens": prompt,
                    "cold_ttft_ms": round(t0),
                    "cold_cached": cached0,
                    "warm_ttft_ms": round(t1),
                    "warm_cached": cached1,
                }
            )
        )
    print(json.dumps({"speedup_median": round(statistics.median(cold) / statistics.median(warm), 1)}))


if __name__ == "__main__":
    main()
