"""The notebooks' `backend.complete(prompt, ...)` (issue 33, item 5): a text completion on the embedded engine
through the same policy and path as POST /v1/completions, folded into the same result object as a chat, with
`result.prompt_logprobs` (also for a chat asked with `prompt_logprobs`)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from engine.protocol.errors import ApiError
from playground.client.backend import LocalBackend
from playground.client.connect import connect
from playground.client.result import ChatResult
from tests.api_helpers import ok
from tests.conftest import MODEL

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def local(service: Any) -> LocalBackend:
    backend = connect(service)
    assert isinstance(backend, LocalBackend)
    return backend


def test_complete_is_the_routes_answer(local: LocalBackend, http: httpx.Client) -> None:
    result = local.complete(PROMPT, max_tokens=4, temperature=0, logprobs=2, prompt_logprobs=1)
    assert isinstance(result, ChatResult)
    api = ok(http.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": 4, "temperature": 0}))
    assert result.reply == api["choices"][0]["text"] and result.id.startswith("cmpl-")
    assert result.completion_tokens == api["usage"]["completion_tokens"] == len(result.logprobs)
    assert len(result.decode_time_arr) == result.completion_tokens - 1
    entries = result.prompt_logprobs
    assert entries is not None and entries[0] is None and len(entries) == api["usage"]["prompt_tokens"]
    assert all(1 <= len(e) <= 2 for e in entries[1:])


def test_chat_result_carries_prompt_logprobs(local: LocalBackend) -> None:
    result = local.chat("hi", max_tokens=1, prompt_logprobs=0)
    assert result.prompt_logprobs is not None and result.prompt_logprobs[0] is None
    assert local.chat("hi", max_tokens=1).prompt_logprobs is None


def test_complete_refuses_what_the_route_refuses(local: LocalBackend) -> None:
    with pytest.raises(ApiError, match="suffix"):
        local.complete(PROMPT, suffix="x")
    with pytest.raises(ApiError, match="vocabulary"):
        local.complete([10**9])


def test_remote_complete_reads_the_routes_stream(local: LocalBackend, live: Any) -> None:
    from playground.client.remote import RemoteBackend

    remote = RemoteBackend(live.url, model=MODEL)
    params = {"max_tokens": 4, "temperature": 0, "logprobs": 1, "prompt_logprobs": 1}
    there, here = remote.complete(PROMPT, **params), local.complete(PROMPT, **params)
    assert there.reply == here.reply and there.completion_tokens == here.completion_tokens
    assert [e.token for e in there.logprobs] == [e.token for e in here.logprobs]
    assert there.prompt_logprobs is not None and len(there.prompt_logprobs) == len(here.prompt_logprobs or [])
    with pytest.raises(ValueError, match="echo"):
        remote.complete(PROMPT, echo=True)
