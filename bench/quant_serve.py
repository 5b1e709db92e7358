"""Quantized weights through the lean runner (engine/core/quant.py): decode speed, weight bytes and quality.

    .venv/bin/python bench/quant_serve.py [--model smollm2|gemma|qwen|qwen3b] [--modes none,bf16,int8,int4,auto]
                                          [--batch 1,16] [--tokens 32] [--quality] [--threads N]

For each mode the model is loaded as the server loads it (engine/models.py, make_runner with that
`--quantization`; `bf16` is `--dtype bf16 --quantization none`, `auto` the GGUF's own blocks: SmolLM2's Q4_1,
Gemma 3 270M's Q4_K_M) and
  - decode tokens/s at each batch size: B streams of a short chat prompt prefilled together, then `--tokens`
    greedy decode steps of all B, each timed (the runner's forward: the engine's compute, without its HTTP and
    scheduling around it); B / the median step over `--repeat` runs, so a neighbour's bursts are left out;
  - weight bytes resident: the projections as kept (packed forms and any second copy included) plus the
    embedding and output head (int8 or the GGUF's own blocks when quantized), and the process's RSS after loading;
  - `--quality` (SmolLM2, Gemma 3 270M): 16 prompts x 64 greedy tokens from the float32 model (`none`), teacher-forced
    through each mode: top-1 agreement and mean KL(fp32 || mode) per token, in one prefill (the kernels from
    SPLIT_ROWS rows) and as decode steps, a token a step (`decode_*`: the kernels of a decode batch).
`--model qwen` is the Qwen2.5-0.5B shape of bench/qwen_shape.py with random weights (speed and bytes only);
`--model qwen3b` its 3B shape (6.2 GB in bf16; loading it in float32 peaks near 17 GB).
The CPU's flags that matter to the kernels are printed first.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine  # noqa: F401  (process settings before torch)

FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
)
QUALITY_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three primary colours.",
    "Explain what a CPU cache is in one sentence.",
    "How do I boil an egg?",
    "Name a famous painter.",
    "What is 12 times 12?",
    "Give me a tip for learning a language.",
    "Why is the sky blue?",
    "Write a short poem about autumn.",
    "What does a compiler do?",
    "Describe a cat in two sentences.",
    "What is photosynthesis?",
    "Suggest a name for a dog.",
    "How far is the Moon?",
    "Tell me a fun fact about owls.",
]


def runner_for(model_name: str, mode: str, kv_tokens: int = 16384) -> tuple[Any, Any]:
    import torch

    from engine import models
    from engine.core.model_runner import make_runner

    cache = models.cache_root()
    dtype = torch.bfloat16 if mode == "bf16" or model_name == "qwen" else torch.float32
    quantization = "none" if mode in ("bf16", "none") else mode
    if model_name == "qwen":
        from bench.qwen_shape import build_model, qwen_config

        model, tok, gguf = build_model(qwen_config()), None, None
        if mode != "bf16":
            model = model.float() if mode == "none" else model
    elif model_name == "qwen3b":  # the 3B shape's directory (built once, ~65 s), loaded as the server loads one
        from bench.qwen_shape import build

        path = build(cache / "bench-models" / "qwen2.5-3b-shape", size="3b")
        loaded = models.load(str(path), cache, "cpu", torch.bfloat16 if mode == "bf16" else torch.float32)
        model, tok, gguf = loaded.model, loaded.tokenizer, None
    else:  # the bundled SmolLM2, or Gemma 3 270M (`--model gemma-3-270m`), as the server loads them
        loaded = models.load("gemma-3-270m" if model_name == "gemma" else "", cache, "cpu", dtype)
        model, tok, gguf = loaded.model, loaded.tokenizer, loaded.gguf
    return make_runner(model, "cpu", kv_tokens, quantization=quantization, gguf=gguf), tok


def weight_bytes(runner: Any, copies: bool = True) -> int:
    """The weights' bytes as kept; without `copies`, less the second copies calibration kept for speed."""
    from engine.core.quant import QuantProjection

    total = 0
    for layer in runner.proj:
        for p in layer:
            if isinstance(p, QuantProjection):
                total += p.nbytes if copies else p.qw.nbytes
            else:
                total += p.weight.numel() * p.weight.element_size()
                total += p.packed.numel() * p.packed.element_size() if p.packed is not None else 0
    head = runner.lm_head
    if isinstance(head, QuantProjection):  # quantized with the projections, the embedding's rows with it when tied
        total += head.nbytes if copies else head.qw.nbytes
        embed_q = runner.embed_tokens.qw
        return total + (embed_q.nbytes if embed_q is not head.qw else 0)
    embed = runner.model.get_input_embeddings().weight
    total += head.weight.numel() * head.weight.element_size()
    if embed.data_ptr() != head.weight.data_ptr():
        total += embed.numel() * embed.element_size()
    return total


def rss() -> int:
    """This process's resident bytes now (Linux), after a collection."""
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def prompts_for(tok: Any, n: int, vocab: int) -> list[list[int]]:
    if tok is None:  # random-weight model: any ids
        return [[(7 * i + j) % vocab for j in range(24)] for i in range(n)]
    if tok.chat_template is None:  # a base model (Gemma 3 270M): the questions as plain text after its BOS
        return [tok(QUALITY_PROMPTS[i % 16])["input_ids"] for i in range(n)]
    texts = [
        tok.apply_chat_template(
            [{"role": "user", "content": QUALITY_PROMPTS[i % 16]}], add_generation_prompt=True, tokenize=False
        )
        for i in range(n)
    ]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def decode_speed(runner: Any, prompts: list[list[int]], tokens: int, repeat: int) -> float:
    import torch

    from engine.core.kv import KVCache
    from engine.core.runner import Segment

    steps: list[float] = []
    for _ in range(repeat):
        caches = [KVCache() for _ in prompts]
        with torch.inference_mode():
            logits = runner.forward([Segment(c, p) for c, p in zip(caches, prompts)])
            last = [int(row.argmax()) for row in logits]
            for _ in range(tokens):
                start = time.perf_counter()
                logits = runner.forward([Segment(c, [t]) for c, t in zip(caches, last)])
                last = [int(row.argmax()) for row in logits]
                steps.append(time.perf_counter() - start)
        for c in caches:
            runner.release(c)
    return len(prompts) / statistics.median(steps)  # the median step: a busy neighbour's bursts left out


def greedy(runner: Any, prompts: list[list[int]], steps: int) -> list[list[int]]:
    from tests.engine.core.test_model_runner import greedy as run

    return [o for i in range(0, len(prompts), 4) for o in run(runner, prompts[i : i + 4], steps)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2", choices=("smollm2", "gemma", "qwen", "qwen3b"))
    ap.add_argument("--modes", default="")
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quality", action="store_true")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    import torch

    from engine.core.cpu_kernels import cpu_flags, kernels

    if args.threads:  # this script is its own process's composition root: the thread count is set here, on purpose
        torch.set_num_threads(args.threads)
    flags = cpu_flags()
    kern = kernels()
    print(
        json.dumps(
            {
                "cpu_flags": [f for f in FLAGS if f in flags],
                "kernels": kern.isa if kern else None,
                "threads": torch.get_num_threads(),
            }
        )
    )
    modes = (
        args.modes.split(",")
        if args.modes
        else (
            ["none", "bf16", "int8", "int4", "auto"]
            if args.model == "smollm2"
            else ["none", "auto"]
            if args.model == "gemma"
            else ["bf16", "int4"]
        )
    )
    batches = [int(b) for b in args.batch.split(",")]
    reference = outs = qprompts = None
    if args.quality:
        reference, tok = runner_for(args.model, "none")
        qprompts = prompts_for(tok, 16, reference.vocab_size)
        outs = greedy(reference, qprompts, 64)
    for mode in modes:
        started = time.perf_counter()
        runner, tok = runner_for(args.model, mode)
        row: dict[str, Any] = {
            "model": args.model,
            "mode": mode,
            "weights": getattr(runner, "quantization", ""),
            "load_s": round(time.perf_counter() - started, 1),
            "weight_mb": round(weight_bytes(runner) / 2**20, 1),
            "packed_mb": round(weight_bytes(runner, copies=False) / 2**20, 1),
            "rss_mb": round(rss() / 2**20, 1),
        }
        for b in batches:
            tps = decode_speed(runner, prompts_for(tok, b, runner.vocab_size), args.tokens, args.repeat)
            row[f"c{b}_tok_s"] = round(tps, 1)
        if reference is not None and outs is not None and qprompts is not None:
            from tests.engine.core.test_quantization import top1_agreement

            agree, kl = top1_agreement(reference, runner, qprompts, outs)
            row |= {"top1_agreement": round(agree, 4), "mean_kl": float(f"{kl:.3g}")}
            agree, kl = top1_agreement(reference, runner, qprompts, outs, stepwise=True)
            row |= {"decode_top1_agreement": round(agree, 4), "decode_mean_kl": float(f"{kl:.3g}")}
        print(json.dumps(row), flush=True)
        del runner
        gc.collect()


if __name__ == "__main__":
    main()
