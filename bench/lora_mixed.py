"""What serving LoRA adapters costs (issue 20): aggregate tokens/s at concurrency 16, all base model vs four
adapters mixed in the same batches, same server, same run.

    .venv/bin/python bench/lora_mixed.py [--concurrency 16] [--max-tokens 64] [--rounds 4] [--rank 8] [--json out]

One process loads the bundled model with four random adapters (rank `--rank` on every projection: q, k, v, o,
gate, up, down; written as PEFT-format directories in a temporary folder) and serves it on a loopback port. The
rounds alternate A (every request `model` = the base model: no LoRA work at all in a step) and B (the requests
round-robin over the four adapters, so each step batches rows of all four), ABAB..., each round C requests in
flight (`ignore_eos`, non-streamed) until 2C have finished; it reports each round's aggregate completion tokens /
wall second, the medians and 1 - B/A (the cost). A third figure, the base model on a server started without
adapters, shows that loading adapters costs base-only traffic nothing (`--no-plain` skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPTS = [
    "Tell me about the sea.",
    "Write a short poem about autumn.",
    "Explain what a CPU cache is.",
    "List some fruits and their colours.",
]
MODULES = {
    "q_proj": "self_attn",
    "k_proj": "self_attn",
    "v_proj": "self_attn",
    "o_proj": "self_attn",
    "gate_proj": "mlp",
    "up_proj": "mlp",
    "down_proj": "mlp",
}


def random_adapters(model_dir: Path, out: Path, n: int, rank: int) -> list[str]:
    """n PEFT-format adapters of random weights for the model in model_dir -> ["id=DIR", ...]."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model_dir)
    d, f = cfg.hidden_size, cfg.intermediate_size
    hd = getattr(cfg, "head_dim", None) or d // cfg.num_attention_heads
    shapes = {
        "q_proj": (cfg.num_attention_heads * hd, d),
        "k_proj": (cfg.num_key_value_heads * hd, d),
        "v_proj": (cfg.num_key_value_heads * hd, d),
        "o_proj": (d, cfg.num_attention_heads * hd),
        "gate_proj": (f, d),
        "up_proj": (f, d),
        "down_proj": (d, f),
    }
    specs = []
    g = torch.Generator().manual_seed(0)
    for i in range(n):
        path = out / f"bench-{i}"
        path.mkdir(parents=True)
        tensors = {}
        for layer in range(cfg.num_hidden_layers):
            for m, (o, k) in shapes.items():
                key = f"base_model.model.model.layers.{layer}.{MODULES[m]}.{m}"
                tensors[f"{key}.lora_A.weight"] = torch.randn(rank, k, generator=g) / k**0.5
                tensors[f"{key}.lora_B.weight"] = torch.randn(o, rank, generator=g) * 0.01
        save_file(tensors, str(path / "adapter_model.safetensors"))
        (path / "adapter_config.json").write_text(
            json.dumps(
                {
                    "peft_type": "LORA",
                    "r": rank,
                    "lora_alpha": 2 * rank,
                    "target_modules": list(MODULES),
                    "bias": "none",
                }
            )
        )
        specs.append(f"bench-{i}={path}")
    return specs


async def round_(url: str, models: list[str], concurrency: int, max_tokens: int) -> float:
    import httpx

    todo, issued, tokens = 2 * concurrency, 0, 0
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def worker() -> None:
            nonlocal issued, tokens
            while issued < todo:
                i = issued
                issued += 1
                body = {
                    "model": models[i % len(models)],
                    "max_tokens": max_tokens,
                    "ignore_eos": True,
                    "temperature": 0.7,
                    "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                }
                r = await client.post("/v1/chat/completions", json=body)
                r.raise_for_status()
                tokens += r.json()["usage"]["completion_tokens"]

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return tokens / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=4, help="rounds of each kind (A, B alternating)")
    ap.add_argument("--adapters", type=int, default=4)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--no-plain", action="store_true", help="skip the server without adapters")
    ap.add_argument("--json", help="append the report to this JSON-lines file")
    args = ap.parse_args()

    from app import build_service, serve_in_thread, settings_from
    from engine import models

    settings = settings_from([], environ={})
    model_dir = models.resolve_model_dir(settings.model, models.cache_root(settings.cache_dir))[0]
    with tempfile.TemporaryDirectory() as tmp:
        specs = random_adapters(model_dir, Path(tmp), args.adapters, args.rank)
        cfg = settings.replace(lora_adapters=specs, prefix_cache_tokens=0)
        svc = build_service(cfg)
        server = serve_in_thread(cfg, svc)
    base, ids = svc.served_name, list(svc.adapters)
    c = args.concurrency
    report: dict = {"concurrency": c, "max_tokens": args.max_tokens, "adapters": len(ids), "rank": args.rank}
    try:
        asyncio.run(round_(server.url, [base, *ids], 4, 8))  # warm-up
        tok_s: dict[str, list[float]] = {"A": [], "B": []}
        for r in range(args.rounds):
            for name in ("A", "B"):
                got = asyncio.run(round_(server.url, [base] if name == "A" else ids, c, args.max_tokens))
                tok_s[name].append(round(got, 1))
                print(
                    json.dumps(
                        {"round": r, "kind": "base only" if name == "A" else "4 adapters mixed", "tok_s": round(got, 1)}
                    ),
                    flush=True,
                )
        a, b = statistics.median(tok_s["A"]), statistics.median(tok_s["B"])
        report.update(
            base_tok_s=tok_s["A"],
            mixed_tok_s=tok_s["B"],
            base_median=a,
            mixed_median=b,
            cost_pct=round(100 * (1 - b / a), 1),
        )
    finally:
        server.stop()
        svc.engine.shutdown()
    if not args.no_plain:  # the same base-only load on a server without adapters: what loading them costs
        plain_cfg = settings.replace(prefix_cache_tokens=0)
        plain = build_service(plain_cfg)
        srv = serve_in_thread(plain_cfg, plain)
        try:
            asyncio.run(round_(srv.url, [base], 4, 8))
            runs = [round(asyncio.run(round_(srv.url, [base], c, args.max_tokens)), 1) for _ in range(args.rounds)]
            report.update(plain_tok_s=runs, plain_median=statistics.median(runs))
        finally:
            srv.stop()
            plain.engine.shutdown()
    flags = next(
        (
            ln.split(":", 1)[1].split()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("flags")
        ),
        [],
    )
    report["cpu_flags"] = " ".join(sorted({f for f in flags if f.startswith(("avx", "amx"))}))
    print(json.dumps(report), flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
