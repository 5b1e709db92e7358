"""Models from the page without a restart (issue 30, item 5), on the app as `python app.py` builds it (`new_pool`,
then `load_first`): the bundled models are always offered, a bundled model not on disk is described from its
published facts and fetched only when picked (never before the default model serves), and the pick is each page
session's own, through the page's `/model` endpoint (gradio_client here; tests/playground/browser/test_ui_browser_models.py in
Chromium).

The server's cache holds only the converted SmolLM2 and the built demo models (links to the session's), so a
Gemma download would show there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MODEL, LiveServer
from tests.models_fixture import GEMMA_ID as GEMMA
from tests.models_fixture import QWEN, default_only_server, gemma_on_disk
from tests.playground.test_ui import CHATBOT, RAW, REQUEST, answer, client

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)


@pytest.fixture(scope="module")
def fresh(settings: Any, tiny_qwen_dir: Path, tmp_path_factory: Any) -> Iterator[tuple[LiveServer, Path, float]]:
    with default_only_server(settings, tiny_qwen_dir, tmp_path_factory.mktemp("fresh-cache")) as served:
        yield served


def test_the_bundled_models_are_offered_and_none_is_fetched_before_the_default_serves(fresh: Any) -> None:
    server, cache, ready = fresh
    with server.client() as c:
        assert c.get("/health").status_code == 200
        data = {m["id"]: m for m in c.get("/v1/models").json()["data"]}
    assert list(data) == [MODEL, GEMMA, QWEN]
    assert [m["status"] for m in data.values()] == ["loaded", "loadable", "loadable"]
    gemma = data[GEMMA]  # its published facts, and what picking it downloads first
    assert gemma["architecture"] == "gemma3_text" and gemma["parameters"] == 268_098_176
    assert gemma["max_model_len"] == 32768 and gemma["download_bytes"] > 200e6 and gemma["memory_bytes"] > 0
    assert (data[QWEN]["reasoning"], data[QWEN]["tools"]) == (True, True)
    assert gemma_on_disk(cache) == [], gemma_on_disk(cache)  # nothing of Gemma was downloaded or converted
    print(f"/health 200 after {ready:.1f} s")


def first_chunk(out: list[Any]) -> dict[str, Any]:
    return json.loads(next(line for line in out[RAW].splitlines() if line.strip().startswith("{")))


def test_two_sessions_each_talk_to_the_model_they_picked(fresh: Any) -> None:
    server, cache, _ = fresh
    picker, other = client(server.url), client(server.url)
    _, _, header = picker.predict(name=QWEN, admin_key="", api_name="/model")  # loads it (built once, cached)
    assert f"<b>{QWEN}</b>" in header
    ask = {"message": "What is 2+2?", "system": "", "temperature": 0.0, "max_tokens": 64, "api_name": "/chat"}
    mine, theirs = picker.predict(**ask), other.predict(**ask)
    assert first_chunk(mine)["model"] == QWEN and f'"model": "{QWEN}"' in mine[REQUEST]
    assert "4" in answer(mine[CHATBOT])
    # The other session picked nothing: it still talks to the default model, which the pick did not replace.
    assert first_chunk(theirs)["model"] == MODEL and f'"model": "{MODEL}"' in theirs[REQUEST]
    other.predict(name=MODEL, admin_key="", api_name="/model")
    assert first_chunk(other.predict(**ask))["model"] == MODEL
    assert first_chunk(picker.predict(**ask))["model"] == QWEN  # the other's pick did not change this one's
    with server.client() as c:
        statuses = {m["id"]: m["status"] for m in c.get("/v1/models").json()["data"]}
    assert statuses == {MODEL: "loaded", GEMMA: "loadable", QWEN: "loaded"}
    assert gemma_on_disk(cache) == []


def test_an_unknown_model_is_refused_with_a_clear_message(fresh: Any) -> None:
    server, _, _ = fresh
    session = client(server.url)
    picker, _, header = session.predict(name="no-such-model", admin_key="", api_name="/model")
    assert picker["value"] == MODEL  # the pick stays as it was
    ask = {"message": "Hi", "system": "", "temperature": 0.0, "max_tokens": 4, "api_name": "/chat"}
    assert first_chunk(session.predict(**ask))["model"] == MODEL


FACTS = (
    "parameters",
    "architecture",
    "context_length",
    "reasoning",
    "tools",
    "kv_bytes_per_token",
    "window",
    "window_bytes_per_token",
)


def test_the_facts_offered_before_a_fetch_are_what_the_files_say(settings: Any, tiny_qwen_dir: Path) -> None:
    """The tiny Qwen3 and SmolLM2 as the picker lists them before they are on disk, and as their files say once
    they are (Gemma 3 270M: tests/engine/test_gemma3_270m.py)."""
    from demo_models.offer import demo_qwen_candidate
    from engine import model_registry, models

    qwen = demo_qwen_candidate()
    smol = model_registry.describe_static("", MODEL, models.DEFAULT_CONFIG, models.DEFAULT_PARAMETERS, 1)
    smol_dir = models.resolve_model_dir("", models.cache_root(settings.cache_dir))[0]
    for static, path in ((qwen, tiny_qwen_dir), (smol, smol_dir)):
        real = model_registry.describe(static.source, static.id, path)
        assert {f: getattr(static, f) for f in FACTS} == {f: getattr(real, f) for f in FACTS}


def test_loading_from_the_page_takes_an_admin_key_as_on_the_api(settings: Any, tmp_path: Path) -> None:
    """Once credentials are set, the page's `/model` loads a model for an admin key only (typed beside the picker),
    as a chat request on the API does; a user's key leaves it unloaded and the session on its model."""
    from gradio_client import Client

    from tests.models_fixture import models_server

    with models_server(settings, tmp_path, api_keys=["user"], admin_keys=["root"]) as server:
        ui = Client(server.url + "/", auth=("me", "user"), verbose=False, download_files=False)
        for key in ("", "user"):
            picker, _, _ = ui.predict(name=QWEN, admin_key=key, api_name="/model")
            assert picker["value"] != QWEN
        with server.client(headers={"Authorization": "Bearer user"}) as c:
            assert c.get(f"/v1/models/{QWEN}").json()["status"] == "loadable"
        ask = {"message": "What is 2+2?", "system": "", "temperature": 0.0, "max_tokens": 8, "api_name": "/chat"}
        assert first_chunk(ui.predict(**ask))["model"] == MODEL
        _, _, header = ui.predict(name=QWEN, admin_key="root", api_name="/model")
        assert f"<b>{QWEN}</b>" in header
        assert first_chunk(ui.predict(**ask))["model"] == QWEN
