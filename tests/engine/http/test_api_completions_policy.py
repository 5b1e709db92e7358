"""/v1/completions goes through the chat route's one policy (issue 33, item 1): credentials, the per-client limit,
moderation of what the prompt reads, the request timeout, the metrics' route label and the access line, each
checked on a live server the way the chat route's own tests check them."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.serving.moderation import DEFAULT_REPLY
from tests.api_helpers import assert_v1_error, ok
from tests.conftest import MODEL, extra_server
from tests.ops_helpers import LongStream, wait_for

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

PATH = "/v1/completions"


def complete(http: httpx.Client, headers: dict[str, str] | None = None, **body: Any) -> httpx.Response:
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 2, **body}
    return http.post(PATH, json=body, headers=headers)


def test_credentials(settings: Any, service: Any) -> None:
    with extra_server(settings, service, ui=False, api_keys=["k1"]) as http:
        assert_v1_error(complete(http), 401)
        assert_v1_error(complete(http, headers={"Authorization": "Bearer wrong"}), 401)
        ok(complete(http, headers={"Authorization": "Bearer k1"}))


def test_per_client_limit_counts_completions_with_chat(settings: Any, service: Any) -> None:
    with extra_server(settings, service, ui=False, max_concurrent_per_client=1) as http:
        first = LongStream(str(http.base_url)).start()  # a chat stream holds the client's one place
        try:
            first.wait_started()
            assert_v1_error(complete(http), 429, "limit is 1")
        finally:
            first.close()
        wait_for(lambda: complete(http).status_code == 200, 10, "the slot to free")
        # a request of several prompts runs them one after the other: it never holds more than one place
        body = ok(complete(http, prompt=["a", "b", "c"]))
        assert [c["index"] for c in body["choices"]] == [0, 1, 2]


def test_moderation_blocks_a_prompt(settings: Any, service: Any, tmp_path: Path) -> None:
    words = tmp_path / "words.json"
    words.write_text(json.dumps({"default": ["zanzibar"]}))
    with extra_server(settings, service, ui=False, moderation_hook=f"wordlist:{words}") as http:
        body = ok(complete(http, prompt="Tell me about Zanzibar.", max_tokens=8))
        (choice,) = body["choices"]
        assert choice["finish_reason"] == "content_filter" and choice["text"] == DEFAULT_REPLY
        assert body["usage"]["completion_tokens"] == 0 and body["usage"]["prompt_tokens"] > 0
        mixed = ok(complete(http, prompt=["Tell me about Zanzibar.", "One, two,"], max_tokens=2))
        assert [c["finish_reason"] for c in mixed["choices"]][0] == "content_filter"
        assert mixed["choices"][1]["finish_reason"] in ("length", "stop")
        assert ok(complete(http, prompt=[1, 2, 3]))["choices"][0]["finish_reason"] != "content_filter"


def test_request_timeout_sheds_it(settings: Any, service: Any) -> None:
    with extra_server(settings, service, ui=False, request_timeout_s=1) as http:
        started = time.monotonic()
        body = ok(complete(http, max_tokens=2000, ignore_eos=True, temperature=0))
        assert time.monotonic() - started < 10
        assert body["choices"][0]["finish_reason"] == "insufficient_system_resource"


def test_access_line_and_metrics(settings: Any, service: Any, caplog: pytest.LogCaptureFixture) -> None:
    with extra_server(settings, service, ui=False) as http, caplog.at_level(logging.INFO, logger="playground.access"):
        r = complete(http, headers={"X-Request-Id": "cmpl-trace-1"}, max_tokens=3, ignore_eos=True)
        body = ok(r)

        def lines() -> list[dict[str, Any]]:
            return [json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "playground.access"]

        wait_for(lambda: "cmpl-trace-1" in {rec["request_id"] for rec in lines()}, 5)
        (line,) = [rec for rec in lines() if rec["request_id"] == "cmpl-trace-1"]
        assert line["path"] == PATH and line["route"] == PATH and line["status"] == 200 and line["id"] == body["id"]
        assert line["prompt_tokens"] == body["usage"]["prompt_tokens"] and line["completion_tokens"] == 3
        assert line["finish_reasons"] == ["length"]
        several = ok(complete(http, headers={"X-Request-Id": "cmpl-trace-2"}, prompt=["a", "b"], max_tokens=2))
        wait_for(lambda: "cmpl-trace-2" in {rec["request_id"] for rec in lines()}, 5)
        (line,) = [rec for rec in lines() if rec["request_id"] == "cmpl-trace-2"]
        assert line["id"] == several["id"] and line["prompts"] == 2 and len(line["finish_reasons"]) == 2
        assert line["completion_tokens"] == several["usage"]["completion_tokens"]
        metrics = http.get("/metrics").text
        counted = [m for m in metrics.splitlines() if m.startswith("playground_chat_requests") and PATH in m]
        assert counted and 'entry="api"' in counted[0] and 'status="200"' in counted[0]


def test_a_client_that_leaves_aborts_its_prompts(live: Any) -> None:
    """A non-stream request of three long prompts whose client gives up after a second: the running prompt is
    aborted and the later ones never start, so the engine is idle within a few seconds (not after 3 x 400
    tokens)."""
    engine = live.service.engine
    wait_for(lambda: engine.load()["running"] == 0 and engine.load()["waiting"] == 0, 30, "an idle engine")
    steps = engine.steps
    body = {"model": MODEL, "prompt": ["a b c", "d e f", "g h i"], "max_tokens": 400, "ignore_eos": True}
    with httpx.Client(base_url=live.url, timeout=1.0) as http, pytest.raises(httpx.ReadTimeout):
        http.post(PATH, json=body)
    wait_for(lambda: engine.load()["running"] == 0 and engine.load()["waiting"] == 0, 5, "the engine to go idle")
    assert engine.steps - steps < 400  # far fewer steps than one prompt's 400 tokens, let alone three
