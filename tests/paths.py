"""Paths the tests read, wherever a test module lives under tests/."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository
DATA = ROOT / "tests" / "data"  # recorded samples (speech.flac)
FAKE_NPU = ROOT / "tests" / "fake_torch_npu"  # the FAKE torch_npu package (hardware not here)
