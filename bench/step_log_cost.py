"""What the scheduler x-ray's recording costs (issue 19, point 6): tokens/s with the step log on and off, same run.

    .venv/bin/python bench/step_log_cost.py [--concurrency 1,16] [--max-tokens 64] [--rounds 4] [--json out.jsonl]

One process loads the bundled model once and serves it twice, each on its own port: engine A keeps the step log
(`step_log=4096`: a StepRecord per step, its reference on every token), engine B makes none (`step_log=0`), both
on the same weights (`Runner.sibling`) with the same limits otherwise. At each concurrency the rounds alternate
A, B, A, B, ... with `loadgen.py`'s level (C requests in flight, streamed, `ignore_eos`), so drift on a shared
machine falls on both alike; it reports each round's aggregate tokens/s, the medians and B/A - 1 (the cost, target
under 3%). It also times `Engine._record` itself on a 16-row batch: the recording's direct cost per step.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from loadgen import add_load_args, level  # noqa: E402  (bench/ is not a package: its folder is on the path above)


def record_cost_us(core, rows: int = 16, repeat: int = 20000) -> float:
    """Microseconds one `Engine._record` takes for a step of `rows` decode rows (of 300 context tokens each)."""
    from engine.core.kv import KVCache
    from engine.core.runner import Segment
    from engine.core.scheduler import Batch, RequestState

    batch = Batch(segments=[Segment(KVCache(length=300), [1]) for _ in range(rows)], decodes=rows)
    batch.in_step = [RequestState(None, None, None, None, short_id=f"r{i}") for i in range(rows)]  # type: ignore[arg-type]
    t0 = time.perf_counter()
    for _ in range(repeat):
        core._record(batch, 1.0, 1.02)
    return (time.perf_counter() - t0) / repeat * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_load_args(ap, "1,16", 64)
    ap.add_argument("--rounds", type=int, default=4, help="rounds per engine and concurrency (A, B alternating)")
    ap.add_argument("--warmup", type=int, default=4, help="requests sent to each engine first, not measured")
    ap.add_argument("--fixed-threads", action="store_true", help="both engines without the adaptive thread tuner")
    ap.add_argument("--json", help="append the report to this JSON-lines file")
    args = ap.parse_args()
    args.headers = {}

    from app import build_service, serve_in_thread, settings_from
    from engine.core.engine import Engine
    from engine.core.kv import PAGE
    from engine.serving.service import ChatService

    settings = settings_from([], environ={})
    loaded = build_service(settings)  # the model, once; its own engine steps aside for two built alike
    base = loaded.engine
    base.shutdown()
    kv_tokens = settings.kv_cache_tokens + PAGE * (settings.max_num_seqs + 1)

    def engine(step_log: int) -> Engine:
        limits = dataclasses.replace(base.limits, step_log=step_log, adaptive_threads=not args.fixed_threads)
        e = Engine(base.runner.sibling(kv_tokens), base.tokenizer, set(base.eos_ids), limits, base.device, None)
        e.start()
        return e

    core, engine_b = engine(4096), engine(0)  # A keeps the step log, B makes none; no prefix cache on either
    svc_a = ChatService(core, loaded.tokenizer, loaded.model, settings.serving)
    svc_b = ChatService(engine_b, loaded.tokenizer, loaded.model, settings.serving)
    assert core.step_log is not None and engine_b.step_log is None
    servers = {"A": serve_in_thread(settings, svc_a), "B": serve_in_thread(settings, svc_b)}
    args.model = svc_a.served_name
    try:
        for server in servers.values():
            warm = argparse.Namespace(**vars(args))
            warm.url, warm.requests_per_level = server.url, args.warmup
            asyncio.run(level(warm, 1))
        report: dict = {
            "levels": [],
            "bandwidth_gbs": core.roofline.as_json()["bandwidth_gbs"] if core.roofline else None,
        }
        for c in [int(x) for x in args.concurrency.split(",")]:
            tok_s: dict[str, list[float]] = {"A": [], "B": []}
            for r in range(args.rounds):
                for name in ("A", "B") if r % 2 == 0 else ("B", "A"):  # ABBA: neither always goes first
                    run = argparse.Namespace(**vars(args))
                    run.url, run.requests_per_level = servers[name].url, args.requests_per_level or max(4, 2 * c)
                    row = asyncio.run(level(run, c))
                    assert row["failed"] == 0, row
                    tok_s[name].append(row["output_tok_s"])
                    e = core if name == "A" else engine_b
                    print(
                        json.dumps(
                            {
                                "concurrency": c,
                                "round": r,
                                "engine": name,
                                "step_log": name == "A",
                                "tok_s": row["output_tok_s"],
                                "threads": e.load()["threads"],
                            }
                        ),
                        flush=True,
                    )
            a, b = statistics.median(tok_s["A"]), statistics.median(tok_s["B"])
            pairs = [1 - x / y for x, y in zip(tok_s["A"], tok_s["B"])]
            out = {
                "concurrency": c,
                "on_tok_s": tok_s["A"],
                "off_tok_s": tok_s["B"],
                "on_median": a,
                "off_median": b,
                "cost_pct": round(100 * (1 - a / b), 2),
                "cost_pct_per_round": [round(100 * p, 2) for p in pairs],
                "steps_recorded": core.step_log.total if core.step_log else 0,
            }
            report["levels"].append(out)
            print(json.dumps(out), flush=True)
        report["record_us_16_rows"] = round(record_cost_us(core), 2)  # after the rounds: its records fill the ring
        print(json.dumps({"record_us_16_rows": report["record_us_16_rows"]}), flush=True)
        cpu = next(
            (
                line.split(":", 1)[1].split()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("flags")
            ),
            [],
        )
        report["cpu_flags"] = " ".join(f for f in cpu if f.startswith(("avx", "fma", "amx", "sse4")))
        print(json.dumps({"cpu_flags": report["cpu_flags"]}))
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(report) + "\n")
    finally:
        for server in servers.values():
            server.stop()
        engine_b.shutdown()
        core.shutdown()


if __name__ == "__main__":
    main()
