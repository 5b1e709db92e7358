"""Device choice: npu > cuda > mps > cpu, and a broken torch_npu never stops the app."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine import device
from tests.paths import FAKE_NPU, ROOT

FAKE_NPU = FAKE_NPU


def test_cpu_resolves_to_fp32_and_an_explicit_dtype_wins() -> None:
    assert device.resolve_device("cpu") == "cpu"
    assert device.placement("cpu", "auto").dtype_name == "fp32"
    assert device.placement("cpu", "bf16").dtype_name == "bf16"


@pytest.mark.skipif(device.ascend_drivers_present(), reason="this host has Ascend drivers")
def test_auto_on_a_host_without_accelerators_is_cpu() -> None:
    import torch

    if torch.cuda.is_available() or torch.backends.mps.is_available():
        pytest.skip("this host has an accelerator")
    assert device.resolve_device("auto") == "cpu"


def test_explicit_unavailable_device_is_an_error() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    with pytest.raises(RuntimeError, match="cuda"):
        device.resolve_device("cuda")


def test_installed_but_unusable_torch_npu_falls_back_to_cpu_with_a_log_line() -> None:
    code = (
        "import logging, engine; logging.basicConfig(level=logging.INFO);"
        "from engine import device; device.prepare_torch_import(); import torch;"
        "import os; print('AUTOLOAD', os.environ.get('TORCH_DEVICE_BACKEND_AUTOLOAD'));"
        "print('DEVICE', device.resolve_device('auto'))"
    )
    env = {**os.environ, "PYTHONPATH": f"{FAKE_NPU}{os.pathsep}{ROOT}"}
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "AUTOLOAD 0" in out.stdout and "DEVICE cpu" in out.stdout
    assert "NPU skipped: torch_npu is installed but no Ascend driver was found" in out.stderr
