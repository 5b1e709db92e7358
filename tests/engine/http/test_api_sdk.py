"""The official openai SDK against the live server: non-stream, stream, and MindIE/vLLM fields via `extra_body`."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api_helpers import ID_RE, ok, text_of
from tests.conftest import MODEL, chat

HI = [{"role": "user", "content": "hi"}]


def test_sdk_non_stream_matches_httpx(oai: Any, http: httpx.Client) -> None:
    expected = ok(chat(http, temperature=0, max_tokens=10))
    resp = oai.chat.completions.create(model=MODEL, messages=HI, temperature=0, max_tokens=10)
    assert resp.object == "chat.completion" and resp.model == MODEL and ID_RE.match(resp.id)
    assert resp.choices[0].message.content == text_of(expected)
    assert resp.choices[0].message.role == "assistant"
    assert resp.usage.completion_tokens == expected["usage"]["completion_tokens"]
    assert 0 <= resp.usage.prompt_tokens_details.cached_tokens < resp.usage.prompt_tokens
    assert len(resp.usage.model_extra["batch_size"]) == resp.usage.completion_tokens  # MindIE extras survive


def test_sdk_stream_matches_non_stream(oai: Any) -> None:
    whole = oai.chat.completions.create(model=MODEL, messages=HI, temperature=0, max_tokens=16)
    stream = oai.chat.completions.create(
        model=MODEL, messages=HI, temperature=0, max_tokens=16, stream=True, stream_options={"include_usage": True}
    )
    with stream:
        chunks = list(stream)
    assert len({c.id for c in chunks}) == 1
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_sdk_extra_body_top_k_1_is_greedy(oai: Any) -> None:
    greedy = oai.chat.completions.create(
        model=MODEL, messages=HI, temperature=0, max_tokens=12, extra_body={"ignore_eos": True}
    )
    for seed in (1, 2):
        top1 = oai.chat.completions.create(
            model=MODEL,
            messages=HI,
            temperature=1.5,
            seed=seed,
            max_tokens=12,
            extra_body={"top_k": 1, "ignore_eos": True},
        )
        assert top1.choices[0].message.content == greedy.choices[0].message.content


def test_sdk_extra_body_repetition_penalty_changes_greedy_output(oai: Any) -> None:
    def run(**extra: Any) -> str:
        resp = oai.chat.completions.create(
            model=MODEL, messages=HI, temperature=0, max_tokens=16, extra_body={"ignore_eos": True, **extra}
        )
        return resp.choices[0].message.content

    plain = run()
    assert run(repetition_penalty=1.0) == plain  # 1.0 disables it
    assert run(repetition_penalty=2.0) != plain


@pytest.mark.parametrize("max_tokens", [3, 14])
def test_sdk_extra_body_ignore_eos(oai: Any, max_tokens: int) -> None:
    resp = oai.chat.completions.create(
        model=MODEL, messages=HI, temperature=0, max_tokens=max_tokens, extra_body={"ignore_eos": True}
    )
    assert resp.usage.completion_tokens == max_tokens
    assert resp.choices[0].finish_reason == "length"


def test_sdk_extra_body_beam_search(oai: Any, http: httpx.Client) -> None:
    resp = oai.chat.completions.create(
        model=MODEL, messages=HI, temperature=0, max_tokens=6, n=2, extra_body={"use_beam_search": True}
    )
    assert [c.index for c in resp.choices] == [0, 1]
    expected = ok(chat(http, temperature=0, max_tokens=6, n=2, use_beam_search=True))
    assert [c.message.content for c in resp.choices] == [text_of(expected, 0), text_of(expected, 1)]
    assert resp.choices[0].message.content != resp.choices[1].message.content  # two different beams
