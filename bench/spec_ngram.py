"""Speculative decoding by prompt lookup (engine/core/speculative.py): single-stream tokens/s with and without.

    .venv/bin/python bench/spec_ngram.py [--k 2,4,8] [--rounds 2] [--max-tokens 96]

One process, the bundled model, one engine per setting on the same weights (no prefix cache, so every request
prefills the same way). Greedy requests one at a time, rounds alternating off / on per k (A B A B), on a repeating
set (edit this code, summarise this text, extract fields as JSON: the reply copies its prompt) and a set that
repeats little (open questions). Tokens/s is decode only: output tokens after the first over the time from the
first token to the last. Checks the greedy replies are identical with and without, and prints each set's
ratio per k, the acceptance rate and the draft lookup's own cost per token.
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
TEXT = ("The city council met on Tuesday to discuss the new bus routes. The council agreed that the number 12 bus "
        "will run every ten minutes from March, and that the number 40 bus will stop at the hospital. Residents "
        "asked for more buses at night, and the council said it would study night buses next year.")  # fmt: skip
PERSON = ("Maria Lopez, born 14 May 1988 in Valencia, works as a nurse at Saint Mary Hospital in London. Her email "
          "is maria.lopez@example.com and her phone number is +44 20 7946 0958.")  # fmt: skip
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


def run_one(e, tokenizer, text: str, max_tokens: int, k: int | None) -> tuple[list[int], float, int, int, int]:
    from engine.core.types import EngineRequest, SamplingParams

    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)["input_ids"]
    params = SamplingParams(temperature=0, max_tokens=max_tokens, speculative=k)
    out: list = []
    done = threading.Event()

    def sink(item) -> None:
        if item is None:
            done.set()
        elif isinstance(item, list):
            out.extend(item)

    e.submit(EngineRequest(f"r{time.perf_counter_ns()}", ids, params), sink)
    done.wait(600)
    tokens = [t for d in out for t in d.token_ids]
    times = [t for d in out for t in d.token_times]
    drafted = sum(d.drafted for d in out)
    accepted = sum(len(d.accepted) for d in out)
    return tokens, times[-1] - times[0], len(tokens) - 1, drafted, accepted


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
    args = ap.parse_args()
    import torch

    from app import build_service, settings_from
    from engine.core.engine import Engine, EngineLimits
    from engine.core.kv import PAGE

    service = build_service(settings_from(["--prefix-cache-tokens", "0", "--step-log", "0"], environ={}))
    core = service.engine
    lim = EngineLimits(max_model_len=8192, step_log=0)
    e = Engine(core.runner.sibling(lim.kv_cache_tokens + PAGE * (lim.max_num_seqs + 1)), core.tokenizer,
               set(core.eos_ids), lim)  # fmt: skip
    e.start()
    ks = [int(k) for k in args.k.split(",")]
    flags = [f for f in ("avx512f", "avx512_bf16", "avx2", "amx_bf16") if f in Path("/proc/cpuinfo").read_text()]
    print(json.dumps({"threads": torch.get_num_threads(), "cpu_flags": flags, "lookup_us_per_token":
                      round(lookup_cost_us(), 2)}))  # fmt: skip
    rates: dict[tuple[str, int], list[float]] = {}
    acc: dict[tuple[str, int], list[int]] = {}
    mismatches = 0
    run_one(e, core.tokenizer, "Hello", 8, 0)  # warm-up
    for rnd in range(args.rounds):
        for name, prompts in (("repeating", REPEATING), ("open", OPEN)):
            for text in prompts:
                base = None
                for k in [0, *ks]:  # A B ... within each prompt, so both see the same moment of the machine
                    toks, secs, n, drafted, accepted = run_one(e, core.tokenizer, text, args.max_tokens, k)
                    rates.setdefault((name, k), []).append(n / secs if secs > 0 else 0.0)
                    a = acc.setdefault((name, k), [0, 0])
                    a[0], a[1] = a[0] + drafted, a[1] + accepted
                    if base is None:
                        base = toks
                    elif toks != base:
                        mismatches += 1
                        print(json.dumps({"mismatch": text[:40], "k": k}))
        print(json.dumps({"round": rnd + 1}), flush=True)
    out = {"greedy_mismatches": mismatches}
    for name in ("repeating", "open"):
        off = statistics.median(rates[(name, 0)])
        out[name] = {"off_tok_s": round(off, 1)}
        for k in ks:
            on = statistics.median(rates[(name, k)])
            drafted, accepted = acc[(name, k)]
            out[name][f"k{k}"] = {"tok_s": round(on, 1), "ratio": round(on / off, 2),
                                  "acceptance": round(accepted / drafted, 2) if drafted else None}  # fmt: skip
    print(json.dumps(out))
    e.shutdown()
    core.shutdown()


if __name__ == "__main__":
    main()
