"""Issue 31, item 16 (second half): a client that leaves in the middle of its request body is not an error.

It used to be logged at ERROR with a traceback (and counted as a 500): a flood of such clients fills the
operator's error log. Now it is one quiet DEBUG line and the access line's status 0 ("left before a response").
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

import pytest

from tests.conftest import MODEL

PATHS = [
    "/v1/chat/completions",
    "/api/v2/chat/completions",
    "/v1/p/deployments/d/chat/completions",
    "/tokenize",
    "/detokenize",
    "/gradio_api/upload",
]


def leave_mid_body(url: str, path: str) -> None:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n"
        sock.sendall(head.encode() + b'{"model": "' + MODEL.encode())
        time.sleep(0.3)  # the server is now waiting for the rest of the body


@pytest.mark.parametrize("path", PATHS)
def test_leaving_mid_body_is_not_an_error(live: Any, path: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        leave_mid_body(live.url, path)
        deadline = time.monotonic() + 10
        while not any(path in r.getMessage() for r in caplog.records if r.name == "playground.access"):
            assert time.monotonic() < deadline, "the request was never logged"
            time.sleep(0.05)
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not loud, [(r.name, r.levelname, r.getMessage()) for r in loud]
    (line,) = [r.getMessage() for r in caplog.records if r.name == "playground.access" and path in r.getMessage()]
    assert '"status":500' not in line
