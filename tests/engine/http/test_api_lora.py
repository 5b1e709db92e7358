"""LoRA adapters over HTTP (spec §0.1 `lora_adapters`, §1.3, §2.2 `model`): each adapter id is a model that
/v1/models lists with its parent, a request for it gets its trained reply and the id echoed, an unknown id is
"Model not found", requests of different adapters and the base model share steps and each gets the tokens it gets
alone, and the prefix cache never hands one adapter's KV to another."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import MODEL, sse_events
from tests.lora_fixture import ADAPTERS, chat_body

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)


def post(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_models_lists_each_adapter_with_its_parent(lora_live: Any) -> None:
    with lora_live.client() as c:
        data = c.get("/v1/models").json()["data"]
        assert [m["id"] for m in data] == [MODEL, *ADAPTERS]
        assert data[0]["parent"] is None and data[0]["root"] == MODEL
        for card in data[1:]:
            assert card == {
                "id": card["id"],
                "object": "model",
                "created": 1730000000,
                "owned_by": data[0]["owned_by"],
                "root": card["id"],
                "parent": MODEL,
            }
            assert not Path(card["root"]).is_absolute()
        assert c.get("/v1/models/mango").json() == data[2]
        missing = c.get("/v1/models/papaya")
        assert missing.status_code == 404 and "Model not found" in missing.text


def test_each_adapter_gives_its_trained_reply_and_the_response_echoes_its_id(lora_live: Any) -> None:
    with lora_live.client() as c:
        base = post(c, chat_body(MODEL))
        assert base["model"] == MODEL
        words = [w for w, _, _ in ADAPTERS.values()]
        assert not any(w in base["choices"][0]["message"]["content"] for w in words)
        for name, (word, _, _) in ADAPTERS.items():
            got = post(c, chat_body(name))
            assert got["model"] == name
            assert got["choices"][0]["message"]["content"].startswith(word), got["choices"][0]
        events = sse_events(c.post("/v1/chat/completions", json=chat_body("mango", stream=True)).text)
        chunks = [e for e in events if isinstance(e, dict)]
        assert chunks and {e["model"] for e in chunks} == {"mango"}
        assert "".join(e["choices"][0]["delta"].get("content") or "" for e in chunks if e["choices"]).startswith(
            "MANGO"
        )


def test_an_unknown_model_is_model_not_found_and_the_base_model_is_not_an_adapter(lora_live: Any, live: Any) -> None:
    with lora_live.client() as c:
        r = c.post("/v1/chat/completions", json=chat_body("papaya"))
        assert r.status_code == 422 and "Model not found: 'papaya'." in r.text
    with live.client() as c:  # the server without adapters: an adapter id is nobody's model there
        r = c.post("/v1/chat/completions", json=chat_body("pineapple"))
        assert r.status_code == 422 and "Model not found" in r.text
        assert [m["id"] for m in c.get("/v1/models").json()["data"]] == [MODEL]


PROMPTS = ["What is the secret word?", "Name three colours.", "Count from one to five."]


def test_a_mixed_batch_gives_each_row_the_tokens_it_gets_alone(lora_live: Any) -> None:
    """Base and both adapters, three prompts each, all at once; then each request again on its own."""
    bodies = [
        {**chat_body(m, max_tokens=10, ignore_eos=True), "messages": [{"role": "user", "content": p}]}
        for m in (MODEL, *ADAPTERS)
        for p in PROMPTS
    ]
    with lora_live.client() as c:
        alone = [post(c, b) for b in bodies]
        with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
            mixed = list(pool.map(lambda b: post(c, b), bodies))
    texts = [r["choices"][0]["message"]["content"] for r in alone]
    assert [r["choices"][0]["message"]["content"] for r in mixed] == texts
    assert len({texts[i] for i in (0, 3, 6)}) == 3  # the same prompt, three models, three different replies
    assert max(max(r["usage"]["batch_size"]) for r in mixed) >= 3  # rows of several models did share steps


def test_the_prefix_cache_keeps_each_adapter_apart(lora_live: Any) -> None:
    text = "Here is a long preamble that fills a few KV pages. " * 6 + "Now, what is the secret word?"
    body = {**chat_body(MODEL, max_tokens=1), "messages": [{"role": "user", "content": text}]}
    with lora_live.client() as c:
        c.post("/reset_prefix_cache")
        cached = [
            post(c, {**body, "model": m})["usage"]["prompt_tokens_details"]["cached_tokens"]
            for m in (MODEL, MODEL, "pineapple", "pineapple", "mango")
        ]
    assert cached[0] == 0 and cached[1] > 0  # the base model reuses its own prefix
    assert cached[2] == 0 and cached[3] == cached[1]  # an adapter never gets the base model's KV, only its own
    assert cached[4] == 0


@pytest.mark.parametrize("spec, why", [("pineapple", "is not id=DIR"), ("x=/nowhere", "/nowhere is not a directory")])
def test_a_bad_adapter_stops_start_up_with_a_clear_message(spec: str, why: str) -> None:
    import app

    with pytest.raises(SystemExit, match=why):
        app.main(["--lora-adapters", spec, "--no-ui"])
