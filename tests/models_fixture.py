"""A server with two models (issue 22): the bundled SmolLM2, served at start, and a second model that loads on
demand from `--models-dir`. The second model is named here once: swap `SECOND` for another checkpoint (Gemma 3
270M once the runner takes it) and every multi-model test, API and browser, runs against it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import LiveServer


def tiny_qwen() -> Path:
    from demo_models.tiny_qwen import build_tiny_qwen

    return build_tiny_qwen()


# (the id it is served as: its directory name in --models-dir, how to build or find its directory)
SECOND: tuple[str, Callable[[], Path]] = ("tiny-qwen3", tiny_qwen)
SECOND_ID = SECOND[0]


@contextlib.contextmanager
def models_server(settings: Any, root: Path, **changes: Any) -> Iterator[LiveServer]:
    """The real app serving the bundled model with `--models-dir root` holding the second model (a link to its
    cached directory), built as app.main builds it (`build_service`, then `build_pool`), on a loopback port."""
    from app import build_pool, build_service, serve_in_thread

    models_dir = root / "models"
    models_dir.mkdir(exist_ok=True)
    link = models_dir / SECOND_ID
    if not link.exists():
        link.symlink_to(SECOND[1](), target_is_directory=True)
    cfg = settings.replace(models_dir=str(models_dir), **changes)
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
