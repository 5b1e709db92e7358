"""Text-completion mode (issue 33 item 5): the page's /chat endpoint with mode "text" sends the box's text as a raw
prompt down the /v1/completions route's own path, and shows the continuation, its heatmap and the prompt's own
heatmap from `prompt_logprobs` (tests/playground/browser/test_ui_browser_textmode.py drives it in a real browser)."""

from __future__ import annotations

import json
import re
from html import escape
from typing import Any

import pytest

from playground.page import textmode
from tests.conftest import MODEL
from tests.playground.test_ui import BOX, CHATBOT, CHECK, CURL, REQUEST, STATS, UNCHANGED, client, text

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

PROMPT = "The capital of France is"
HEAT, PYTHON = 5, 9  # /chat's outputs: the Tokens panel, the Python snippet


@pytest.fixture
def ui(live: Any) -> Any:
    return client(live.url)


def prompt_heat(html: str) -> str:
    """The prompt's heatmap box in the Tokens panel (up to the continuation's title)."""
    m = re.search(r'<div class="pg-prompt-heat">(.*?)<div class="pg-note pg-reply-title">', html, re.S)
    assert m, html[:500]
    return m.group(1)


def test_text_mode_sends_the_raw_prompt_through_the_completions_path(ui: Any, http: Any) -> None:
    out = ui.predict(message=PROMPT, system="", temperature=0.0, max_tokens=8, mode="text", api_name="/chat")
    api = http.post(
        "/v1/completions",
        json={"model": MODEL, "prompt": PROMPT, "temperature": 0, "max_tokens": 8, "prompt_logprobs": 5, "logprobs": 5},
    )
    assert api.status_code == 200, api.text
    choice = api.json()["choices"][0]
    assert out[CHECK] == ""
    body = json.loads(out[REQUEST])  # the exact /v1/completions body, no messages, no template
    assert body["prompt"] == PROMPT and "messages" not in body and body["prompt_logprobs"] == 5
    reply = next(text(m) for m in out[CHATBOT] if "pg-textmode" in text(m))
    assert escape(PROMPT) in reply and "pg-text-cont" in reply, reply
    cont = re.search(r'<mark class="pg-text-cont">(.*?)</mark>', reply, re.S)
    assert cont and cont.group(1) == escape(choice["text"]).replace("\n", "<br>")
    usage = api.json()["usage"]
    assert f'data-stat="prompt tokens">{usage["prompt_tokens"]}<' in out[STATS]
    assert f'data-stat="completion tokens">{usage["completion_tokens"]}<' in out[STATS]
    # The prompt's heatmap: one token per prompt token but the first (which has no probability), its numbers the
    # API's prompt_logprobs.
    heat = prompt_heat(out[HEAT])
    assert heat.count('class="pg-tok ') == usage["prompt_tokens"] - 1
    plp = choice["prompt_logprobs"]
    first = next(iter(plp[1].values()))
    assert escape(first["decoded_token"]) in heat
    # and the continuation's heatmap after it, one token per generated token
    after = out[HEAT].split("pg-reply-title", 1)[1]
    assert after.count('class="pg-tok ') == usage["completion_tokens"]


def test_a_text_reply_regenerates_replays_and_copies_as_a_completion(ui: Any) -> None:
    """Regenerate, Replay and the curl / Python snippets keep a text reply on the completions route."""
    first = ui.predict(message=PROMPT, system="", temperature=0.0, max_tokens=4, mode="text", api_name="/chat")
    assert "/v1/completions" in first[CURL] and "client.completions.create(" in first[PYTHON]
    assert "prompt=" in first[PYTHON] and "chunk.choices[0].text" in first[PYTHON]
    again = ui.predict(system="", temperature=0.0, max_tokens=4, api_name="/regenerate")  # the radio says Chat
    assert json.loads(again[REQUEST])["prompt"] == PROMPT and "messages" not in json.loads(again[REQUEST])
    assert again[CHECK] == ""
    replies = [text(m) for m in again[CHATBOT] if "pg-textmode" in text(m)]
    assert len(replies) == 1 and "2/2" in replies[0]  # the new version is shown, the first kept
    report = ui.predict(body_text=again[REQUEST], api_name="/replay")
    assert "identical to the original request" in report and "identical to the original reply" in report, report


def test_chat_mode_stays_the_default(ui: Any) -> None:
    out = ui.predict(
        message="What is the capital of France?", system="", temperature=0.0, max_tokens=4, api_name="/chat"
    )
    assert "messages" in json.loads(out[REQUEST]) and "pg-prompt-heat" not in out[HEAT]


def test_text_mode_refuses_what_the_route_refuses(ui: Any) -> None:
    """A bad field is the route's own 4xx message on the check line; nothing is sent."""
    out = ui.predict(message=PROMPT, system="", temperature=0.0, max_tokens=8, seed="-5", mode="text", api_name="/chat")
    assert "Not sent" in out[CHECK] and "Parameter `seed` must be in" in out[CHECK], out[CHECK]
    assert out[CHATBOT] == UNCHANGED and out[BOX] == PROMPT  # nothing sent: the text goes back to the box


def test_prompt_entries_keep_the_top_k_and_the_rank() -> None:
    plp = [
        None,
        {
            "7": {"logprob": -3.0, "rank": 9, "decoded_token": " x"},
            "1": {"logprob": -0.1, "rank": 1, "decoded_token": " a"},
            "2": {"logprob": -2.5, "rank": 2, "decoded_token": " b"},
        },
        {
            "1": {"logprob": -0.2, "rank": 1, "decoded_token": " a"},
            "3": {"logprob": -2.0, "rank": 2, "decoded_token": " c"},
        },
    ]
    entries = textmode.prompt_entries(plp, k=2)
    assert [e.token for e in entries] == [" x", " a"]
    assert [a.token for a in entries[0].top_logprobs] == [" a", " b"]  # " x" is not among the top 2
    assert [a.token for a in entries[1].top_logprobs] == [" a", " c"]
    assert textmode.default_mode(None) == textmode.CHAT
