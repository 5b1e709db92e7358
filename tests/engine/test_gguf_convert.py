"""The bundled GGUF's one-time conversion (engine/models.py `convert_gguf`): the same weights every time, and no
advice from transformers that does not apply (issue 30: a newcomer's first start told them to "Pass
`dtype=torch.float32`", the hint of transformers' packed-weights path, which a conversion never takes)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from engine import models

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)


def test_the_conversion_is_quiet_and_gives_the_cached_weights(settings: Any, tmp_path: Path, caplog: Any) -> None:
    cache = models.cache_root(settings.cache_dir)
    cached, _ = models.resolve_model_dir("", cache)  # the session's converted default model
    gguf = models.default_gguf(cache, models.quiet)
    library = logging.getLogger("transformers")  # its own handler, propagate off: caplog must listen there
    library.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO):
            out = models.convert_gguf(gguf, tmp_path / "converted")
    finally:
        library.removeHandler(caplog.handler)
    advice = [r.getMessage() for r in caplog.records if r.name.startswith("transformers") and r.levelno >= 30]
    assert advice == [], advice
    stages = [r.getMessage() for r in caplog.records if r.name == "engine.models"]
    assert any("reading its tokenizer" in s for s in stages) and any("converted" in s for s in stages), stages
    ours, theirs = load_file(out / "model.safetensors"), load_file(cached / "model.safetensors")
    assert ours.keys() == theirs.keys()
    assert all(ours[k].dtype == torch.bfloat16 and torch.equal(ours[k], theirs[k]) for k in theirs)
