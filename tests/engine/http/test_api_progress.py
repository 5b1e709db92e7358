"""Prompt progress (issue 19, point 3): with `return_progress: true` a stream carries a `prompt_progress` chunk after
each chunk of its prompt's prefill (llama.cpp's extension), before its first token; without it, the stream is as it
always was. Only for streams, and only the /v1 route sends them."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.conftest import chat, sse_events


def long_prompt(words: int = 600) -> list[dict[str, Any]]:
    """A prompt longer than the engine's per-step prefill budget (256 tokens by default), made unique so no earlier
    test's prefix cache serves it."""
    tag = uuid.uuid4().hex
    text = f"{tag} " + " ".join(f"item{i % 97} is a word" for i in range(words // 4))
    return [{"role": "user", "content": text + "\nSay one word."}]


def events(http: httpx.Client, **body: Any) -> list[Any]:
    r = chat(http, stream=True, max_tokens=2, **body)
    assert r.status_code == 200, r.text
    return sse_events(r.text)


def progress_of(evs: list[Any]) -> list[dict[str, Any]]:
    return [e["prompt_progress"] for e in evs if isinstance(e, dict) and "prompt_progress" in e]


def test_a_long_prompt_streams_its_progress_before_the_first_token(http: httpx.Client) -> None:
    messages = long_prompt()
    evs = events(http, messages=messages, return_progress=True, stream_options={"include_usage": True})
    progress = progress_of(evs)
    usage = next(e["usage"] for e in evs if isinstance(e, dict) and e.get("usage"))
    assert len(progress) >= 2, progress  # several prefill chunks
    assert all(set(p) == {"total", "cache", "processed", "time_ms"} for p in progress)
    assert {p["total"] for p in progress} == {usage["prompt_tokens"]}
    done = [p["processed"] for p in progress]
    assert done == sorted(done) and len(set(done)) == len(done), done  # strictly growing
    assert done[-1] == usage["prompt_tokens"]
    assert [p["time_ms"] for p in progress] == sorted(p["time_ms"] for p in progress)
    first_progress = next(i for i, e in enumerate(evs) if isinstance(e, dict) and "prompt_progress" in e)
    first_token = next(
        i
        for i, e in enumerate(evs)
        if isinstance(e, dict) and e.get("choices") and e["choices"][0]["delta"].get("content")
    )
    last_progress = max(i for i, e in enumerate(evs) if isinstance(e, dict) and "prompt_progress" in e)
    assert first_progress < last_progress < first_token
    for e in evs:
        if isinstance(e, dict) and "prompt_progress" in e:
            assert e["choices"] == [] and e["object"] == "chat.completion.chunk" and "usage" not in e

    # Sent again, the prefix cache serves most of it: the progress says how much.
    again = progress_of(events(http, messages=messages, return_progress=True))
    assert again[0]["cache"] > 0 and again[0]["cache"] == again[-1]["cache"]
    assert again[-1]["processed"] == usage["prompt_tokens"]
    assert len(again) < len(progress)


def test_without_the_flag_a_stream_carries_no_progress(http: httpx.Client) -> None:
    assert progress_of(events(http, messages=long_prompt())) == []


def test_a_short_prompt_reports_once(http: httpx.Client) -> None:
    progress = progress_of(events(http, messages=[{"role": "user", "content": uuid.uuid4().hex}], return_progress=True))
    assert len(progress) == 1 and progress[0]["processed"] == progress[0]["total"]


def test_progress_is_for_streams_only(http: httpx.Client) -> None:
    r = chat(http, return_progress=True, max_tokens=2)
    assert r.status_code == 422  # MindIE's status for every validation failure on /v1 (spec §6.1)
    assert r.json()["error"] == "Parameter return_progress is only allowed when stream is true."
    r = chat(http, stream=True, return_progress="yes", max_tokens=2)
    assert r.status_code == 422 and "return_progress" in r.json()["error"]


def test_the_openai_sdk_passes_progress_chunks_through(oai: Any) -> None:
    stream = oai.chat.completions.create(
        model=oai.models.list().data[0].id,
        messages=long_prompt(),
        max_tokens=2,
        stream=True,
        extra_body={"return_progress": True},
    )
    chunks = list(stream)
    progress = [c.model_extra["prompt_progress"] for c in chunks if (c.model_extra or {}).get("prompt_progress")]
    assert len(progress) >= 2 and progress[-1]["processed"] == progress[-1]["total"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
