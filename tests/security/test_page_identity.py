"""Issue 31, item 6: the per-client limit counted the page's login name, which is free text: one key typed under
ten names ran ten requests under a limit of four. A page session is known by the credential its login proved, so
it shares one limit with that key's API requests and with every other name typed with it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import MODEL, LiveServer, serving
from tests.playground.test_ui import CHECK

KEY = "page-identity-key-41c7"
LIMIT = "Too many concurrent requests from this client: the limit is 1."
LONG = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Tell me a long story."}],
    "max_tokens": 512,
    "ignore_eos": True,
    "temperature": 0,
    "stream": True,
}


def page_client(url: str, auth: tuple[str, str] | None = None) -> Any:
    """gradio_client logged in through the page's own /login form (any name, a server secret as the password)."""
    from gradio_client import Client

    return Client(url + "/", auth=auth, verbose=False, download_files=False)


@pytest.fixture(scope="module")
def keyed(settings: Any, service: Any) -> Iterator[LiveServer]:
    with serving(settings.replace(api_keys=[KEY], max_concurrent_per_client=1), service) as server:
        yield server


@contextlib.contextmanager
def holding_the_keys_slot(server: LiveServer) -> Iterator[None]:
    """An API stream with KEY that holds that key's one slot until the block ends (its first event is in)."""
    with (
        httpx.Client(base_url=server.url, timeout=120, headers={"Authorization": f"Bearer {KEY}"}) as http,
        http.stream("POST", "/v1/chat/completions", json=LONG) as r,
    ):
        assert r.status_code == 200
        lines = r.iter_lines()  # kept: dropping it closes the response
        next(lines)
        yield


def test_any_name_typed_with_the_key_shares_the_keys_limit(keyed: LiveServer) -> None:
    pages = [page_client(keyed.url, (name, KEY)) for name in ("alice", "bob", "mallory-3")]
    with holding_the_keys_slot(keyed):
        for ui in pages:
            out = ui.predict(message="hi", system="", max_tokens=2, temperature=0.0, api_name="/chat")
            assert LIMIT in out[CHECK], out[CHECK]
    out = pages[0].predict(message="hi", system="", max_tokens=2, temperature=0.0, api_name="/chat")
    assert out[CHECK] == ""  # the slot is free again: the page answers


def test_the_access_line_names_the_credential_never_the_typed_name(
    keyed: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    from engine.http.auth import client_key

    with caplog.at_level(logging.INFO, logger="playground.access"):
        page_client(keyed.url, ("typed-name-9f", KEY)).predict(message="hi", system="", max_tokens=2, api_name="/chat")
    lines = [
        r.getMessage() for r in caplog.records if r.name == "playground.access" and '"entry":"page"' in r.getMessage()
    ]
    assert lines and f'"client":"{client_key(KEY, None)}"' in lines[-1]
    assert "typed-name-9f" not in "\n".join(lines) and KEY not in "\n".join(lines)
