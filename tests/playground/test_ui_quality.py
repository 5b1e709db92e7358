"""The quality meter and the precision entries on a live server (issue 32 item 5), as `python app.py --models @int4
--models @bf16` builds it (`build_service`, then `build_pool`): SmolLM2 served at its own Q4_1 blocks
(`--quantization auto`), its precision entries offered on /v1/models, and a reply measured through the page's
`/quality` endpoint (gradio_client) and the notebooks' `backend.quality`, the `@fp32` reference loading on first
use. tests/playground/browser/test_ui_browser_quality.py drives the same in Chromium."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import MODEL, LiveServer
from tests.playground.test_ui import CHATBOT, STATS, answer, client

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

PRECISIONS = ["@int4", "@bf16"]
REFERENCE = MODEL + "@fp32"


@contextlib.contextmanager
def quality_server(settings: Any) -> Iterator[tuple[LiveServer, Any]]:
    """(the server, its pool): SmolLM2 at Q4_1 and its precision entries."""
    from app import build_pool, build_service, serve_in_thread
    from engine import models

    if models.gguf_source(settings.model, models.cache_root(settings.cache_dir)) is None:
        pytest.skip("the bundled GGUF is not on disk")
    cfg = settings.replace(quantization="auto", models=PRECISIONS)
    pool = build_pool(cfg, build_service(cfg))
    if pool.get(MODEL).engine.runner.quantization == "none":
        pool.shutdown()
        pytest.skip("no CPU kernels here: the GGUF's blocks are served dequantized")
    background = serve_in_thread(cfg, None, pool=pool)
    try:
        url = httpx.URL(background.url)
        yield LiveServer(background.url, None, cfg.replace(host=url.host, port=url.port), background.server), pool
    finally:
        background.stop()
        pool.shutdown()


@pytest.fixture(scope="module")
def served(settings: Any) -> Iterator[tuple[LiveServer, Any]]:
    with quality_server(settings) as out:
        yield out


def test_precision_entries_are_pool_entries_of_their_own(served: Any) -> None:
    server, _ = served
    with server.client() as c:
        data = {m["id"]: m for m in c.get("/v1/models").json()["data"]}
    assert [i for i in data if i.startswith(MODEL)] == [MODEL, MODEL + "@int4", MODEL + "@bf16"]
    assert data[MODEL]["quantization"] == "Q4_1 x120" and data[MODEL]["status"] == "loaded"
    assert (data[MODEL + "@int4"]["precision"], data[MODEL + "@int4"]["status"]) == ("int4", "loadable")
    assert "precision" not in data[MODEL]


def test_the_page_measures_a_reply_against_its_fp32_copy(served: Any) -> None:
    server, pool = served
    ui = client(server.url)
    out = ui.predict(message="Name a colour.", system="", temperature=0.0, max_tokens=6, api_name="/chat")
    assert answer(out[CHATBOT])
    note, table, heat = ui.predict(admin_key="", api_name="/quality")
    assert "top-1 agreement" in note and "against fp32" in note, note
    assert 'data-stat="quality"' in table and "mean KL" in table
    assert "pg-quality" in heat and '"q":[[' in heat
    assert pool.status(REFERENCE) == "loaded"  # offered and loaded on first use
    with server.client() as c:
        card = c.get(f"/v1/models/{REFERENCE}").json()
    assert (card["precision"], card["quantization"]) == ("fp32", "none")
    assert out[STATS]  # the chat's own stats were there before


def test_the_notebooks_measure_a_result(served: Any) -> None:
    from engine.serving.policy import RequestPolicy
    from playground.client.backend import ModelBackend
    from playground.notebooks.backend import LocalBackend

    server, pool = served
    backend = LocalBackend(policy=RequestPolicy(server.settings.serving, pool.current_service, models=pool))
    result = backend.chat("Say hello.", temperature=0.0, max_tokens=5)
    report = backend.quality(result, reference=REFERENCE)
    assert report.reference == REFERENCE and report.precision == "Q4_1" and len(report.tokens) == 5
    assert 0.0 <= report.mean_kl < 1.0 and report.agreement is not None
    assert result.view.quality["summary"] == report.summary()
    # the reference itself is full precision: said so, not measured
    full = ModelBackend(backend.policy, REFERENCE)
    same = full.quality(full.chat("Say hello.", temperature=0.0, max_tokens=3))
    assert same.full_precision and not same.tokens
