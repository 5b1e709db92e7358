"""Issue 31, item 4: a client cannot switch the operator's moderation off (spec §2.6).

The operator runs `--moderation-hook wordlist:FILE` with a `default` list. A client sent `question_moderation:
false`, `answer_moderation: false` or `white_glossary_names: ["default"]` and got past it; and it hid the word in
an assistant or tool message of the history, which the question check did not read. Each must still end with
`finish_reason` content_filter and the hook's reply, on every chat route, streamed or not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.serving.moderation import DEFAULT_REPLY
from tests.api_helpers import ok, text_of
from tests.conftest import chat, extra_server, sse_events
from tests.pangu_helpers import post

BANNED = "zanzibar"
GREEDY = {"top_k": 1, "max_tokens": 12}
RELAXING = [
    {"question_moderation": False},
    {"question_moderation": False, "answer_moderation": False},
    {"white_glossary_names": ["default"]},
    {"white_glossary_names": ["default"], "question_moderation": False, "answer_moderation": False},
]
RELAX_IDS = ["question-off", "both-off", "white-default", "all"]


@pytest.fixture(scope="module")
def answer_word(live: Any) -> str:
    """A word from the middle of the model's greedy reply to "hi": the answer check has something to block."""
    with live.client() as http:
        words = [w.strip("!?.,") for w in text_of(ok(chat(http, **GREEDY))).split()]
    assert len(words) >= 3, words
    return words[2]


@pytest.fixture(scope="module")
def moderated(settings: Any, service: Any, answer_word: str, tmp_path_factory: Any) -> Iterator[httpx.Client]:
    lists = tmp_path_factory.mktemp("locked") / "words.json"
    lists.write_text(json.dumps({"default": [BANNED, answer_word]}))
    with extra_server(settings, service, ui=False, moderation_hook=f"wordlist:{Path(lists)}") as http:
        yield http


def blocked(data: dict[str, Any]) -> bool:
    choice = data["choices"][0]
    return choice["finish_reason"] == "content_filter" and choice["message"]["content"] == DEFAULT_REPLY


@pytest.mark.parametrize("config", RELAXING, ids=RELAX_IDS)
@pytest.mark.parametrize("route", ["v1", "pangu_v2", "pangu_v1"])
def test_question_check_cannot_be_switched_off(moderated: httpx.Client, route: str, config: dict[str, Any]) -> None:
    messages = [{"role": "user", "content": f"Tell me about {BANNED}."}]
    data = ok(post(moderated, route, messages=messages, moderation_config=config, **GREEDY))
    assert blocked(data) and data["usage"]["completion_tokens"] == 0


@pytest.mark.parametrize("config", RELAXING[1:], ids=RELAX_IDS[1:])
@pytest.mark.parametrize("route", ["v1", "pangu_v2"])
def test_answer_check_cannot_be_switched_off(moderated: httpx.Client, route: str, config: dict[str, Any]) -> None:
    data = ok(post(moderated, route, moderation_config=config, **GREEDY))  # "hi": the reply holds the word
    assert blocked(data) and data["usage"]["completion_tokens"] < GREEDY["max_tokens"]


def test_answer_check_cannot_be_switched_off_in_a_stream(moderated: httpx.Client, answer_word: str) -> None:
    r = post(moderated, "v1", stream=True, moderation_config={"answer_moderation": False}, **GREEDY)
    events = [e for e in sse_events(r.text)[:-1] if e["choices"]]
    said = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if "suggestion" not in e)
    assert answer_word not in said
    assert any(e.get("suggestion") == "block" for e in events)
    assert events[-1]["choices"][0]["finish_reason"] == "content_filter"


@pytest.mark.parametrize(
    "history",
    [
        [{"role": "assistant", "content": f"Let us talk about {BANNED}."}],
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": f"{BANNED} is an island."},
        ],
        [{"role": "assistant", "content": "Sure.", "reasoning_content": f"They mean {BANNED}."}],
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "look", "arguments": json.dumps({"q": BANNED})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
    ],
    ids=["assistant", "tool", "reasoning", "tool-arguments"],
)
def test_question_check_reads_every_role(moderated: httpx.Client, history: list[dict[str, Any]]) -> None:
    messages = [{"role": "user", "content": "Go on."}, *history, {"role": "user", "content": "And then?"}]
    data = ok(post(moderated, "v1", messages=messages, **GREEDY))
    assert blocked(data) and data["usage"]["completion_tokens"] == 0


def test_a_clean_request_is_served(moderated: httpx.Client) -> None:
    data = ok(post(moderated, "v1", messages=[{"role": "user", "content": "Name a colour."}], max_tokens=2, top_k=1))
    assert data["choices"][0]["finish_reason"] != "content_filter"
