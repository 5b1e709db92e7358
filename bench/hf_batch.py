"""What the HF-forward runner's batching buys, and what it costs against the lean runner (issue 22, point 2).

    .venv/bin/python bench/hf_batch.py [--concurrency 1,4,16] [--max-tokens 32] [--rounds 2] [--json out.jsonl]

One process loads the bundled SmolLM2 (Llama-shaped) once and builds three engines on the same weights: `lean`,
the DecoderRunner the model gets in production; `hf`, HFRunner with its decode rows batched in one padded cohort
cache (what Phi-3, GLM-4 and every other family get); `hf1`, HFRunner running each segment alone (`batched=False`,
what it did before). HFRunner runs the HF forward on its own copy of the model in the loaded dtype (the lean runner
rearranges the weights it is given). At each concurrency C, each round submits C greedy requests (distinct
prompts, `ignore_eos`, `--max-tokens` each) to one engine at a time, engines in turn and the order reversed every
other round, and measures the aggregate decode tokens/s: the tokens produced after every request has its first
token, over the time from then to the last token (prefill left out). Prints each round, the medians, and hf / hf1
and hf / lean ratios; the ratios, not the absolute figures, are what carries from one machine to another.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: F401  (process settings before torch)

PROMPTS = [
    "Why is the sky blue?",
    "Give three ideas for a birthday party.",
    "What makes a good teacher?",
    "Describe a walk in the forest in autumn.",
    "How do bees make honey?",
    "Write a haiku about rain.",
    "What is a prime number?",
    "Name four planets.",
    "How does a bicycle stay upright?",
    "Tell me a joke.",
    "What is the capital of Spain?",
    "Explain photosynthesis simply.",
    "Why do cats purr?",
    "List three uses of salt.",
    "What is 12 times 7?",
    "Suggest a name for a dog.",
]


def level(e, tokenizer, c: int, max_tokens: int) -> dict:
    """C requests at once on engine e: aggregate decode tokens/s once all have their first token."""
    from engine.core.types import EngineRequest, SamplingParams

    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    times: list[list[float]] = [[] for _ in range(c)]
    left = threading.Semaphore(0)

    def sink(i: int, item) -> None:
        if item is None:
            left.release()
        elif isinstance(item, list):
            times[i].extend(t for d in item for t in d.token_times)

    for i in range(c):
        text = PROMPTS[i % len(PROMPTS)]
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        e.submit(EngineRequest(f"r{i}-{time.perf_counter_ns()}", list(ids), params), lambda x, i=i: sink(i, x))
    for _ in range(c):
        left.acquire(timeout=600)
    start = max(t[0] for t in times)
    end = max(t[-1] for t in times)
    tokens = sum(1 for t in times for x in t if x > start)
    return {"tok_s": tokens / (end - start) if end > start else 0.0, "tokens": tokens, "seconds": end - start}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--engines", default="lean,hf,hf1", help="which of lean, hf, hf1 to run")
    ap.add_argument("--json", help="append the report to this JSON-lines file")
    args = ap.parse_args()
    import torch

    from app import settings_from
    from engine import device as devices
    from engine import models
    from engine.core.engine import Engine
    from engine.core.hf_runner import HFRunner
    from engine.core.kv import PAGE
    from engine.core.model_runner import DecoderRunner, make_runner
    from engine.core.types import EngineLimits

    settings = settings_from([], environ={})
    place = devices.placement(settings.device, settings.dtype)
    loaded = models.load(settings.model, models.cache_root(settings.cache_dir), place.device, place.dtype)
    tok = loaded.tokenizer
    hf_model = copy.deepcopy(loaded.model)  # before the lean runner rearranges the weights it is given
    lim = EngineLimits(step_log=0, max_num_seqs=32)
    kv = lim.kv_cache_tokens + PAGE * (lim.max_num_seqs + 1)
    runners = {
        "lean": make_runner(loaded.model, place.device, kv),
        "hf": HFRunner(hf_model, place.device),
        "hf1": HFRunner(hf_model, place.device, batched=False),
    }
    assert isinstance(runners["lean"], DecoderRunner) and runners["hf"].batched  # type: ignore[union-attr]
    names = args.engines.split(",")
    engines = {n: Engine(runners[n], tok, {tok.eos_token_id}, lim, place.device) for n in names}
    for e in engines.values():
        e.start()
        level(e, tok, 2, 4)  # warm-up
    cpu = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = next((ln.split(":", 1)[1].split() for ln in cpu.splitlines() if ln.startswith("flags")), [])
    report: dict = {
        "model": loaded.name,
        "dtype": str(hf_model.dtype),
        "threads": torch.get_num_threads(),
        "max_tokens": args.max_tokens,
        "levels": [],
        "cpu_flags": " ".join(f for f in flags if f.startswith(("avx", "fma", "amx"))),
    }
    print(json.dumps({k: v for k, v in report.items() if k != "levels"}), flush=True)
    try:
        for c in [int(x) for x in args.concurrency.split(",")]:
            rates: dict[str, list[float]] = {n: [] for n in names}
            for r in range(args.rounds):
                for n in names if r % 2 == 0 else names[::-1]:
                    row = level(engines[n], tok, c, args.max_tokens)
                    rates[n].append(row["tok_s"])
                    print(json.dumps({"concurrency": c, "round": r, "engine": n, **row}), flush=True)
            med = {n: round(statistics.median(v), 1) for n, v in rates.items()}
            out: dict = {"concurrency": c, "median_tok_s": med}
            if "hf" in med and "hf1" in med:
                out["hf_over_hf1"] = round(med["hf"] / med["hf1"], 2)
            if "hf" in med and "lean" in med:
                out["hf_over_lean"] = round(med["hf"] / med["lean"], 2)
            report["levels"].append(out)
            print(json.dumps(out), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(report) + "\n")
    finally:
        for e in engines.values():
            e.shutdown()


if __name__ == "__main__":
    main()
