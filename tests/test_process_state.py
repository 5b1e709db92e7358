"""Loading a model and building the service leave the process as they found it (issue 14).

A notebook's kernel, a test session and the app all call `engine.models.load()` and `app.build_service()`; only
app.py's `main()` may set process-wide switches, on purpose. The check runs in a fresh interpreter so that nothing
an earlier test did hides a change (one test set `torch.set_grad_enabled(False)` for the whole session unseen, and
the tiny Qwen3 could then not be trained on a fresh machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import hashlib, json, logging, os, sys, warnings
import engine  # the documented pre-torch settings happen here, before the first snapshot
import torch
# What third-party modules do when first imported is theirs, not a side effect of loading: importing
# transformers' modelling code sets TORCHINDUCTOR_CACHE_DIR and adds warning filters (torch._inductor).
import transformers.modeling_utils

def snapshot():
    return {
        "grad_enabled": torch.is_grad_enabled(),
        "inference_mode": torch.is_inference_mode_enabled(),
        "default_dtype": str(torch.get_default_dtype()),
        "num_threads": torch.get_num_threads(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "anomaly": torch.is_anomaly_enabled(),
        "rng": hashlib.sha256(torch.random.get_rng_state().numpy().tobytes()).hexdigest(),
        "environ": dict(os.environ),
        "root_logger": [logging.getLogger().level, len(logging.getLogger().handlers)],
        "warning_filters": len(warnings.filters),
    }

# Values that differ from what the engine would pick, so a change cannot go unseen: one thread (the app's
# --threads default is one per core) and a seeded global generator.
torch.set_num_threads(1)
torch.manual_seed(1234)
before = snapshot()
steps = {}

from engine import models
loaded = models.load("", models.cache_root(os.environ.get("PLAYGROUND_CACHE_DIR", "")), "cpu", torch.float32)
steps["engine.models.load()"] = snapshot()
assert not any(p.requires_grad for p in loaded.model.parameters()), "the loaded model's parameters are frozen"
del loaded

from app import build_service, settings_from
service = build_service(settings_from([], environ={}))
steps["app.build_service()"] = snapshot()

from playground.notebooks import connect
reply = connect(service).chat("Say hi.", max_tokens=3, temperature=0)
steps["a request through the service"] = snapshot()
service.engine.shutdown()

diffs = {step: {k: [before[k], v] for k, v in state.items() if v != before[k]} for step, state in steps.items()}
for step in diffs.values():  # name only the variables that changed, not the whole environment
    if "environ" in step:
        old, new = step["environ"]
        step["environ"] = {k: [old.get(k), new.get(k)] for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
print("RESULT", json.dumps({"diffs": diffs, "tokens": reply.completion_tokens}))
"""


def test_load_and_build_service_change_no_process_wide_state() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
    assert out.returncode == 0, out.stderr[-4000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    assert result["tokens"] > 0, result  # the service really ran a request
    assert result["diffs"] == {step: {} for step in result["diffs"]}, result["diffs"]


def test_importing_engine_sets_only_the_documented_pre_torch_variables() -> None:
    """engine/__init__.py is the one place that touches the environment, and only with defaults."""
    code = "import os, json; before = dict(os.environ); import engine; print(json.dumps({k: v for k, v in os.environ.items() if before.get(k) != v}))"
    env = {k: v for k, v in os.environ.items() if k not in {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"}}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    changed = json.loads(out.stdout)
    assert set(changed) <= {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "TORCH_DEVICE_BACKEND_AUTOLOAD"}, changed
    assert changed.get("OMP_WAIT_POLICY") == "PASSIVE", changed
    # a value the user set wins
    env["OMP_WAIT_POLICY"] = "ACTIVE"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert "OMP_WAIT_POLICY" not in json.loads(out.stdout)
