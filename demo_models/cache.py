"""Where the demo models are built: the cache root's `demo-models/`, one directory per model and source version.

The cache root is the models' own (`PLAYGROUND_CACHE_DIR`, else `$XDG_CACHE_HOME/llm-playground`), so a fresh
machine builds each model once on first use and every later run, test or notebook reuses it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path

FOLDER = "demo-models"
HERE = Path(__file__).parent


def default_cache_dir() -> Path:
    from engine.models import cache_root

    return cache_root(os.environ.get("PLAYGROUND_CACHE_DIR", "")) / FOLDER


def source_key(sources: Iterable[str]) -> str:
    """16 hex digits over the torch / transformers / tokenizers versions and the named files of this package: a
    changed source or library builds a new directory instead of reusing a stale one."""
    import tokenizers
    import torch
    import transformers

    digest = hashlib.sha256(f"{torch.__version__} {transformers.__version__} {tokenizers.__version__}".encode())
    for name in sources:
        digest.update((HERE / name).read_bytes())
    return digest.hexdigest()[:16]


def built(out: Path, build: Callable[[Path], None]) -> Path:
    """`out`, made by `build(out)` on first use under a file lock (another process may be building it too) and
    reused afterwards; `build` must write it atomically (engine.models.save_atomically)."""
    if (out / "config.json").is_file():
        return out
    from engine.models import file_lock

    with file_lock(out):
        if not (out / "config.json").is_file():
            build(out)
    return out
