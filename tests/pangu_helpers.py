"""Assertions and builders for the Pangu routes (not a test module): paths, bodies, error shapes, raw SSE."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from tests.conftest import MODEL

V2 = "/api/v2/chat/completions"
V1 = "/v1/proj-1/deployments/dep_1/chat/completions"
PANGU_ID_RE = re.compile(r"^chat-[0-9a-f]{32}$")
PATHS = {"pangu_v2": V2, "pangu_v1": V1, "v1": "/v1/chat/completions"}


def body(route: str, **fields: Any) -> dict[str, Any]:
    """A minimal valid body for the route (V1 needs no model), `fields` merged in (None removes a field)."""
    out: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    if route != "pangu_v1":
        out["model"] = MODEL
    out.update(fields)
    return {k: v for k, v in out.items() if v is not None}


def post(http: httpx.Client, route: str, headers: dict[str, str] | None = None, **fields: Any) -> httpx.Response:
    return http.post(PATHS[route], json=body(route, **fields), headers=headers)


def assert_pangu_error(r: httpx.Response, route: str, status: int, code: str, *fragments: str) -> str:
    """The §6.3 body of the route with `code`; returns the message (V2) or the details' message (V1)."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    data = r.json()
    if route == "pangu_v2":
        assert set(data) == {"error", "id"}, data
        assert PANGU_ID_RE.match(data["id"]) and set(data["error"]) == {"code", "type", "message"}, data
        assert data["error"]["code"] == code, data
        expected_type = {
            400: "invalid_request_error",
            401: "authentication_error",
            404: "not_found_error",
            405: "invalid_request_error",
            413: "invalid_request_error",
            429: "rate_limit_error",
        }.get(status, "server_error")
        assert data["error"]["type"] == expected_type, data
        message = data["error"]["message"]
    else:
        assert route == "pangu_v1"
        assert set(data) == {"error_code", "error_msg", "details"}, data
        assert data["error_code"] == code and isinstance(data["error_msg"], str) and data["error_msg"], data
        assert isinstance(data["details"], list) and len(data["details"]) == 1, data
        assert set(data["details"][0]) == {"error", "error_type"}, data
        message = data["details"][0]["error"]
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


def raw_events(r: httpx.Response, route: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A Pangu stream's JSON chunks and `event:` payloads, after checking its framing (§5.1, §5.3)."""
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    terminator = "data:[DONE]" if route == "pangu_v1" else "data: [DONE]"
    assert r.text.endswith(terminator + "\n\n"), r.text[-200:]
    blocks = r.text.split("\n\n")[:-1]
    assert blocks[-1] == terminator and blocks.count(terminator) == 1
    chunks, events = [], []
    for block in blocks[:-1]:
        assert "\n" not in block, block  # one line per event
        if block.startswith("event:"):
            events.append(json.loads(block[len("event:") :]))
        else:
            assert block.startswith("data: "), block
            chunks.append(json.loads(block[len("data: ") :]))
    return chunks, events


def check_pangu_stream(r: httpx.Response, route: str) -> dict[str, Any]:
    """The §5.3 sequence (cases 101, 102); returns the text, the closing choice and the final usage."""
    chunks, events = raw_events(r, route)
    key, other = ("message", "delta") if route == "pangu_v1" else ("delta", "message")
    head = {k: chunks[0][k] for k in ("id", "created", "model")}
    assert PANGU_ID_RE.match(head["id"]) and head["model"] == MODEL
    assert r.headers["x-request-id"] == head["id"]
    for c in chunks:
        assert {k: c[k] for k in head} == head and c["object"] == "chat.completion.chunk"
        assert "usage" in c, "every Pangu chunk carries usage"
        assert not {"prefill_time", "decode_time_arr", "batch_size"} & (set(c) | set(c["usage"]))
    opening = chunks[0]["choices"]
    assert opening == [{"index": 0, key: {"role": "assistant"}, "logprobs": None, "finish_reason": None}]
    prompt = chunks[0]["usage"]["prompt_tokens"]
    assert chunks[0]["usage"] == {"prompt_tokens": prompt, "completion_tokens": 0, "total_tokens": prompt}
    trailing = chunks[-1]
    assert trailing["choices"] == [], "the event before the terminator is the usage chunk"
    text, closing, done = "", None, 0
    for c in chunks[1:-1]:
        (choice,) = c["choices"]
        assert other not in choice and key in choice and "role" not in choice[key]
        assert closing is None, "nothing after the closing chunk but the usage chunk"
        usage = c["usage"]
        assert usage["prompt_tokens"] == prompt and usage["total_tokens"] == prompt + usage["completion_tokens"]
        assert usage["completion_tokens"] >= done, "usage is cumulative"
        done = usage["completion_tokens"]
        text += choice[key].get("content", "")
        if choice["finish_reason"] is not None:
            assert "stop_reason" in choice
            closing = choice
    assert closing is not None
    assert trailing["usage"] == {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}
    return {"text": text, "closing": closing, "usage": trailing["usage"], "events": events, "chunks": chunks}
