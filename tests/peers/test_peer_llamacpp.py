"""llama.cpp beside the session's live server, on the same GGUF (issue 32's peer): llama-cpp-python's own server
serves the bundled SmolLM2's Q4_1 file, and its own types say what a llama.cpp client sends and expects.

- the same greedy prompt gets a sane answer from both servers, and the same chat question the same prompt tokens
  (the GGUF's chat template) and a first token among llama.cpp's top 3;
- a request body as llama-cpp-python builds it (`llama_cpp.server.types.CreateChatCompletionRequest`, with its
  extension fields: top_k, min_p, repeat_penalty, mirostat, min_tokens, logit_bias_type) is served by ours;
- our responses, plain and streamed, on both routes, validate against llama-cpp-python's response types
  (`llama_cpp.llama_types`, what code written against llama.cpp's OpenAI-compatible API reads).

llama.cpp is a peer, never a dependency: the test runs it from its own venv, given by PLAYGROUND_LLAMACPP_VENV
(`pip install 'llama-cpp-python[server]'` there, as bench/README.md says), and is skipped without one."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import MODEL, sse_events
from tests.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from peer_llamacpp import NO_EXTRA_BUFTS  # bench/ is not a package: its folder is on the path above

VENV = os.environ.get("PLAYGROUND_LLAMACPP_VENV", "")
PYTHON = Path(VENV).expanduser() / "bin" / "python"
pytestmark = [
    pytest.mark.peer_llamacpp,
    pytest.mark.skipif(
        not VENV or not PYTHON.exists() or subprocess.run([PYTHON, "-c", "import llama_cpp.server"]).returncode != 0,
        reason="llama.cpp is not installed here: set PLAYGROUND_LLAMACPP_VENV to a venv with llama-cpp-python[server]",
    ),
]
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]

# Run in the llama.cpp venv: validate each JSON document of stdin against the llama_cpp.llama_types TypedDict named
# by its "type", with pydantic (a dependency of llama-cpp-python's server); print one error string per document.
VALIDATE = """
import json, sys
from pydantic import TypeAdapter, ValidationError
from llama_cpp import llama_types
out = []
for item in json.load(sys.stdin):
    try:
        TypeAdapter(getattr(llama_types, item["type"])).validate_python(item["doc"], strict=False)
        out.append("")
    except ValidationError as e:
        out.append(item["type"] + ": " + str(e))
print(json.dumps(out))
"""
# Run in the llama.cpp venv: the body llama-cpp-python's request model makes of a few fields (its defaults filled in).
REQUEST = """
import json, sys
from llama_cpp.server.types import CreateChatCompletionRequest
body = CreateChatCompletionRequest(**json.loads(sys.argv[1]))
print(body.model_dump_json(exclude_none=True))
"""


def in_venv(code: str, *args: str, stdin: str = "") -> str:
    run = subprocess.run([PYTHON, "-c", code, *args], input=stdin, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def llamacpp(live: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's server on the GGUF the live server was converted from, under the same model name."""
    from engine import models
    from engine.core.cpu_kernels import cpu_flags

    gguf = models.gguf_source(live.settings.model, models.cache_root(live.settings.cache_dir))
    assert gguf is not None, "the live server's model has no GGUF on disk"
    port = free_port()
    amx = "amx_int8" in cpu_flags()  # llama.cpp's AMX path segfaults on this project's AMX VMs: bench/peer_llamacpp.py
    launch = ["-c", NO_EXTRA_BUFTS] if amx else ["-m", "llama_cpp.server"]
    cmd = [PYTHON, *launch, "--model", gguf, "--model_alias", MODEL, "--port", port]
    cmd += ["--n_threads", "2", "--n_ctx", "2048", "--interrupt_requests", "False"]
    log = tmp_path_factory.mktemp("llamacpp") / "server.log"
    with open(log, "w") as out:
        # llama.cpp's OpenMP with its own defaults, not the passive wait `import engine` set for ours
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        proc = subprocess.Popen([str(x) for x in cmd], stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "llama.cpp's server did not start: " + log.read_text()[-3000:]
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def greedy(url: str, **extra: Any) -> dict:
    # repeat_penalty is llama.cpp's (ours ignores the unknown field): its server's default of 1.1 applies even to
    # greedy requests and penalises the question's words, which the answer repeats ("The capital of France is")
    body = {"model": MODEL, "messages": QUESTION, "temperature": 0, "max_tokens": 24, "repeat_penalty": 1.0, **extra}
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def validate(docs: list[tuple[str, Any]]) -> None:
    errors = json.loads(in_venv(VALIDATE, stdin=json.dumps([{"type": t, "doc": d} for t, d in docs])))
    assert errors == [""] * len(docs), [e for e in errors if e]


def test_the_same_greedy_prompt_gets_a_sane_answer_from_both(live: Any, llamacpp: str) -> None:
    body = {"model": MODEL, "prompt": "The capital of France is", "temperature": 0, "max_tokens": 8}
    for url in (live.url, llamacpp):
        r = httpx.post(url + "/v1/completions", json={**body, "repeat_penalty": 1.0}, timeout=300)
        assert r.status_code == 200, r.text
        assert "Paris" in r.json()["choices"][0]["text"], (url, r.json())


def test_the_chat_prompt_is_the_same_and_the_first_token_agrees(live: Any, llamacpp: str) -> None:
    """The GGUF's own chat template over the same tokenizer: the same prompt, token for token. The first reply
    token may differ where the model's top two are nearly tied (Q4_1 x float32 here, x Q8_1 activations in
    llama.cpp: "The" -1.97 against "L" -1.88 there for this question), so ours must be among llama.cpp's top 3."""
    ours, theirs = greedy(live.url, max_tokens=1), greedy(llamacpp, max_tokens=1, logprobs=True, top_logprobs=3)
    assert ours["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"], (ours["usage"], theirs["usage"])
    top3 = [t["token"] for t in theirs["choices"][0]["logprobs"]["content"][0]["top_logprobs"]]
    assert ours["choices"][0]["message"]["content"] in top3, (ours["choices"][0]["message"], top3)


def test_a_request_as_llama_cpp_python_builds_it_is_served(live: Any) -> None:
    fields = {
        "model": MODEL,
        "messages": QUESTION,
        "max_tokens": 24,
        "temperature": 0,
        "logit_bias": {"2": -100.0},  # llama.cpp's way to keep <|im_end|> (EOS) out; ours takes the same map
        "logit_bias_type": "input_ids",
        "min_tokens": 0,
        "seed": 1,
    }
    body = json.loads(in_venv(REQUEST, json.dumps(fields)))
    assert {"top_k", "min_p", "repeat_penalty", "mirostat_mode"} <= body.keys()  # its defaults came along
    r = httpx.post(live.url + "/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["choices"][0]["finish_reason"] == "length"  # EOS biased away: it ran to max_tokens
    assert reply["usage"]["completion_tokens"] == 24
    validate([("CreateChatCompletionResponse", reply)])


def test_our_responses_have_llama_cpp_python_s_shapes(live: Any) -> None:
    docs: list[tuple[str, Any]] = [("CreateChatCompletionResponse", greedy(live.url, max_tokens=8))]
    body = {"model": MODEL, "messages": QUESTION, "temperature": 0, "max_tokens": 8, "stream": True}
    body["stream_options"] = {"include_usage": True}  # its last chunk (no choices, the usage) must fit the type too
    r = httpx.post(live.url + "/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    chunks = [e for e in sse_events(r.text) if e != "[DONE]"]
    assert len(chunks) >= 2
    docs += [("CreateChatCompletionStreamResponse", c) for c in chunks]
    body = {"model": MODEL, "prompt": "The capital of France is", "temperature": 0, "max_tokens": 8}
    r = httpx.post(live.url + "/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    docs.append(("CreateCompletionResponse", r.json()))
    docs.append(("CompletionUsage", r.json()["usage"]))
    validate(docs)
