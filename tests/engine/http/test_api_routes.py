"""Routes against the live server: health, models, 404/405/trailing slash, /v1 error bodies and their hygiene.

Spec §1.1, §1.3, §1.4, §6.1, §6.2, §6.5; conformance cases 1-4 and 13.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api_helpers import assert_v1_error
from tests.conftest import MODEL, chat, extra_server

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

# ---- health ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/health", "/v2/health/live", "/v2/health/ready"])
def test_health_ready_is_200_with_empty_body(http: httpx.Client, path: str) -> None:  # case 1
    r = http.get(path)
    assert r.status_code == 200
    assert r.content == b""


@pytest.fixture
def loading_server(settings: Any) -> Iterator[httpx.Client]:
    """A second real server whose model has not loaded yet: app.py's state before its loader thread finishes."""
    with extra_server(settings, None, ui=False) as client:
        yield client


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/health"), ("GET", "/v2/health/ready"), ("GET", "/v1/models"), ("POST", "/v1/chat/completions")],
)
def test_everything_is_503_while_loading(loading_server: httpx.Client, method: str, path: str) -> None:  # case 2
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    r = loading_server.request(method, path, json=body if method == "POST" else None)
    assert_v1_error(r, 503)


# ---- models ------------------------------------------------------------------------------------------------


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_models_list(http: httpx.Client, service: Any) -> None:  # case 3
    r = http.get("/v1/models")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    card = body["data"][0]
    assert card["id"] == MODEL
    assert card["object"] == "model"
    assert card["root"] == MODEL and card["parent"] is None
    assert isinstance(card["created"], int) and isinstance(card["owned_by"], str) and card["owned_by"]
    assert card["max_model_len"] == service.model.context_length > 0
    assert card["input_modalities"] == ["text", "audio"]  # extension: audio is transcribed for the text model
    for text in _strings(body):  # [SEC] no absolute filesystem path anywhere
        assert not text.startswith(("/", "~")) and not re.match(r"^[A-Za-z]:\\", text), text
        assert str(Path.home()) not in text and ".cache" not in text, text


def test_model_by_id(http: httpx.Client) -> None:
    listed = http.get("/v1/models").json()["data"][0]
    r = http.get(f"/v1/models/{MODEL}")
    assert r.status_code == 200
    assert r.json() == listed


@pytest.mark.parametrize("model_id", ["unknown", MODEL.lower(), MODEL + "x"])
def test_unknown_model_id_is_404(http: httpx.Client, model_id: str) -> None:  # case 4
    assert_v1_error(http.get(f"/v1/models/{model_id}"), 404)


# ---- unknown paths, trailing slashes, wrong methods -------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/nope"),
        ("GET", "/v1/nope"),
        ("POST", "/v1/chat/completions/"),  # a trailing slash is a different path
        ("POST", "/v1/chat/completion"),
        ("POST", "/V1/chat/completions"),  # matching is case-sensitive
        ("GET", "/V1/models"),
        ("GET", "/health/"),
        ("GET", "/v1/models/"),
    ],
)
def test_unknown_paths_are_404_with_v1_body(http: httpx.Client, method: str, path: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    assert_v1_error(http.request(method, path, json=body if method == "POST" else None), 404)


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v1/chat/completions", "POST"),  # case 13
        ("PUT", "/v1/chat/completions", "POST"),
        ("DELETE", "/v1/chat/completions", "POST"),
        ("POST", "/v1/models", "GET"),
        ("DELETE", f"/v1/models/{MODEL}", "GET"),
        ("POST", "/health", "GET"),
    ],
)
def test_wrong_method_is_405_with_allow(http: httpx.Client, method: str, path: str, allow: str) -> None:
    r = http.request(method, path)
    assert_v1_error(r, 405)
    assert {m.strip() for m in r.headers["allow"].split(",")} == {allow}


def test_ui_still_served_at_root(http: httpx.Client) -> None:
    """The 404/405 handling for API paths must not swallow the Gradio page mounted at "/"."""
    r = http.get("/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")


# ---- error hygiene (§6.5) ----------------------------------------------------------------------------------------

LONG = "Z9q" * 100  # 300 characters: may be echoed only truncated to 64

HYGIENE_CASES: list[tuple[str, dict[str, Any] | bytes]] = [
    ("invalid-json", b'{"model": "' + LONG.encode() + b'", '),
    ("invalid-utf8", b'{"model": "\xc3\x28"}'),
    ("long-model", {"model": LONG}),
    ("long-role", {"messages": [{"role": LONG, "content": "hi"}]}),
    ("long-stop", {"stop": LONG * 4}),
    ("long-temperature-string", {"temperature": LONG}),
    ("template-syntax", {"chat_template": "{% for %}" + LONG}),
    ("template-undefined", {"chat_template": "{{ " + LONG + ".x }}"}),
    ("template-sandbox", {"chat_template": "{{ ''.__class__.__mro__[1].__subclasses__() }}"}),
    ("template-raise", {"chat_template": "{{ raise_exception('" + LONG + "') }}"}),
    ("template-path", {"chat_template": "/etc/passwd"}),
    ("template-file-url", {"chat_template": "file:///etc/hostname"}),
    ("huge-int", {"max_tokens": 10**400}),
    ("too-long-prompt", {"messages": [{"role": "user", "content": "hello " * 9000}]}),
]


def _send(http: httpx.Client, body: dict[str, Any] | bytes) -> httpx.Response:
    if isinstance(body, bytes):
        return http.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    return chat(http, **body)


@pytest.mark.parametrize(("case", "body"), HYGIENE_CASES, ids=[c for c, _ in HYGIENE_CASES])
def test_error_bodies_are_clean(http: httpx.Client, case: str, body: dict[str, Any] | bytes) -> None:
    r = _send(http, body)
    message = assert_v1_error(r, 422)
    text = r.text
    for marker in (
        "Traceback",
        'File "',
        "site-packages",
        str(Path.home()),
        sys.prefix,
        os.getcwd(),
        "/etc/",
        "0x7f",
        "<class",
        "<function",
        "<module",
        "pydantic",
        "errors.pydantic.dev",
    ):
        assert marker not in text, (marker, text)
    if case == "template-raise":  # §2.7: the error carries the template's own message, within a bounded length
        assert message.startswith("chat_template error: Z9q") and len(message) <= 240, message
    else:
        assert LONG[:65] not in message, "an input longer than 64 characters was echoed untruncated"
    assert "root:" not in text  # no line of /etc/passwd
    for name in ("PATH", "HOME", "PLAYGROUND_CACHE_DIR"):
        value = os.environ.get(name)
        if value and len(value) > 3:
            assert value not in text, name
    json.loads(text)  # one JSON document, nothing appended
