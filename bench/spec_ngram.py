"""Speculative decoding by prompt lookup (engine/core/speculative.py): single-stream tokens/s with and without.

    .venv/bin/python bench/spec_ngram.py [--k 2,4,8] [--rounds 2] [--max-tokens 96] [--concurrency 1,4,16]

One process, the bundled model, one engine on the same weights (no prefix cache, so every request prefills the
same way). Greedy requests, rounds alternating off / on per k (A B A B), on a repeating set (edit this code,
summarise this text, extract fields as JSON: the reply copies its prompt) and a set that repeats little (open
questions). At concurrency 1 the prompts go one at a time; at c > 1, c requests at once (the set's prompts in
turn). Tokens/s is decode only: output tokens after each request's first over the time from the first first token
to the last token, by the wall clock (`tok_s`, `ratio`) and by the process's CPU time (`cpu_ratio`: steadier on a
shared machine, where other processes' load moves the wall clock); `ratio` compares the medians of the runs,
`total_ratio` the set's tokens over its whole time (the set as one workload). Checks the greedy replies are identical with
and without, and prints each set's ratio per k, the acceptance rate and the draft lookup's own cost per token.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: F401  (process settings before torch)

CODE = """def total_price(items, tax_rate):
    total = 0
    for item in items:
        total = total + item["price"] * item["quantity"]
    total = total + total * tax_rate
    return total
"""
TEXT = (
    "The city council met on Tuesday to discuss the new bus routes. The council agreed that the number 12 bus "
    "will run every ten minutes from March, and that the number 40 bus will stop at the hospital. Residents "
    "asked for more buses at night, and the council said it would study night buses next year."
)
PERSON = (
    "Maria Lopez, born 14 May 1988 in Valencia, works as a nurse at Saint Mary Hospital in London. Her email "
    "is maria.lopez@example.com and her phone number is +44 20 7946 0958."
)
REPEATING = [
    f"Rename the variable `total` to `amount` in this code and return the whole code:\n\n{CODE}",
    f"Add a docstring to this function and return the whole function:\n\n{CODE}",
    f"Summarise this text, keeping its own words:\n\n{TEXT}",
    f"Extract name, birth_date, city, job, employer, email and phone from this text as JSON:\n\n{PERSON}",
]
OPEN = [
    "Why is the sky blue?",
    "Give three ideas for a birthday party.",
    "What makes a good teacher?",
    "Describe a walk in the forest in autumn.",
]


class Reply:
    """One request's tokens as they arrive, with the wall and process CPU time of the first and the last."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.drafted = self.accepted = 0
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.done = threading.Event()

    def __call__(self, item) -> None:  # the engine thread's sink
        if item is None:
            self.done.set()
        elif isinstance(item, list):
            for d in item:
                if d.token_ids:
                    self.wall.append(time.perf_counter())
                    self.cpu.append(time.process_time())
                self.tokens.extend(d.token_ids)
                self.drafted += d.drafted
                self.accepted += len(d.accepted)


def run_many(e, tokenizer, texts: list[str], max_tokens: int, k: int) -> tuple[list[Reply], int, float, float]:
    """The texts as concurrent greedy requests: their replies, the decode tokens (after each request's first) and
    the wall and process CPU seconds from the first first token to the last token (one request: its decode)."""
    from engine.core.types import EngineRequest, SamplingParams

    replies = []
    for text in texts:
        msgs = [{"role": "user", "content": text}]
        ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True)["input_ids"]
        reply = Reply()
        params = SamplingParams(temperature=0, max_tokens=max_tokens, speculative=k)
        e.submit(EngineRequest(f"r{time.perf_counter_ns()}", ids, params), reply)
        replies.append(reply)
    for reply in replies:
        reply.done.wait(600)
    n = sum(len(r.tokens) - 1 for r in replies)
    wall = max(r.wall[-1] for r in replies) - min(r.wall[0] for r in replies)
    cpu = max(r.cpu[-1] for r in replies) - min(r.cpu[0] for r in replies)
    return replies, n, wall, cpu


def lookup_cost_us() -> float:
    """The draft finder's own cost per token: index a 600-token stream and propose after each token."""
    import random

    from engine.core.speculative import NgramIndex

    rng = random.Random(0)
    stream = [rng.randrange(2000) for _ in range(600)]
    t0 = time.perf_counter()
    for _ in range(10):
        idx = NgramIndex()
        for tok in stream:
            idx.extend([tok])
            idx.propose(4)
    return (time.perf_counter() - t0) / (10 * len(stream)) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", default="4")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--concurrency", default="1", help="streams at once, e.g. 1,4,16")
    args = ap.parse_args()
    concurrency = [int(c) for c in args.concurrency.split(",")]
    import torch

    from app import build_service, settings_from
    from engine.core.engine import Engine, EngineLimits
    from engine.core.kv import PAGE

    service = build_service(settings_from(["--prefix-cache-tokens", "0", "--step-log", "0"], environ={}))
    core = service.engine
    lim = EngineLimits(max_model_len=8192, step_log=0)
    e = Engine(
        core.runner.sibling(lim.kv_cache_tokens + PAGE * (lim.max_num_seqs + 1)), core.tokenizer, set(core.eos_ids), lim
    )
    e.start()
    ks = [int(k) for k in args.k.split(",")]
    flags = [f for f in ("avx512f", "avx512_bf16", "avx2", "amx_bf16") if f in Path("/proc/cpuinfo").read_text()]
    print(
        json.dumps(
            {"threads": torch.get_num_threads(), "cpu_flags": flags, "lookup_us_per_token": round(lookup_cost_us(), 2)}
        )
    )
    runs: dict[tuple[str, int, int], list[tuple[int, float, float]]] = {}  # (tokens, wall s, cpu s) per run
    acc: dict[tuple[str, int, int], list[int]] = {}
    mismatches = 0
    run_many(e, core.tokenizer, ["Hello"], 8, 0)  # warm-up
    for rnd in range(args.rounds):
        for c in concurrency:
            for name, prompts in (("repeating", REPEATING), ("open", OPEN)):
                # c = 1: each prompt alone; c > 1: c requests at once, the set's prompts in turn
                groups = [[t] for t in prompts] if c == 1 else [[prompts[i % len(prompts)] for i in range(c)]]
                for texts in groups:
                    base = None
                    for k in [0, *ks]:  # A B ... within each group, so both see the same moment of the machine
                        replies, n, wall, cpu = run_many(e, core.tokenizer, texts, args.max_tokens, k)
                        runs.setdefault((name, c, k), []).append((n, wall, cpu))
                        a = acc.setdefault((name, c, k), [0, 0])
                        a[0] += sum(r.drafted for r in replies)
                        a[1] += sum(r.accepted for r in replies)
                        toks = [r.tokens for r in replies]
                        if base is None:
                            base = toks
                        elif toks != base:
                            mismatches += 1
                            print(json.dumps({"mismatch": texts[0][:40], "k": k, "concurrency": c}))
        print(json.dumps({"round": rnd + 1}), flush=True)
    out: dict = {"greedy_mismatches": mismatches}

    def medians(key: tuple[str, int, int]) -> list[float]:  # median tokens/s of the runs: wall, cpu
        return [statistics.median(r[0] / r[i] for r in runs[key]) for i in (1, 2)]

    def totals(key: tuple[str, int, int]) -> list[float]:  # the set as one workload: its tokens over its time
        n = sum(r[0] for r in runs[key])
        return [n / sum(r[i] for r in runs[key]) for i in (1, 2)]

    for c in concurrency:
        for name in ("repeating", "open"):
            off, off_total = medians((name, c, 0)), totals((name, c, 0))
            res = out.setdefault(f"c{c}", {})[name] = {"off_tok_s": round(off[0], 1), "off_cpu_tok_s": round(off[1], 1)}
            for k in ks:
                on, on_total = medians((name, c, k)), totals((name, c, k))
                drafted, accepted = acc[(name, c, k)]
                res[f"k{k}"] = {
                    "tok_s": round(on[0], 1),
                    "ratio": round(on[0] / off[0], 2),
                    "cpu_ratio": round(on[1] / off[1], 2),
                    "total_ratio": round(on_total[0] / off_total[0], 2),
                    "total_cpu_ratio": round(on_total[1] / off_total[1], 2),
                    "acceptance": round(accepted / drafted, 2) if drafted else None,
                }
    print(json.dumps(out))
    e.shutdown()
    core.shutdown()


if __name__ == "__main__":
    main()
