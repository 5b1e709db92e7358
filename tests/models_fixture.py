"""A server with two models (issue 22): the bundled SmolLM2, served at start, and a second model that loads on
demand from `--models-dir`: `SECOND` (the tiny Qwen3) for the API tests, `GEMMA` (Gemma 3 270M) for the browser's
switch."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import LiveServer


def tiny_qwen() -> Path:
    from demo_models.tiny_qwen import build_tiny_qwen

    return build_tiny_qwen()


@dataclass(frozen=True)
class Second:
    """The second model and what the tests expect of it."""

    id: str  # what it is served as: its name in --models-dir
    path: Callable[[], Path]  # builds or finds its directory (or .gguf file)
    architecture: str
    context: str  # its context window as the page's meter writes it
    caps: tuple[str, ...]  # what the picker's line says it can do beyond text
    question: str  # a prompt it answers with `answer` in the reply under greedy decoding
    answer: str
    bundled: bool = False  # offered by the server itself (app.model_candidates): no link in --models-dir


def gemma_270m() -> Path:
    import os

    from engine.models import cache_root, resolve_model_dir

    # fetched and converted once into the session's cache (tests/conftest.py `gemma_service` does the same)
    return resolve_model_dir("gemma-3-270m", cache_root(os.environ.get("PLAYGROUND_CACHE_DIR", "")))[0]


SECOND = Second("tiny-qwen3", tiny_qwen, "qwen3", "4,096", ("reasoning", "tools"), "What is 2+2?", "4")
SECOND_ID = SECOND.id
# The real second model: Gemma 3 270M, a base model on the plain template (engine/serving/plain_template.jinja).
# The browser's switch test uses it, as the server offers it (bundled: loaded on demand from the session's cache,
# where `gemma_270m` made sure it is); the API tests keep the tiny Qwen3, which loads in a second.
GEMMA = Second(
    "gemma-3-270m",
    gemma_270m,
    "gemma3_text",
    "32,768",
    (),
    "Question: What is the capital of France?\nAnswer:",
    "Paris",
    bundled=True,
)


def models_settings(settings: Any, root: Path, second: Second = SECOND, **changes: Any) -> Any:
    """The settings of `models_server`: `--models-dir root/models` holding the second model (fetched or built
    first), a link to its cached directory unless the server offers it itself (`Second.bundled`)."""
    models_dir = root / "models"
    models_dir.mkdir(exist_ok=True)
    target = second.path()
    link = models_dir / (second.id + ("" if target.is_dir() else target.suffix))  # a .gguf keeps its suffix
    if not link.exists() and not second.bundled:
        link.symlink_to(target, target_is_directory=target.is_dir())
    return settings.replace(models_dir=str(models_dir), **changes)


def memory_bytes(settings: Any, root: Path, second: Second, ids: tuple[str, ...]) -> int:
    """What the models `ids` of `models_server(settings, root, second)` cost loaded together, as its /v1/models
    says (`memory_bytes`), read from its pool's registry without loading or serving anything."""
    from app import build_pool

    pool = build_pool(models_settings(settings, root, second))
    try:
        return sum(pool.memory_bytes(i) for i in ids)
    finally:
        pool.shutdown()


@contextlib.contextmanager
def models_server(settings: Any, root: Path, second: Second = SECOND, **changes: Any) -> Iterator[LiveServer]:
    """The real app serving the bundled model with `--models-dir root` holding the second model (a link to its
    cached directory; none for a model the server offers itself, `Second.bundled`), built as app.main builds it (`build_service`, then `build_pool`), on a loopback port."""
    from app import build_pool, build_service, serve_in_thread

    cfg = models_settings(settings, root, second, **changes)
    pool = build_pool(cfg, build_service(cfg))
    background = serve_in_thread(cfg, None, pool=pool)
    try:
        url = httpx.URL(background.url)
        yield LiveServer(background.url, None, cfg.replace(host=url.host, port=url.port), background.server)
    finally:
        background.stop()
        pool.shutdown()


def wait_loaded(client: httpx.Client, model_id: str, timeout: float = 300, **kw: Any) -> dict[str, Any]:
    """Poll GET /v1/models/{id} until its status is no longer `loading`; returns the card."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        card = client.get(f"/v1/models/{model_id}", **kw).json()
        if card["status"] != "loading" or time.monotonic() > deadline:
            return card
        time.sleep(0.2)


# ---- a server as `python app.py` starts it, with only the default model on disk (issue 30, item 5) -----------------

GEMMA_ID, QWEN = "gemma-3-270m", "tiny-qwen3"  # the bundled models app.model_candidates always offers


@contextlib.contextmanager
def default_only_server(settings: Any, qwen_dir: Path, cache: Path) -> Iterator[tuple[LiveServer, Path, float]]:
    """(the server, its cache directory, seconds from the start to /health 200): the app as app.main builds it
    (`new_pool`, `load_first`, the first model loading in the background) on a cache directory holding only the
    converted SmolLM2 and the built demo models (links to the session's), so a Gemma download would show there."""
    import time

    from app import load_first, new_pool, serve_in_thread
    from demo_models.tiny_qwen import tiny_qwen_dir
    from engine.models import cache_root, resolve_model_dir

    smol = resolve_model_dir("", cache_root(settings.cache_dir))[0]
    (cache / "models").mkdir()
    (cache / "models" / smol.name).symlink_to(smol, target_is_directory=True)
    # The session's demo models, where the loader looks: a pick of the tiny Qwen3 must find it built (a link one
    # level too deep made every run train it again inside the pick, 2-5 minutes, and CI's reply then timed out).
    (cache / "demo-models").symlink_to(qwen_dir.parent.parent, target_is_directory=True)
    assert tiny_qwen_dir(cache / "demo-models").resolve() == qwen_dir.resolve()
    cfg = settings.replace(cache_dir=str(cache))
    started = time.monotonic()
    pool = new_pool(cfg)
    load_first(cfg, pool)
    background = serve_in_thread(cfg, None, pool=pool)
    try:
        with httpx.Client(base_url=background.url, timeout=30) as c:
            while c.get("/health").status_code != 200:
                assert time.monotonic() - started < 300, "the default model did not load"
                time.sleep(0.2)
        ready = time.monotonic() - started
        url = httpx.URL(background.url)
        yield (
            LiveServer(background.url, None, cfg.replace(host=url.host, port=url.port), background.server),
            cache,
            ready,
        )
    finally:
        background.stop()
        pool.shutdown()


def gemma_on_disk(cache: Path) -> list[str]:
    """What of Gemma 3 270M a cache directory holds: its converted model, its GGUF (both absent until it is picked)."""
    found = [p.name for p in (cache / "models").iterdir() if "gemma" in p.name]
    return found + ([p.name for p in (cache / "gguf").glob("gemma*")] if (cache / "gguf").is_dir() else [])
