"""`moderation_config` with a moderation hook (spec §2.6): the built-in word-list hook on a second live server.

The blocked answer word is taken from the model's own greedy reply, so the answer stage is exercised for real.
Media requests are moderated on their text parts and transcripts and otherwise served exactly as without a hook.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.protocol.request import ModerationConfig
from engine.serving.moderation import DEFAULT_REPLY, WordListHook, load_hook
from tests import media_samples as ms
from tests.api_helpers import ok, text_of
from tests.conftest import VL, chat, extra_server, sse_events
from tests.pangu_helpers import post, raw_events
from tests.paths import DATA

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

QUESTION_WORD = "zanzibar"
SPOKEN_WORD = "milk"  # said in tests/data/speech.flac
SPEECH = DATA / "speech.flac"
EXTRA_WORD = "quokka"
GREEDY = {"top_k": 1, "max_tokens": 12}
SHORT = {"top_k": 1, "max_tokens": 2}  # stops before the blocked answer word (the third word of the reply to "hi")


@pytest.fixture(scope="module")
def answer(live: Any) -> tuple[str, str]:
    """The greedy reply to "hi" and a word from its middle that the hook will block."""
    with live.client() as http:
        text = text_of(ok(chat(http, **GREEDY)))
    words = [w.strip("!?.,") for w in text.split()]
    assert len(words) >= 3, text
    return text, words[2]


@pytest.fixture(scope="module")
def words(answer: tuple[str, str], tmp_path_factory: Any) -> Path:
    lists = tmp_path_factory.mktemp("moderation") / "words.json"
    lists.write_text(
        json.dumps(
            {
                "default": [QUESTION_WORD, answer[1]],
                "extra": [EXTRA_WORD],
                "allow-answer": [answer[1]],
                "spoken": [SPOKEN_WORD],
            }
        )
    )
    return lists


@pytest.fixture(scope="module")
def moderated(settings: Any, service: Any, words: Path) -> Iterator[httpx.Client]:
    with extra_server(settings, service, ui=False, moderation_hook=f"wordlist:{words}") as http:
        yield http


def asking(word: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Tell me about {word}."}]


@pytest.mark.parametrize("route", ["v1", "pangu_v2", "pangu_v1"])
def test_blocked_question_never_reaches_the_engine(moderated: httpx.Client, route: str) -> None:
    data = ok(post(moderated, route, messages=asking(QUESTION_WORD.upper()), **GREEDY))
    choice = data["choices"][0]
    assert choice["finish_reason"] == "content_filter" and choice["message"]["content"] == DEFAULT_REPLY
    assert data["usage"]["completion_tokens"] == 0 and data["usage"]["prompt_tokens"] > 0
    assert "moderation_result" not in data  # only with show_result


def test_blocked_question_stream_on_v1(moderated: httpx.Client) -> None:
    r = post(moderated, "pangu_v1", stream=True, messages=asking(QUESTION_WORD), **GREEDY)
    chunks, _ = raw_events(r, "pangu_v1")
    assert [c["choices"][0]["message"] for c in chunks[:3]] == [
        {"role": "assistant"},
        {"content": DEFAULT_REPLY},
        {"content": ""},
    ]
    interception, closing, trailing = chunks[1], chunks[2], chunks[3]
    assert interception["suggestion"] == "block" and interception["reply"] == DEFAULT_REPLY
    assert closing["choices"][0]["finish_reason"] == "content_filter"
    assert trailing["choices"] == [] and trailing["usage"]["completion_tokens"] == 0
    assert len(chunks) == 4


@pytest.mark.parametrize("route", ["v1", "pangu_v2"])
def test_blocked_answer_non_stream(moderated: httpx.Client, route: str) -> None:
    data = ok(post(moderated, route, **GREEDY))
    choice = data["choices"][0]
    assert choice["finish_reason"] == "content_filter" and choice["message"]["content"] == DEFAULT_REPLY
    assert 0 < data["usage"]["completion_tokens"] < GREEDY["max_tokens"]


def test_blocked_answer_stream(moderated: httpx.Client, answer: tuple[str, str]) -> None:
    text, word = answer
    r = post(moderated, "v1", stream=True, stream_options={"include_usage": True}, **GREEDY)
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e["choices"]]
    said = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if "suggestion" not in c)
    assert text.startswith(said) and word not in said, "what went out before the block is the model's own text"
    (interception,) = [c for c in chunks if "suggestion" in c]
    assert interception["reply"] == DEFAULT_REPLY and interception["choices"][0]["delta"]["content"] == DEFAULT_REPLY
    assert chunks[-1]["choices"][0]["finish_reason"] == "content_filter" and chunks[-1] is not interception
    assert (
        events[-2]["choices"] == []
        and events[-2]["usage"]["completion_tokens"] == chunks[-1]["usage"]["completion_tokens"]
    )


@pytest.mark.parametrize(
    "config",
    [
        {"question_moderation": False, "answer_moderation": False},  # the operator's default list still applies
        {"answer_moderation": False},
        {"white_glossary_names": ["allow-answer"]},  # a white list never exempts a word of "default"
        {"white_glossary_names": ["no-such-list"]},  # unknown names are ignored
        {},
    ],
)
def test_moderation_config_cannot_relax_the_default_list(moderated: httpx.Client, config: dict[str, Any]) -> None:
    data = ok(post(moderated, "pangu_v2", moderation_config=config, **GREEDY))
    assert data["choices"][0]["finish_reason"] == "content_filter"


def test_black_glossary_names_add_lists(moderated: httpx.Client) -> None:
    clean = {"messages": asking(EXTRA_WORD), "moderation_config": {"answer_moderation": False}, **SHORT}
    assert ok(post(moderated, "pangu_v2", **clean))["choices"][0]["finish_reason"] != "content_filter"
    clean["moderation_config"] = {"answer_moderation": False, "black_glossary_names": ["extra"]}
    assert ok(post(moderated, "pangu_v2", **clean))["choices"][0]["finish_reason"] == "content_filter"
    clean["moderation_config"] = {"black_glossary_names": ["extra"], "question_moderation": False}
    assert ok(post(moderated, "pangu_v2", **clean))["choices"][0]["finish_reason"] != "content_filter"
    clean["moderation_config"] = {"black_glossary_names": ["extra"], "white_glossary_names": ["extra"]}
    assert ok(post(moderated, "pangu_v2", **clean))["choices"][0]["finish_reason"] != "content_filter"


def test_show_result(moderated: httpx.Client) -> None:
    show = {"show_result": True}
    blocked = ok(post(moderated, "pangu_v2", messages=asking(QUESTION_WORD), moderation_config=show, **GREEDY))
    result = blocked["moderation_result"]
    assert result["suggestion"] == "block" and result["stage"] == "question" and "default" in result["reason"]
    passed = ok(post(moderated, "pangu_v2", moderation_config=show, **SHORT))
    assert passed["moderation_result"] == {"suggestion": "pass"}


def test_validation_comes_before_moderation(moderated: httpx.Client) -> None:
    r = post(moderated, "v1", messages=asking(QUESTION_WORD), temperature=9)
    assert r.status_code == 422


# ---- media requests ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vl_moderated(vl_live: Any, words: Path) -> Iterator[httpx.Client]:
    """The tiny Qwen2-VL of demo_models/tiny_mm.py behind the same hook."""
    with extra_server(vl_live.settings, vl_live.service, ui=False, moderation_hook=f"wordlist:{words}") as http:
        yield http


def image_request(text: str) -> dict[str, Any]:
    image = {"type": "image_url", "image_url": ms.data_url("image/png", ms.image_bytes("PNG", (64, 48)))}
    return {
        "model": VL,
        "max_tokens": 2,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 3,
        "messages": [{"role": "user", "content": [image, {"type": "text", "text": text}]}],
    }


def test_media_requests_are_served_as_without_moderation(vl_live: Any, vl_moderated: httpx.Client) -> None:
    body = image_request("Describe the picture.")
    with vl_live.client() as http:
        plain = ok(http.post("/v1/chat/completions", json=body))
    moderated = ok(vl_moderated.post("/v1/chat/completions", json=body))
    assert moderated["media"] == plain["media"]
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")
    assert [moderated["usage"][k] for k in counts] == [plain["usage"][k] for k in counts]
    assert moderated["choices"][0]["logprobs"] == plain["choices"][0]["logprobs"]
    audio = {"type": "input_audio", "input_audio": {"data": ms.b64(SPEECH.read_bytes()), "format": "flac"}}
    r = vl_moderated.post(
        "/v1/chat/completions", json={"model": VL, "messages": [{"role": "user", "content": [audio]}]}
    )
    assert r.status_code == 422 and "messages[0].content[0]: model does not accept audio input" in r.json()["error"]


def test_text_parts_of_a_media_request_are_moderated(vl_live: Any, vl_moderated: httpx.Client) -> None:
    body = image_request(f"What is {QUESTION_WORD}?")
    data = ok(vl_moderated.post("/v1/chat/completions", json=body))
    choice = data["choices"][0]
    assert choice["finish_reason"] == "content_filter" and choice["message"]["content"] == DEFAULT_REPLY
    with vl_live.client() as http:
        plain = ok(http.post("/v1/chat/completions", json=body))
    assert data["usage"]["prompt_tokens"] == plain["usage"]["prompt_tokens"]  # the image's tokens count
    assert data["usage"]["completion_tokens"] == 0


def test_transcripts_are_moderated(moderated: httpx.Client) -> None:
    """Audio the text model hears through Whisper is moderated as the words it became."""
    audio = {"type": "input_audio", "input_audio": {"data": ms.b64(SPEECH.read_bytes()), "format": "flac"}}
    messages = [{"role": "user", "content": [audio, {"type": "text", "text": "Repeat what I said."}]}]
    config = {"answer_moderation": False}
    passed = ok(post(moderated, "v1", messages=messages, moderation_config=config, **SHORT))
    assert passed["choices"][0]["finish_reason"] != "content_filter"
    assert SPOKEN_WORD in passed["transcription"][0]["text"].lower()
    config["black_glossary_names"] = ["spoken"]
    blocked = ok(post(moderated, "v1", messages=messages, moderation_config=config, **SHORT))
    assert blocked["choices"][0]["finish_reason"] == "content_filter"
    assert blocked["usage"]["prompt_tokens"] == passed["usage"]["prompt_tokens"]
    assert blocked["usage"]["completion_tokens"] == 0


def test_word_list_hook_unit() -> None:
    hook = WordListHook({"default": ["Bad"], "x": ["worse"], "ok": ["bad", "worse"]}, reply="no")
    config = ModerationConfig()
    assert hook.check("a BAD day", stage="question", config=config).blocked
    assert not hook.check("worse", stage="answer", config=config).blocked
    assert hook.check("worse", stage="answer", config=ModerationConfig(black_glossary_names=["x"])).reply == "no"
    relaxed = ModerationConfig(black_glossary_names=["x"], white_glossary_names=["ok"])
    assert not hook.check("worse", stage="answer", config=relaxed).blocked  # a white list relaxes an added list
    assert hook.check("bad", stage="answer", config=relaxed).blocked  # never "default"


class Always:
    def check(self, text: str, *, stage: str, config: ModerationConfig) -> Any:
        from engine.serving.moderation import Verdict

        return Verdict(True, "always", "nope")


def test_load_hook(tmp_path: Path) -> None:
    assert load_hook("") is None
    assert isinstance(load_hook("tests.engine.http.test_api_moderation:Always"), Always)  # a factory is called
    for bad in ("nocolon", "wordlist:", "tests.engine.http.test_api_moderation:test_load_hook"):
        with pytest.raises((ValueError, TypeError)):
            load_hook(bad)
    (tmp_path / "bad.json").write_text('["not", "an", "object"]')
    with pytest.raises(ValueError):
        load_hook(f"wordlist:{tmp_path / 'bad.json'}")
