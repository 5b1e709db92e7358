"""lm-evaluation-harness's `local-completions` model against the session's live server (issue 33, item 7): it
scores each choice of a multiple-choice task through /v1/completions with `echo` and `logprobs`, as it scores any
OpenAI-compatible server. A tiny task made here (three questions, a JSONL file and its YAML) runs offline; the
bundled model must get every capital right. lm-eval is a peer, never a dependency: the test runs it from
its own venv, given by PLAYGROUND_LMEVAL_VENV (`pip install 'lm-eval[api]' transformers` there), and is skipped
without one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MODEL

VENV = os.environ.get("PLAYGROUND_LMEVAL_VENV", "")
pytestmark = [
    pytest.mark.peer_lmeval,
    pytest.mark.skipif(
        not VENV or not (Path(VENV) / "bin" / "lm_eval").exists(),
        reason="lm-eval is not installed here: set PLAYGROUND_LMEVAL_VENV to a venv with lm-eval[api]",
    ),
]
QUESTIONS = [
    ("The capital of France is", 0),
    ("The capital of Germany is", 1),
    ("The capital of Spain is", 2),
]
CHOICES = [" Paris", " Berlin", " Madrid"]
TASK = """task: tiny_capitals
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""


def test_local_completions_scores_a_multiple_choice_task(live: Any, tmp_path: Path) -> None:
    data = tmp_path / "tiny.jsonl"
    data.write_text("".join(json.dumps({"question": q, "choices": CHOICES, "answer": a}) + "\n" for q, a in QUESTIONS))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "tiny_capitals.yaml").write_text(TASK.format(data=data))
    tokenizer = live.service.tokenizer.name_or_path  # the served model's own tokenizer files
    args = f"model={MODEL},base_url={live.url}/v1/completions,tokenizer={tokenizer},tokenized_requests=False"
    cmd = [
        str(Path(VENV) / "bin" / "lm_eval"),
        "--model",
        "local-completions",
        "--model_args",
        f"{args},num_concurrent=1,max_retries=1",
        "--tasks",
        "tiny_capitals",
        "--include_path",
        str(tmp_path / "tasks"),
        "--output_path",
        str(tmp_path / "out"),
    ]
    offline = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=540, cwd=tmp_path, env={**os.environ, **offline})
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    (result,) = (tmp_path / "out").rglob("results_*.json")
    scores = json.loads(result.read_text())["results"]["tiny_capitals"]
    assert scores["acc,none"] == 1.0, scores
