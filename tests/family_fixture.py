"""Tiny random checkpoints of the families only the HF-forward runner serves (Phi-3, GLM-4), for tests.

Each is a 2-layer model of its family's own HF class with random weights, the bundled SmolLM2's tokenizer (a
real BPE, ChatML chat template) and that tokenizer's vocabulary, saved as a model directory the app loads like any
other. The Phi-3 one has a short sliding window, so replies longer than it cross the window. Built once per
source version under the cache root's demo-models/ (demo_models/cache.py), a second or so each.
"""

from __future__ import annotations

import hashlib
from functools import partial
from pathlib import Path
from typing import Any

PHI3_WINDOW = 48  # tokens: a chat prompt plus a short reply crosses it


def family_config(family: str, tokenizer: Any, vocab_size: int, **overrides: Any) -> Any:
    """The tiny config of `family` ("phi3", "glm4", or "llama": the lean runner's shape, for references)."""
    from transformers import Glm4Config, LlamaConfig, Phi3Config

    ids = {
        "pad_token_id": tokenizer.pad_token_id if tokenizer is not None else 0,
        "bos_token_id": tokenizer.bos_token_id if tokenizer is not None else 1,
        "eos_token_id": tokenizer.eos_token_id if tokenizer is not None else 2,
    }
    # A wide init: logits spread enough that greedy choices are far from ties (batched and alone then agree).
    shape = {
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "initializer_range": 0.2,
        **ids,
    }
    if family == "phi3":
        shape["sliding_window"] = PHI3_WINDOW
    if family == "glm4":
        shape["head_dim"] = 16
    shape.update(overrides)
    return {"phi3": Phi3Config, "glm4": Glm4Config, "llama": LlamaConfig}[family](**shape)


def tiny_model(family: str, vocab_size: int = 500, tokenizer: Any = None, seed: int = 0, **overrides: Any) -> Any:
    """A random model of `family` in float32, eval mode (`overrides`: config fields)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(family_config(family, tokenizer, vocab_size, **overrides)).eval()


def build_family(family: str) -> Path:
    """The model directory of the tiny `family` checkpoint, built on first use and reused afterwards."""
    from demo_models.cache import built, default_cache_dir, source_key

    key = hashlib.sha256(source_key(()).encode())
    key.update(Path(__file__).read_bytes())
    return built(default_cache_dir() / f"tiny-{family}-{key.hexdigest()[:16]}", partial(_build, family))


def _build(family: str, out: Path) -> None:
    from transformers import AutoTokenizer

    from engine.models import save_atomically
    from tests.lora_fixture import base_model_dir

    tokenizer = AutoTokenizer.from_pretrained(base_model_dir())
    model = tiny_model(family, len(tokenizer), tokenizer)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    save_atomically(out, tokenizer, model)
