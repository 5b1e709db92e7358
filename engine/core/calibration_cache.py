"""Kernel choices timed at load, kept on disk: a warm start applies what its last start measured.

`quant.calibrate` (which kernel serves each quantized matrix shape) and `projection.calibrate_bf16` (from how many
rows bf16 inputs go to oneDNN) time the kernels on the model's own matrices at every load: 9 s of a 2-core warm
start for SmolLM2's Q4_1 blocks. Their decisions (not the timings) are kept here, one small JSON file per matrix
shape, under the model cache's `calibration/`, keyed by everything the outcome depends on: the CPU (model name and
feature flags), torch's version, the thread count, the source of the kernels and of the code that times and
decides (cpu_kernels.cpp and .py, quant.py, projection.py: a new kernel build or a new rule times again), the
matrix's shape and layout, and what the caller adds (the runner's dtypes). A changed key is a different file, so
it is timed again; a file that cannot be read, or whose key is not the one asked for, is logged and replaced. To
time everything again, delete the folder. Nothing is cached without a `CalibrationCache` (tests, notebooks that
build runners themselves time as before).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

FORMAT = 1
FOLDER = "calibration"
_CODE = ("cpu_kernels.cpp", "cpu_kernels.py", "quant.py", "projection.py")  # beside this module


@functools.lru_cache(maxsize=1)
def machine() -> dict[str, Any]:
    """What a timing depends on that does not change while the process runs: the CPU, torch, the code."""
    from engine.core.cpu_kernels import cpu_flags

    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    code = hashlib.sha256()
    for name in _CODE:
        code.update((Path(__file__).parent / name).read_bytes())
    return {
        "cpu": model,
        "machine": platform.machine(),
        "flags": hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:16],
        "torch": torch.__version__,
        "code": code.hexdigest()[:16],
    }


class CalibrationCache:
    """Decisions under `root / FOLDER`, one file per (kind, what was timed, the machine, `context`)."""

    def __init__(self, root: str | Path, context: dict[str, Any] | None = None) -> None:
        self.folder = Path(root) / FOLDER
        self.context = dict(context or {})

    def within(self, **context: Any) -> CalibrationCache:
        """The same folder with more of the key (the caller's dtypes, ...)."""
        return CalibrationCache(self.folder.parent, {**self.context, **context})

    def key(self, kind: str, what: dict[str, Any]) -> dict[str, Any]:
        # The thread count is read when asked, not set: the composition root sizes the pool (app.py).
        return {
            "format": FORMAT,
            "kind": kind,
            "what": what,
            "context": self.context,
            "threads": torch.get_num_threads(),
            **machine(),
        }

    def path(self, key: dict[str, Any]) -> Path:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]
        return self.folder / f"{key['kind']}-{digest}.json"

    def get(self, kind: str, what: dict[str, Any]) -> Any:
        """The decision kept for this key, or None (nothing kept, or a file that is not one: logged, never raised)."""
        key = self.key(kind, what)
        path = self.path(key)
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("calibration cache %s unreadable (%s): timing again", path, exc)
            return None
        try:
            stored = json.loads(text.decode("utf-8"))
            if not isinstance(stored, dict) or "decision" not in stored:
                raise ValueError("not a calibration record")
            if stored.get("key") != json.loads(json.dumps(key, default=str)):
                raise ValueError("its key is not this machine's, code's or matrix's")
        except ValueError as exc:  # not UTF-8, not JSON: ValueErrors too
            log.warning("calibration cache %s ignored (%s): timing again", path, exc)
            return None
        return stored["decision"]

    def put(self, kind: str, what: dict[str, Any], decision: Any) -> None:
        """Keep `decision` (JSON) for this key: written whole or not at all; a folder that cannot be written is
        logged, and the next start times again."""
        key = self.key(kind, what)
        path = self.path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump({"key": key, "decision": decision}, f, default=str)
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except OSError as exc:
            log.warning("calibration cache %s not written (%s): the next start times again", path, exc)
