"""One request policy for every entry point: a page request, a Gradio-API request and an API request from the same
client count against one `--max-concurrent-per-client` and one `--request-timeout-s`; the moderation hook blocks
the same question on the page as on the API; page and notebook traffic shows in /metrics under its own route
label and in the access log (engine/serving/policy.py). The page is driven through `gradio_client` here, and in a
real browser by tests/playground/browser/test_ui_browser.py."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import MODEL, extra_server
from tests.playground.test_ui import BOX, CHATBOT, CHECK, STATS, answer, client

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

QUESTION = "What is the capital of France?"
# The longest reply the server allows: it outlasts what a test does while it runs (closing it aborts it).
LONG = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Tell me a long story."}],
    "max_tokens": 512,
    "ignore_eos": True,
    "temperature": 0,
}
LIMIT = "Too many concurrent requests from this client: the limit is 1."


@pytest.fixture(scope="module")
def one_per_client(settings: Any, service: Any) -> Iterator[httpx.Client]:
    with extra_server(settings, service, max_concurrent_per_client=1) as http:
        yield http


@contextlib.contextmanager
def api_stream_running(http: httpx.Client) -> Iterator[None]:
    """An API stream that holds this client's admission until the block ends (its first event is in)."""
    with http.stream("POST", "/v1/chat/completions", json={**LONG, "stream": True}) as r:
        assert r.status_code == 200
        lines = r.iter_lines()  # kept: a dropped line iterator closes the response, and the server aborts it
        next(lines)
        yield


def wait_until(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def url_of(http: httpx.Client) -> str:
    return str(http.base_url).rstrip("/")


def test_an_api_stream_counts_against_the_page_and_its_gradio_endpoints(one_per_client: httpx.Client) -> None:
    ui = client(url_of(one_per_client))
    with api_stream_running(one_per_client):
        chat = ui.predict(message=QUESTION, system="", max_tokens=4, api_name="/chat")
        assert f"Refused by the API:** {LIMIT}" in chat[CHECK]
        assert chat[BOX] == QUESTION  # the message is kept, to send again
        ab = ui.predict(message=QUESTION, system="", max_tokens=4, api_name="/ab")
        assert LIMIT in ab[1] and LIMIT in ab[3]  # both sides refused: the client's one slot is taken
    done = ui.predict(message=QUESTION, system="", max_tokens=4, temperature=0.0, api_name="/chat")
    assert done[CHECK] == "" and answer(done[CHATBOT])  # the slot is free again once the stream is closed


def test_a_page_reply_counts_against_the_api(one_per_client: httpx.Client, service: Any) -> None:
    ui = client(url_of(one_per_client))
    job = ui.submit(message=QUESTION, system="", max_tokens=512, ignore_eos=True, temperature=0.0, api_name="/chat")
    try:
        wait_until(lambda: service.engine.load()["running"] >= 1, "the page's request to run")
        refused = one_per_client.post("/v1/chat/completions", json={**LONG, "max_tokens": 2})
        assert refused.status_code == 429 and LIMIT in refused.text
    finally:
        ui.predict(api_name="/stop")
        job.result(timeout=120)
    wait_until(
        lambda: one_per_client.post("/v1/chat/completions", json={**LONG, "max_tokens": 2}).status_code == 200,
        "the page's slot to be released",
    )


def test_the_request_timeout_sheds_a_page_reply_as_it_sheds_an_api_one(settings: Any, service: Any) -> None:
    with extra_server(settings, service, request_timeout_s=1) as http:
        out = client(url_of(http)).predict(
            message=QUESTION, system="", max_tokens=400, ignore_eos=True, temperature=0.0, api_name="/chat"
        )
        api = http.post("/v1/chat/completions", json=LONG).json()
    assert api["choices"][0]["finish_reason"] == "insufficient_system_resource"
    assert 'data-stat="finish reason">insufficient_system_resource<' in out[STATS]


def test_the_moderation_hook_blocks_the_same_question_and_answer_on_the_page(
    settings: Any, service: Any, tmp_path: Path
) -> None:
    words = tmp_path / "words.json"
    words.write_text(json.dumps({"default": ["forbidden-topic", "paris"]}))
    with extra_server(settings, service, moderation_hook=f"wordlist:{words}") as http:
        ui = client(url_of(http))
        for message in ("Tell me about forbidden-topic.", QUESTION):  # blocked as a question; in the answer
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": message}],
                "max_tokens": 12,
                "temperature": 0,
            }
            api = http.post("/v1/chat/completions", json=body).json()["choices"][0]
            page = ui.predict(message=message, system="", max_tokens=12, temperature=0.0, api_name="/chat")
            assert api["finish_reason"] == "content_filter", message
            assert answer(page[CHATBOT]) == api["message"]["content"] == "Sorry, I can't help with that."
            assert 'data-stat="finish reason">content_filter<' in page[STATS]


def test_page_traffic_is_counted_in_metrics_and_logged(
    live: Any, http: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="playground.access"):
        out = client(live.url).predict(message=QUESTION, system="", max_tokens=4, temperature=0.0, api_name="/chat")
    assert out[CHECK] == ""
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "playground.access"]
    page = [line for line in lines if line.get("entry") == "page"]
    assert page and page[-1]["route"] == "page:/chat" and page[-1]["status"] == 200
    assert page[-1]["completion_tokens"] <= 4 and page[-1]["client"] == "ip:127.0.0.1" and "content" not in page[-1]
    metrics = http.get("/metrics").text
    assert 'playground_chat_requests_total{entry="page",route="page:/chat",status="200"}' in metrics
    assert 'playground_time_to_first_token_seconds_count{route="page:/chat"}' in metrics
    assert 'playground_completion_tokens_total{route="page:/chat"}' in metrics


def test_notebook_calls_go_through_the_same_policy(service: Any) -> None:
    from engine.protocol.errors import ApiError
    from engine.serving.policy import RequestPolicy
    from playground.client.backend import LocalBackend
    from playground.client.connect import connect

    backend = connect(service)
    assert backend.chat(QUESTION, max_tokens=3, temperature=0).reply
    metrics = backend.policy.metrics.render().decode()
    assert 'playground_chat_requests_total{entry="notebook",route="notebook",status="200"}' in metrics
    strict = LocalBackend(
        service, RequestPolicy(service.settings.replace(max_concurrent_per_client=1), lambda: service)
    )
    held = strict.policy.admission.enter(LocalBackend.CALLER)  # one call of this notebook is in flight
    try:
        with pytest.raises(ApiError, match="Too many concurrent requests"):
            strict.chat(QUESTION, max_tokens=3)
    finally:
        held.close()
    assert strict.chat(QUESTION, max_tokens=3, temperature=0).reply


def test_the_pages_fold_takes_an_interception_as_the_whole_reply() -> None:
    """As the service's fold does (engine/serving/fold.py): what the choice said before the block is replaced."""
    from engine.protocol.response import ChatCompletionChunk, ChunkChoice, Delta
    from playground.client.reply import ReplyView

    def chunk(text: str, **extra: Any) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id="c", created=0, model="m", choices=[ChunkChoice(index=0, delta=Delta(content=text))], **extra
        )

    view = ReplyView()
    for c in (chunk("The capital of France is"), chunk("Sorry, I can't help with that.", replaces=True)):
        view.add(c)
    assert view.first.content == "Sorry, I can't help with that."
