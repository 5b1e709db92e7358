"""Assertions and request builders shared by the tests/test_api_*.py suites (not a test module)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import httpx

from tests.conftest import MODEL, sse_events

ID_RE = re.compile(r"^chatcmpl-[0-9a-f]{32}$")
ERROR_TYPES = {
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFoundError",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    422: "Input Validation Error",
    429: "Too Many Requests",
    500: "Incomplete Generation",
    503: "Service Unavailable",
}
DROP = object()  # a field value meaning "remove this field from the body"


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def send(http: httpx.Client, fields: dict[str, Any]) -> httpx.Response:
    """POST a minimal valid /v1 body (served model, one "hi" user message) with `fields` merged in."""
    body = {"model": MODEL, "messages": [user("hi")], **fields}
    return http.post("/v1/chat/completions", json={k: v for k, v in body.items() if v is not DROP})


def ok(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    return r.json()


def text_of(body: dict[str, Any], i: int = 0) -> str:
    return body["choices"][i]["message"]["content"]


def entries(body: dict[str, Any], i: int = 0) -> list[dict[str, Any]]:
    return body["choices"][i]["logprobs"]["content"]


def check_cached_tokens(usage: dict[str, Any]) -> None:
    """§4.2: `prompt_tokens_details.cached_tokens` is always present; 0 without a prefix cache, and with one never
    the whole prompt (the last prompt token is always computed). The server may run a prefix cache, so the
    conformance case's "= 0" (case 93) is checked as this range."""
    assert set(usage["prompt_tokens_details"]) == {"cached_tokens"}
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    assert isinstance(cached, int) and 0 <= cached < usage["prompt_tokens"]


def assert_v1_error(r: httpx.Response, status: int, *fragments: str) -> str:
    """The §6.2 body: exactly `error` (a non-empty string naming what failed) and `error_type` for the status."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error", "error_type"}, body
    assert isinstance(body["error"], str) and body["error"], body
    assert body["error_type"] == ERROR_TYPES[status], body
    for fragment in fragments:
        assert fragment in body["error"], (fragment, body["error"])
    return body["error"]


def assert_422(r: httpx.Response, *fragments: str) -> str:
    return assert_v1_error(r, 422, *fragments)


def stream_text(r: httpx.Response) -> tuple[str, dict[str, Any]]:
    """Concatenated content of a one-choice stream, and its (single) closing choice."""
    assert r.status_code == 200, r.text
    chunks = [c for c in sse_events(r.text)[:-1] if c["choices"]]
    closing = [c["choices"][0] for c in chunks if c["choices"][0]["finish_reason"]]
    assert len(closing) == 1
    return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks), closing[0]


def check_stream(r: httpx.Response, n: int = 1) -> dict[str, Any]:
    """Assert the §5.1/§5.2 invariants of a /v1 stream (case 96) and return what it carried, by choice index:
    text, opening/closing counts, closing chunks, the chunk kinds in order, and the usage-only chunk if any."""
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-cache"
    assert "content-length" not in r.headers
    assert r.text.endswith("data: [DONE]\n\n")
    for block in r.text.split("\n\n")[:-1]:
        assert block.startswith(("data: ", ":")) and "\n" not in block, block  # one data line per event
    events = sse_events(r.text)
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    chunks = events[:-1]
    assert all(isinstance(c, dict) for c in chunks)
    head = {k: chunks[0][k] for k in ("id", "created", "model")}
    assert ID_RE.match(head["id"]) and head["model"] == MODEL and r.headers["x-request-id"] == head["id"]
    out: dict[str, Any] = {"text": {}, "opening": Counter(), "closing": {}, "closings": Counter(), "order": []}
    out["usage_chunk"] = None
    for pos, c in enumerate(chunks):
        assert {k: c[k] for k in head} == head, "id, created and model are identical in every chunk"
        assert c["object"] == "chat.completion.chunk"
        assert "prefill_time" not in c and "decode_time_arr" not in c  # §5.2: not sent in streams
        if not c["choices"]:
            assert pos == len(chunks) - 1, "the usage-only chunk comes last, right before [DONE]"
            out["usage_chunk"] = c
            continue
        (choice,) = c["choices"]  # exactly one choice per chunk
        i, delta = choice["index"], choice["delta"]
        assert 0 <= i < n
        assert delta["role"] == "assistant"
        assert {"content", "reasoning_content", "tool_calls"} & set(delta), delta
        if i not in out["text"]:
            assert delta == {"role": "assistant", "content": ""}, "the first chunk of a choice is its opening"
            assert choice["logprobs"] is None and choice["finish_reason"] is None
            out["text"][i] = ""
            out["opening"][i] += 1
            out["order"].append(("open", i))
            continue
        assert out["closings"][i] == 0, f"choice {i} sent a chunk after its closing chunk"
        out["text"][i] += delta.get("content", "")
        if choice["finish_reason"] is None:
            assert "usage" not in c and "stop_reason" not in choice
            out["order"].append(("delta", i))
        else:
            assert "stop_reason" in choice
            usage = c["usage"]
            assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
            check_cached_tokens(usage)
            out["closing"][i] = c
            out["closings"][i] += 1
            out["order"].append(("close", i))
    return out
