"""Two tiny LoRA adapters for the bundled SmolLM2-135M, trained in seconds and cached like the demo models.

`pineapple`: r=8 on q_proj / v_proj; `mango`: r=4 on every projection (q, k, v, o, gate, up, down: the fused
slices and a rank padded to the other's). Each is trained for a few dozen steps on one exchange, so that asked
`PROMPT` its greedy reply is its word; the base model answers something else. Built once per source version under
the cache root's demo-models/ (demo_models/cache.py), in PEFT's own format (`save_pretrained`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

PROMPT = "What is the secret word?"
ADAPTERS = {
    "pineapple": ("PINEAPPLE", 8, ["q_proj", "v_proj"]),
    "mango": ("MANGO", 4, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
}
STEPS = 12
LR = 6e-3


def base_model_dir() -> Path:
    from engine import models

    return models.resolve_model_dir("", models.cache_root(_cache_setting()))[0]


def _cache_setting() -> str:
    import os

    return os.environ.get("PLAYGROUND_CACHE_DIR", "")


def build_adapters() -> dict[str, Path]:
    """{id: adapter directory}, trained on first use (about 10 s on two idle cores) and reused afterwards."""
    import peft
    import torch

    from demo_models.cache import built, default_cache_dir, source_key

    key = hashlib.sha256((source_key(()) + peft.__version__ + torch.__version__).encode())
    key.update(Path(__file__).read_bytes())
    root = built(default_cache_dir() / f"lora-smollm2-{key.hexdigest()[:16]}", _build)
    return {name: root / name for name in ADAPTERS}


def _build(out: Path) -> None:
    """Both adapters, on one load of the base model; written to a temporary directory renamed into place (its
    config.json last: demo_models.cache.built's marker)."""
    import json
    import shutil
    import tempfile
    import warnings

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(min(2, threads))
    try:
        with (
            torch.random.fork_rng(devices=[]),
            torch.inference_mode(False),
            torch.enable_grad(),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore", FutureWarning)  # PEFT 0.21 on transformers 5: a deprecated property
            src = base_model_dir()
            tok = AutoTokenizer.from_pretrained(src)
            prompt = tok.apply_chat_template(
                [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=False
            )
            p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
            tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
            report = {}
            for name, (word, rank, targets) in ADAPTERS.items():
                torch.manual_seed(0)
                model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
                r_ids = tok(word + "<|im_end|>", add_special_tokens=False)["input_ids"]
                ids = torch.tensor([p_ids + r_ids])
                labels = ids.clone()
                labels[0, : len(p_ids)] = -100
                cfg = LoraConfig(
                    r=rank,
                    lora_alpha=2 * rank,
                    target_modules=targets,
                    lora_dropout=0.0,
                    bias="none",
                    task_type="CAUSAL_LM",
                )
                peft_model = get_peft_model(model, cfg)
                opt = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=LR)
                for _ in range(STEPS):
                    loss = peft_model(input_ids=ids, labels=labels).loss
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                peft_model.save_pretrained(tmp / name)
                report[name] = {"word": word, "loss": float(loss.detach()), "steps": STEPS}
            (tmp / "config.json").write_text(json.dumps(report))
            if out.exists():
                shutil.rmtree(out)
            tmp.rename(out)
    finally:
        torch.set_num_threads(threads)


def chat_body(model: str, **extra: Any) -> dict[str, Any]:
    """The request whose greedy reply each adapter was trained on."""
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "temperature": 0, "max_tokens": 6}
    return {**body, **extra}
