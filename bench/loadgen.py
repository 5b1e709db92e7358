"""Streaming load generator for any OpenAI-compatible /v1/chat/completions server.

    .venv/bin/python bench/loadgen.py --url http://127.0.0.1:7860 --model SmolLM2-135M-Instruct \
        --concurrency 1,4,8,16,32 --max-tokens 128 [--prompt-tokens N] [--server-pid PID] [--json out.json]

At each concurrency level C it keeps C requests in flight (each client sends its next request as soon as the
previous one ends) until --requests-per-level requests have finished, then reports TTFT p50/p90, inter-token
latency p50/p99 (from the arrival times of streamed chunks, per token), aggregate output tokens/s over the
level's wall time, and the server's RSS (when --server-pid is given, or found by the port; its children counted
too) at the level's start, its peak during the level (sampled every 0.2 s) and at its end. With --prompt-tokens N
each request's message is a distinct text of about N tokens instead of a short question, different from its first
words on so no prefix cache can share it: long-context load. It also measures this machine's memory bandwidth (a
large numpy copy) so decode speed can be read against the bandwidth limit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import random
import statistics
import threading
import time
from dataclasses import dataclass, field

import httpx

PROMPTS = [
    "Tell me a story about a lighthouse keeper.",
    "Explain how a bicycle stays upright.",
    "Write a poem about autumn leaves.",
    "What are the main causes of ocean tides?",
    "Describe a day in the life of a honeybee.",
    "Give me a recipe for a simple tomato soup.",
    "Why is the sky blue? Explain for a child.",
    "Summarise the plot of a heist movie you invent.",
]

WORDS = (
    "river stone market garden window paper silver winter orange mountain letter engine yellow forest "
    "doctor island bridge candle music teacher summer basket pencil cloud village rabbit kitchen harbor "
    "little quiet green bright heavy early simple broken gentle sudden walks brings finds keeps opens "
    "carries watches builds remembers follows under above behind between before after"
)
_request_ids = itertools.count()


def long_prompt(tokens: int) -> str:
    """A text of about `tokens` tokens (the common words above are one token each in SmolLM2's and Gemma's
    vocabularies), distinct per call from the first word on: a request number, then words from its own seed."""
    k = next(_request_ids)
    words = random.Random(k).choices(WORDS.split(), k=max(1, tokens - 8))
    return f"Request {k}: " + " ".join(words)


@dataclass
class Result:
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    tokens: int = 0
    ok: bool = True
    span: float = 0.0  # seconds from the first streamed token to the last


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q / 100 * len(values)))]


async def one(client: httpx.AsyncClient, args: argparse.Namespace, prompt: str) -> Result:
    body = {
        "model": args.model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": args.max_tokens,
        "temperature": 0.0,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        **getattr(args, "extra_body", {}),  # what a peer needs beyond these (llama.cpp: a logit_bias on EOS)
    }
    res = Result()
    start = time.perf_counter()
    last, first, chunks, finish = None, None, 0, None
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            await resp.aread()
            return Result(ok=False)
        async for line in resp.aiter_lines():
            if not line.startswith("data:") or line.strip() == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if chunk.get("usage") and not chunk.get("choices"):
                res.tokens = chunk["usage"]["completion_tokens"]
                continue
            choice = (chunk.get("choices") or [{}])[0]
            finish = choice.get("finish_reason") or finish
            delta = choice.get("delta", {})
            if not delta.get("content"):
                continue
            now = time.perf_counter()
            chunks += 1
            if last is None:
                res.ttft, first = now - start, now
            else:
                res.itl.append(now - last)
            last = now
    if not res.tokens:  # a server that ignores include_usage (llama.cpp): max_tokens if it ran to the length limit,
        # else its content chunks, one token each (a chunk may hold more: text held back for a stop string)
        res.tokens = args.max_tokens if finish == "length" else chunks
    res.span = (last - first) if last is not None and first is not None else 0.0
    return res


async def level(args: argparse.Namespace, concurrency: int) -> dict:
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    results: list[Result] = []
    todo = max(args.requests_per_level, concurrency)
    async with httpx.AsyncClient(base_url=args.url, timeout=600, limits=limits, headers=args.headers) as client:
        issued = 0

        async def worker() -> None:
            nonlocal issued
            while issued < todo:
                issued += 1
                prompt = long_prompt(args.prompt_tokens) if args.prompt_tokens else PROMPTS[issued % len(PROMPTS)]
                results.append(await one(client, args, prompt))

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    good = [r for r in results if r.ok]
    itl = [x for r in good for x in r.itl]
    return {
        "concurrency": concurrency,
        "requests": len(results),
        "failed": len(results) - len(good),
        "ttft_p50_s": round(pct([r.ttft for r in good], 50), 3),
        "ttft_p90_s": round(pct([r.ttft for r in good], 90), 3),
        "itl_p50_ms": round(pct(itl, 50) * 1000, 1),
        "itl_p99_ms": round(pct(itl, 99) * 1000, 1),
        "output_tok_s": round(sum(r.tokens for r in good) / wall, 1),
        "single_stream_tok_s": round(statistics.median([len(r.itl) / sum(r.itl) for r in good if r.itl] or [0.0]), 1),
        # the same by tokens rather than chunks: (tokens - 1) / (last token's arrival - first's), per request
        "decode_tok_s": round(statistics.median([(r.tokens - 1) / r.span for r in good if r.span > 0] or [0.0]), 1),
        "tokens_per_request": sorted({r.tokens for r in good}),
    }


def run_level(args: argparse.Namespace, concurrency: int) -> dict:
    """One level with --requests-per-level requests (default: 2x the concurrency, at least 4)."""
    level_args = argparse.Namespace(**vars(args))
    level_args.requests_per_level = args.requests_per_level or max(4, 2 * concurrency)
    return asyncio.run(level(level_args, concurrency))


def server_rss_mib(pid: int | None, port: int) -> float | None:
    """The server's RSS with its children's, MiB (the process is --server-pid or the one listening on the port)."""
    try:
        import psutil
    except ImportError:
        return None
    if pid is None:
        for conn in psutil.net_connections("tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == "LISTEN" and conn.pid:
                pid = conn.pid
                break
    if pid is None:
        return None
    proc = psutil.Process(pid)
    rss = 0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):  # a child that ended between the listing and the reading
            rss += p.memory_info().rss
    return round(rss / 2**20)


class PeakRss(threading.Thread):
    """Samples the server's RSS every `every` seconds until stopped; `peak` is the largest seen (MiB)."""

    def __init__(self, pid: int | None, port: int, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.port, self.every = pid, port, every
        self.peak: float | None = None
        self.done = threading.Event()

    def run(self) -> None:
        while True:
            rss = server_rss_mib(self.pid, self.port)
            if rss is not None:
                self.peak = max(self.peak or 0, rss)
            if self.done.wait(self.every):
                return

    def stop(self) -> float | None:
        self.done.set()
        self.join()
        return self.peak


def memory_bandwidth_gbs() -> float:
    import numpy as np

    src = np.ones(64 * 2**20, dtype=np.float32)  # 256 MiB, far beyond the caches
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return round(2 * src.nbytes / best / 1e9, 1)  # read + write


def add_load_args(ap: argparse.ArgumentParser, concurrency: str, max_tokens: int) -> None:
    """The flags of the server and the load that `level()` reads (loadgen.py and noisy_neighbour.py share them)."""
    ap.add_argument("--url", default="http://127.0.0.1:7860")
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--concurrency", default=concurrency)
    ap.add_argument("--max-tokens", type=int, default=max_tokens)
    ap.add_argument("--requests-per-level", type=int, default=0, help="default: 2x the concurrency, at least 4")
    ap.add_argument(
        "--prompt-tokens",
        type=int,
        default=0,
        help="each request a distinct text of about N tokens (default: short questions)",
    )
    ap.add_argument("--api-key")
    ap.add_argument(
        "--extra-body",
        type=json.loads,
        default={},
        help='JSON merged into every request body, e.g. llama.cpp\'s EOS suppression: \'{"logit_bias": {"2": -100}}\'',
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_load_args(ap, "1,4,8,16,32", 128)
    ap.add_argument("--server-pid", type=int)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", help="append the report to this JSON-lines file")
    ap.add_argument(
        "--weight-mb",
        type=float,
        default=0.0,
        help="bytes of weights one decode step reads, in MB (SmolLM2-135M: 270 in bf16, 540 in float32, "
        "~95 as Q4_1): reports single-stream decode as a fraction of the bandwidth limit",
    )
    args = ap.parse_args()
    args.headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    port = httpx.URL(args.url).port or 80
    report = {"label": args.label, "url": args.url, "memory_bandwidth_gbs": memory_bandwidth_gbs(), "levels": []}
    for c in [int(x) for x in args.concurrency.split(",")]:
        start_rss = server_rss_mib(args.server_pid, port)
        sampler = PeakRss(args.server_pid, port)
        sampler.start()
        row = run_level(args, c)
        row["server_rss_start_mib"], row["server_rss_peak_mib"] = start_rss, sampler.stop()
        row["server_rss_mib"] = server_rss_mib(args.server_pid, port)
        report["levels"].append(row)
        print(json.dumps(row), flush=True)
    summary = {"memory_bandwidth_gbs": report["memory_bandwidth_gbs"]}
    first = report["levels"][0] if report["levels"] else None
    if args.weight_mb and first and first["concurrency"] == 1:
        limit = report["memory_bandwidth_gbs"] * 1e3 / args.weight_mb  # tokens/s if each step only streamed weights
        summary |= {
            "bandwidth_limit_tok_s": round(limit, 1),
            "single_stream_fraction_of_limit": round(first["single_stream_tok_s"] / limit, 3),
        }
    report |= summary
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(report) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
