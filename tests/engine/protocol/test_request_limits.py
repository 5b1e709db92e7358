"""The §2.3 media limits checked on the request itself, before any model or media pipeline (case 66)."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from engine.protocol.errors import RequestValidationError
from engine.protocol.request import parse_chat_request
from tests.api_helpers import assert_422, send

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)

PNG = "data:image/png;base64,iVBORw0KGgo="


def body(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "look"}, *parts]}]}


def image(url: str = PNG) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def audio(size: int) -> dict[str, Any]:
    data = base64.b64encode(b"\0" * size).decode()
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


def test_twenty_media_items_pass_twenty_one_do_not() -> None:
    parse_chat_request(body(*[image()] * 20))
    with pytest.raises(RequestValidationError, match="at most 20 media items, got 21"):
        parse_chat_request(body(*[image()] * 21))


def test_media_spread_over_messages_counts_together() -> None:
    messages = [{"role": "user", "content": [image()] * 11}, {"role": "user", "content": [image()] * 10}]
    with pytest.raises(RequestValidationError, match="got 21"):
        parse_chat_request({"model": "m", "messages": messages})


def test_inline_audio_size_is_checked_from_its_base64() -> None:
    parse_chat_request(body(audio(20 << 20)))
    with pytest.raises(RequestValidationError, match=r"messages\[0\].content\[1\] must be at most 20 MiB"):
        parse_chat_request(body(audio((20 << 20) + 1)))


def test_text_messages_are_not_media() -> None:
    parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "x" * 100}] * 30})


def test_21_media_parts_over_http(http: httpx.Client) -> None:  # case 66
    assert_422(send(http, {"messages": body(*[image()] * 21)["messages"]}), "media items")
