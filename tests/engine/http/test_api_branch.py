"""Branches from a token (issue 19, point 5) on the API and in the page's planner: `continue_final_message` (vLLM's
extension) continues an open final assistant message; the page's branch (playground/client/branch.py) keeps the reply up
to a token, takes an alternative there, and asks for the rest with the original settings. Taking the original
token (greedy) reproduces the original reply token for token, its prompt served from the prefix cache."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from engine.protocol.request import parse_chat_request
from playground.client import branch
from playground.client.reply import ReplyView
from playground.page import turn_codec
from tests.conftest import chat

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

QUESTION = [
    {"role": "system", "content": "You are a helpful assistant who answers in full sentences."},
    {"role": "user", "content": "Describe the water cycle for a ten year old, step by step, in plain words."},
]
TOKENS = 14


def replied(service: Any, body: dict[str, Any]) -> ReplyView:
    """The page's own fold (ReplyView) of a real stream from the service, as the chat builds it."""

    async def run() -> ReplyView:
        reply = ReplyView()
        gen = await service.start(parse_chat_request(body))
        async for chunk in gen:
            reply.add(chunk)
        reply.done = True
        return reply

    return asyncio.run(run())


def body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "SmolLM2-135M-Instruct",
        "messages": QUESTION,
        "stream": True,
        "temperature": 0,
        "max_tokens": TOKENS,
        "logprobs": True,
        "top_logprobs": 3,
        "stream_options": {"include_usage": True},
        **extra,
    }


@pytest.fixture(scope="module")
def original(service: Any) -> tuple[dict[str, Any], ReplyView]:
    b = body(model=service.served_name)
    return b, replied(service, b)


@pytest.mark.parametrize("pos", [0, 4, 9])
def test_a_branch_on_the_original_token_reproduces_the_reply(service: Any, original: Any, pos: int) -> None:
    request, reply = original
    c = reply.first
    assert len(c.logprobs) == TOKENS and c.finish_reason == "length"
    alt = next(j for j, a in enumerate(c.logprobs[pos].top_logprobs) if a.token == c.logprobs[pos].token)
    made = branch.plan(request, reply, 0, pos, alt)
    assert isinstance(made, branch.Branch), made
    assert made.body["continue_final_message"] is True and made.body["max_tokens"] == TOKENS - pos - 1
    again = replied(service, made.body)
    seeded = made.reply.first.content
    assert (seeded + again.first.content) == c.content
    assert again.first.token_ids == c.token_ids[pos + 1 :]
    usage = again.usage
    assert usage is not None and usage.prompt_tokens_details.cached_tokens > 0  # the prompt from the prefix cache


def test_a_branch_on_another_token_changes_the_reply(service: Any, original: Any) -> None:
    request, reply = original
    c = reply.first
    pos = 2
    alt = next(j for j, a in enumerate(c.logprobs[pos].top_logprobs) if a.token != c.logprobs[pos].token)
    made = branch.plan(request, reply, 0, pos, alt)
    assert isinstance(made, branch.Branch)
    assert made.now != made.was and made.reply.branched == {"at": pos, "was": made.was, "now": made.now}
    again = replied(service, made.body)
    text = made.reply.first.content + again.first.content
    assert text.startswith("".join(e.token for e in c.logprobs[:pos]) + made.now)
    assert text != c.content
    assert len(again.first.token_ids) <= TOKENS - pos - 1
    kept = turn_codec.reply_of(turn_codec.reply_doc(made.reply))  # a reload keeps where the branch came from
    assert kept.branched == made.reply.branched and kept.first.content == made.reply.first.content


def test_the_planner_refuses_what_cannot_be_branched(original: Any) -> None:
    request, reply = original
    assert branch.plan(request, reply, 0, TOKENS, 0) == "that token is no longer there to branch from."
    assert branch.plan(request, reply, 0, 0, 7).startswith("that token")
    assert branch.plan(request, reply, 1, 0, 0).startswith("that token")
    assert branch.plan(None, reply, 0, 0, 0).startswith("that token")
    assert branch.parse("branch:3:0:12:1:1733") == (3, 0, 12, 1)
    assert branch.parse("branch:3:x:12:1") is None and branch.parse("2:prev:1") is None


def test_continue_final_message_on_the_api(http: httpx.Client) -> None:
    messages = [*QUESTION, {"role": "assistant", "content": "The water cycle is"}]
    r = chat(
        http, messages=messages, continue_final_message=True, add_generation_prompt=False, max_tokens=4, temperature=0
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]
    r = chat(http, messages=messages, continue_final_message=True, max_tokens=4)
    assert r.status_code == 422
    assert r.json()["error"] == "Parameters add_generation_prompt and continue_final_message cannot both be true."
    r = chat(http, messages=QUESTION, continue_final_message=True, add_generation_prompt=False, max_tokens=4)
    assert r.status_code == 422
    assert r.json()["error"] == "Parameter continue_final_message needs a final assistant message with text content."
