"""Several models behind one server (issue 22, `--models-dir`): /v1/models lists the loaded and the loadable ones
with what the registry read from their files; a request for a loadable model starts loading it and is answered
503 with Retry-After (the spec's /v1 error body) while the loaded model keeps serving and /health stays 200; once
loaded both answer; a model the memory budget cannot hold beside the others unloads the least recently used one;
an unknown model is "Model not found"; loading is an administrator's action once credentials are set."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api_helpers import assert_v1_error
from tests.conftest import MODEL, LiveServer
from tests.models_fixture import SECOND, SECOND_ID, memory_bytes, models_server, wait_loaded

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

USER, BOSS = "user-key", "boss-key"
GEMMA = "gemma-3-270m"  # bundled: always offered beside the others (app.model_candidates), loadable


def ours(cards: list[dict[str, Any]], key: str = "status") -> dict[str, Any]:
    """{id: card[key]} of the two models these tests serve (the bundled ones the server also offers left out)."""
    return {m["id"]: m[key] for m in cards if m["id"] in (MODEL, SECOND_ID)}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def body(model: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": SECOND.question}],
        "max_tokens": 8,
        "temperature": 0,
        **extra,
    }


@pytest.fixture(scope="module")
def guarded(settings: Any, tmp_path_factory: Any) -> Iterator[LiveServer]:
    """Both models fit (the budget is what psutil says is free); `user` may chat, only `boss` may load."""
    root = tmp_path_factory.mktemp("models-guarded")
    with models_server(settings, root, api_keys=[USER, BOSS], admin_keys=[BOSS]) as server:
        yield server


def test_models_lists_the_loaded_and_the_loadable_with_what_their_files_say(guarded: LiveServer) -> None:
    with guarded.client(headers=bearer(USER)) as c:
        data = c.get("/v1/models").json()["data"]
    assert [m["id"] for m in data] == [MODEL, SECOND_ID, GEMMA]  # the link named tiny-qwen3 is the bundled one
    smol, second, gemma = data
    assert gemma["status"] == "loadable" and gemma["architecture"] == "gemma3_text"
    assert smol["status"] == "loaded" and second["status"] == "loadable"
    assert smol["architecture"] == "llama" and second["architecture"] == SECOND.architecture
    assert smol["parameters"] == 134_515_008  # SmolLM2-135M, from the safetensors headers
    assert second["parameters"] and second["size_bytes"] > 0 and second["memory_bytes"] > 0
    assert (smol["reasoning"], smol["tools"]) == (False, False)
    # the tiny Qwen3: <think> tokens, <tool_call> in its template
    assert (second["reasoning"], second["tools"]) == ("reasoning" in SECOND.caps, "tools" in SECOND.caps)
    assert second["input_modalities"][0] == "text" and second["max_model_len"] > 0
    for card in data:
        assert card["object"] == "model" and card["parent"] is None and not Path(card["root"]).is_absolute()


def test_loading_is_an_admin_action_once_credentials_are_set(guarded: LiveServer) -> None:
    with guarded.client() as c:
        refused = c.post("/v1/chat/completions", json=body(SECOND_ID), headers=bearer(USER))
        assert_v1_error(refused, 403, "admin key", SECOND_ID)
        assert_v1_error(c.post(f"/server/models/{SECOND_ID}/load", headers=bearer(USER)), 403, "admin key")
        assert_v1_error(c.post(f"/server/models/{SECOND_ID}/load"), 401)
        assert c.get(f"/v1/models/{SECOND_ID}", headers=bearer(USER)).json()["status"] == "loadable"


def test_a_request_for_a_loadable_model_loads_it_and_gets_503_until_it_is_ready(guarded: LiveServer) -> None:
    with guarded.client(headers=bearer(BOSS)) as c:
        first = c.post("/v1/chat/completions", json=body(SECOND_ID))
        assert_v1_error(first, 503, "is loading", SECOND_ID)
        assert int(first.headers["Retry-After"]) > 0
        # While it loads the first model keeps serving and /health stays 200.
        assert c.post("/v1/chat/completions", json=body(MODEL)).status_code == 200
        assert c.get("/health").status_code == 200
        card = wait_loaded(c, SECOND_ID)
        assert card["status"] == "loaded", card
        reply = c.post("/v1/chat/completions", json=body(SECOND_ID, max_tokens=64))
        assert reply.status_code == 200, reply.text
        assert reply.json()["model"] == SECOND_ID
        assert SECOND.answer in reply.json()["choices"][0]["message"]["content"]
        data = c.get("/v1/models").json()["data"]
        assert [(m["id"], m["status"]) for m in data] == [(MODEL, "loaded"), (SECOND_ID, "loaded"), (GEMMA, "loadable")]
        assert c.post("/v1/chat/completions", json=body(MODEL)).json()["model"] == MODEL


def test_tokenize_and_detokenize_answer_for_the_loaded_model_the_body_names(guarded: LiveServer) -> None:
    """They counted on the current model whatever the body named: a second model's name was "Model not found"."""
    with guarded.client(headers=bearer(BOSS)) as c:
        c.post("/v1/chat/completions", json=body(SECOND_ID))  # loads it (503 while it loads)
        assert wait_loaded(c, SECOND_ID)["status"] == "loaded"
        text = {"prompt": "The capital of France is", "return_token_strs": True}
        second = c.post("/tokenize", json={"model": SECOND_ID, **text})
        first = c.post("/tokenize", json={"model": MODEL, **text})
        assert second.status_code == first.status_code == 200, (second.text, first.text)
        assert second.json()["tokens"] != first.json()["tokens"]  # the Qwen vocabulary, not SmolLM2's
        back = c.post("/detokenize", json={"model": SECOND_ID, "tokens": second.json()["tokens"]})
        assert back.status_code == 200 and back.json()["prompt"] == text["prompt"], back.text
        assert_v1_error(c.post("/tokenize", json={"model": GEMMA, **text}), 503, f"Model '{GEMMA}' is not loaded.")
        assert c.get(f"/v1/models/{GEMMA}").json()["status"] == "loadable"  # counting never loads a model
        assert_v1_error(c.post("/tokenize", json={"model": "papaya", **text}), 422, "Model not found: 'papaya'.")


def test_an_unknown_model_is_model_not_found(guarded: LiveServer) -> None:
    with guarded.client(headers=bearer(BOSS)) as c:
        assert_v1_error(c.post("/v1/chat/completions", json=body("papaya")), 422, "Model not found: 'papaya'.")
        assert_v1_error(c.get("/v1/models/papaya"), 404, "Model not found")
        assert_v1_error(c.post("/server/models/papaya/load"), 404, "Model not found")


def test_a_model_that_does_not_fit_beside_the_others_unloads_the_least_recently_used(
    settings: Any, guarded: LiveServer, tmp_path_factory: Any
) -> None:
    with guarded.client(headers=bearer(USER)) as c:
        need = ours(c.get("/v1/models").json()["data"], "memory_bytes")
    budget_mb = sum(need.values()) // (1 << 20) - 1  # either model alone, never both
    root = tmp_path_factory.mktemp("models-tight")
    with models_server(settings, root, models_memory_mb=budget_mb) as server, server.client() as c:
        pool = server.server.config.app.state.policy.models
        first = weakref.ref(pool.get(MODEL))
        assert_v1_error(c.post("/v1/chat/completions", json=body(SECOND_ID)), 503, "is loading")
        assert wait_loaded(c, SECOND_ID)["status"] == "loaded"
        gc.collect()
        assert first() is None  # unloaded for real: nothing holds the first model's service (and weights) any more
        statuses = ours(c.get("/v1/models").json()["data"])
        assert statuses == {MODEL: "loadable", SECOND_ID: "loaded"}
        assert c.post("/v1/chat/completions", json=body(SECOND_ID)).status_code == 200
        assert c.get("/health").status_code == 200  # the model that is loaded serves
        # And back: asking for the first model again unloads the second.
        assert_v1_error(c.post("/v1/chat/completions", json=body(MODEL)), 503, "is loading", MODEL)
        assert wait_loaded(c, MODEL)["status"] == "loaded"
        statuses = ours(c.get("/v1/models").json()["data"])
        assert statuses == {MODEL: "loaded", SECOND_ID: "loadable"}
        assert c.post("/v1/chat/completions", json=body(MODEL)).json()["model"] == MODEL


def test_the_admin_load_route_switches_the_current_model(settings: Any, tmp_path_factory: Any) -> None:
    """POST /server/models/{id}/load answers at once; the model it loads becomes the one a request without a
    model of its own gets (the page's default); /server/models/{id}/unload lets go of one."""
    root = tmp_path_factory.mktemp("models-switch")
    with models_server(settings, root) as server, server.client() as c:
        started = c.post(f"/server/models/{SECOND_ID}/load")
        assert started.status_code == 200 and started.json()["status"] in ("loading", "loaded"), started.text
        deadline = time.monotonic() + 300
        while c.get(f"/v1/models/{SECOND_ID}").json()["status"] != "loaded" and time.monotonic() < deadline:
            time.sleep(0.2)
        state = server.server.config.app.state.policy
        assert state.get_service().served_name == SECOND_ID
        gone = c.post(f"/server/models/{MODEL}/unload").json()
        assert gone["unloaded"] is True and gone["status"] == "loadable"
        assert ours(c.get("/v1/models").json()["data"]) == {MODEL: "loadable", SECOND_ID: "loaded"}
        assert c.post(f"/server/models/{MODEL}/unload").json()["unloaded"] is False


def test_settings_take_models_dir_and_a_repeated_model(tmp_path: Path) -> None:
    from app import settings_from

    got = settings_from(["--model", "a", "--model", "b", "--model", "c", "--models-dir", str(tmp_path)], environ={})
    assert (got.model, got.models, got.models_dir) == ("a", ["b", "c"], str(tmp_path))
    env = settings_from([], environ={"PLAYGROUND_MODELS": "x,y", "PLAYGROUND_MODELS_MEMORY_MB": "512"})
    assert (env.models, env.models_memory_mb) == (["x", "y"], 512)
    with pytest.raises(ValueError, match="models-memory-mb"):
        settings_from(["--models-memory-mb", "-1"], environ={})


def test_a_models_dir_lists_model_dirs_and_gguf_files_and_nothing_else(tmp_path: Path) -> None:
    from engine import model_registry

    (tmp_path / "empty-dir").mkdir()
    (tmp_path / "notes.txt").write_text("not a model")
    (tmp_path / "m.gguf").write_bytes(b"")
    model = tmp_path / "hf-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    assert model_registry.sources([], str(tmp_path)) == [str(tmp_path / "hf-model"), str(tmp_path / "m.gguf")]
    with pytest.raises(FileNotFoundError, match="--models-dir"):
        model_registry.sources([], str(tmp_path / "missing"))


def test_loaded_models_and_their_http_client_share_one_policy(guarded: LiveServer) -> None:
    """The page's backend and the API reach the same pool: LocalBackend over the server's policy answers for the
    second model as the API does."""
    from playground.client.backend import LocalBackend

    policy = guarded.server.config.app.state.policy
    with httpx.Client(base_url=guarded.url, timeout=120, headers=bearer(BOSS)) as c:
        wait_loaded(c, SECOND_ID)
        if c.get(f"/v1/models/{SECOND_ID}").json()["status"] != "loaded":
            c.post("/v1/chat/completions", json=body(SECOND_ID))
            wait_loaded(c, SECOND_ID)
    backend = LocalBackend(policy=policy)
    result = backend.chat([{"role": "user", "content": SECOND.question}], model=SECOND_ID, max_tokens=64, temperature=0)
    assert SECOND.answer in result.reply


def test_the_openapi_document_describes_the_models_list_and_the_new_statuses(guarded: LiveServer) -> None:
    from tests.engine.http.test_openapi_contract import documented

    with guarded.client(headers=bearer(USER)) as c:
        doc = c.get("/openapi.json").json()
        documented(doc, "/v1/models", "get", c.get("/v1/models"))
        documented(doc, "/v1/models/{model_id}", "get", c.get(f"/v1/models/{SECOND_ID}"))
        props = doc["components"]["schemas"]["ModelCard"]["properties"]
        assert set(props["status"]["enum"]) == {"loaded", "loading", "loadable", "failed"}
        refused = c.post("/v1/chat/completions", json=body("no-such-model-but-fine"))
        documented(doc, "/v1/chat/completions", "post", refused)
    assert "403" in doc["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert "Retry-After" in doc["paths"]["/v1/chat/completions"]["post"]["responses"]["503"]["description"]


def test_the_openapi_request_schema_names_no_single_model_when_there_are_several(guarded: LiveServer) -> None:
    with guarded.client(headers=bearer(USER)) as c:
        doc = c.get("/openapi.json").json()
    model = doc["components"]["schemas"]["ChatCompletionRequest"]["properties"]["model"]
    assert "enum" not in model, model  # both models' ids are valid requests


def test_the_least_recently_used_model_is_the_one_unloaded(settings: Any, tmp_path: Path) -> None:
    """Three copies of the tiny Qwen3, a budget for two: after `a` is used again, loading `c` unloads `b`."""
    from app import build_pool, build_service, serve_in_thread
    from tests.models_fixture import tiny_qwen

    models_dir = tmp_path / "three"
    models_dir.mkdir()
    for name in ("tiny-a", "tiny-b", "tiny-c"):
        (models_dir / name).symlink_to(tiny_qwen(), target_is_directory=True)
    probe = settings.replace(model=str(models_dir / "tiny-a"), models_dir=str(models_dir))
    from app import model_candidates, new_pool

    pool0 = new_pool(probe)
    pool0.set_candidates(model_candidates(probe))
    one = pool0.memory_bytes("tiny-a")
    cfg = probe.replace(models_memory_mb=(2 * one + one // 2) // (1 << 20))
    pool = build_pool(cfg, build_service(cfg))
    background = serve_in_thread(cfg, None, pool=pool)
    try:
        with httpx.Client(base_url=background.url, timeout=120) as c:
            ids = [m["id"] for m in c.get("/v1/models").json()["data"]]
            assert ids == ["tiny-a", "tiny-b", "tiny-c", MODEL, GEMMA, SECOND_ID]  # then the bundled ones
            assert_v1_error(c.post("/v1/chat/completions", json=body("tiny-b")), 503, "is loading")
            again = c.post("/v1/chat/completions", json=body("tiny-b"))  # asked again mid-load: the same load
            assert again.status_code in (200, 503), again.text
            assert wait_loaded(c, "tiny-b")["status"] == "loaded"
            assert c.post("/v1/chat/completions", json=body("tiny-b")).status_code == 200
            assert c.post("/v1/chat/completions", json=body("tiny-a")).status_code == 200  # a: the latest used
            assert_v1_error(c.post("/v1/chat/completions", json=body("tiny-c")), 503, "is loading")
            assert wait_loaded(c, "tiny-c")["status"] == "loaded"
            statuses = {m["id"]: m["status"] for m in c.get("/v1/models").json()["data"][:3]}
            assert statuses == {"tiny-a": "loaded", "tiny-b": "loadable", "tiny-c": "loaded"}
    finally:
        background.stop()
        pool.shutdown()


def test_a_running_request_on_a_model_being_unloaded_finishes(settings: Any, tmp_path: Path) -> None:
    """The budget holds one model: a stream on the first model still running when the second is asked for ends
    with all its tokens; only then does the first model go."""
    import threading

    need = memory_bytes(settings, tmp_path, SECOND, (MODEL, SECOND_ID))  # no server (and no model loaded) to ask it
    with models_server(settings, tmp_path, models_memory_mb=need // (1 << 20) - 1) as server:
        got: dict[str, Any] = {}

        def long_stream() -> None:
            with server.client() as c:
                r = c.post("/v1/chat/completions", json=body(MODEL, max_tokens=120, ignore_eos=True))
                got["status"], got["body"] = r.status_code, r.json()

        worker = threading.Thread(target=long_stream)
        worker.start()
        with server.client() as c:
            deadline = time.monotonic() + 60
            while not c.get("/server/state").json()["requests"]["running"] and time.monotonic() < deadline:
                time.sleep(0.02)
            assert_v1_error(c.post("/v1/chat/completions", json=body(SECOND_ID)), 503, "is loading")
            worker.join(120)
            assert got["status"] == 200, got
            assert got["body"]["usage"]["completion_tokens"] == 120
            assert got["body"]["choices"][0]["finish_reason"] == "length"
            assert wait_loaded(c, SECOND_ID)["status"] == "loaded"
            assert {m["id"]: m["status"] for m in c.get("/v1/models").json()["data"]}[MODEL] == "loadable"
