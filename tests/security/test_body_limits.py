"""Issue 31, item 13: hostile numbers in a body are a validation error, never a 500.

A 5000-digit integer is valid JSON that Python refuses to convert (its int-string limit): it used to escape
`decode_json` as a 500. Every route that reads a JSON body answers 422 (/v1 family) or 400 PANGU.0010, and the
number is not echoed back. Its neighbours (huge but convertible integers, floats that overflow) too.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.api_helpers import assert_v1_error
from tests.conftest import MODEL
from tests.pangu_helpers import PATHS, assert_pangu_error

HUGE = "9" * 5000  # past Python's 4300-digit limit
BIG = "9" * 4000  # converts, but no field can hold it
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
N = "__NUMBER__"


def with_number(value: Any, number: str) -> str:
    """`value` as JSON text, with the string N replaced by `number` written out as a JSON number."""
    return json.dumps(value).replace(json.dumps(N), number)


def raw(http: httpx.Client, path: str, text: str) -> httpx.Response:
    return http.post(path, content=text.encode(), headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(
    "number", [HUGE, "-" + HUGE, BIG, "1e99999", "-1e99999"], ids=["huge", "-huge", "big", "inf", "-inf"]
)
@pytest.mark.parametrize("field", ["seed", "max_tokens", "temperature", "top_k", "n"])
@pytest.mark.parametrize("route", ["v1", "pangu_v2", "pangu_v1"])
def test_long_numbers_in_chat_fields(http: httpx.Client, route: str, field: str, number: str) -> None:
    r = raw(http, PATHS[route], with_number({**CHAT, field: N}, number))
    if route == "v1":
        message = assert_v1_error(r, 422)
    else:
        message = assert_pangu_error(r, route, 400, "PANGU.0010")
    assert "9" * 65 not in message and len(r.content) < 2000


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("/tokenize", with_number({"prompt": "hi", "model": MODEL, "x": N}, HUGE)),
        ("/detokenize", with_number({"tokens": [N]}, HUGE)),
        ("/detokenize", with_number({"tokens": [N]}, BIG)),
        ("/v1/chat/completions", with_number({**CHAT, "stop_token_ids": [N]}, HUGE)),
        ("/v1/chat/completions", with_number([N], HUGE)),
    ],
    ids=["tokenize", "detokenize", "detokenize-big", "stop-token-ids", "top-level"],
)
def test_long_numbers_elsewhere(http: httpx.Client, path: str, text: str) -> None:
    r = raw(http, path, text)
    assert_v1_error(r, 422)
    assert "9" * 65 not in r.text


def test_the_server_still_answers(http: httpx.Client, live: Any) -> None:
    r = raw(http, "/v1/chat/completions", with_number({**CHAT, "seed": N}, "1"))
    assert r.status_code == 200, r.text
