"""The first page: served at / on the API's port, and its chat runs through the same service as the API."""

from __future__ import annotations

import pytest

from tests.conftest import MODEL, chat

QUESTION = "What is the capital of France?"


def text(message: dict) -> str:
    """Gradio 6 returns message content as a list of typed parts."""
    content = message["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


@pytest.fixture(scope="module")
def ui(live):
    from gradio_client import Client

    return Client(live.url + "/", verbose=False, download_files=False)


def test_page_is_served_on_the_api_port(http) -> None:
    r = http.get("/")
    assert r.status_code == 200 and "gradio" in r.text.lower()


def test_ui_reply_equals_the_api_reply_for_the_same_request(ui, http) -> None:
    history, box, stats = ui.predict(QUESTION, [], "", 0.0, 1.0, -1, 12, "", api_name="/chat")
    api = chat(http, model=MODEL, messages=[{"role": "user", "content": QUESTION}], temperature=0, max_tokens=12)
    assert history[-1]["role"] == "assistant"
    assert text(history[-1]) == api.json()["choices"][0]["message"]["content"]
    assert box == ""
    assert f"| prompt tokens | {api.json()['usage']['prompt_tokens']} |" in stats
    assert "| finish reason |" in stats


def test_ui_shows_the_api_validation_message(ui) -> None:
    history, _, _ = ui.predict(QUESTION, [], "", 0.0, 1.0, -1, 12, "-5", api_name="/chat")
    assert "Parameter seed must be in" in text(history[-1])
