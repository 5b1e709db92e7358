"""Issue 31, item 14: slow clients cannot hold connections open (`--read-timeout-s`, here 2 s).

Raw sockets, as a slowloris would: a connection that sends nothing, headers sent a byte at a time, a body that
stops half way. Each is answered 408 and closed soon after the deadline. A slow body that keeps moving, and a
stream that lasts longer than the deadline, are not cut.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import MODEL, LiveServer, serving

DEADLINE = 2
SLACK = 3.0  # the deadline plus this is when a connection must be gone


@pytest.fixture(scope="module")
def strict(settings: Any, service: Any) -> Iterator[LiveServer]:
    with serving(settings.replace(read_timeout_s=DEADLINE, ui=False), service) as server:
        yield server


def connect(server: LiveServer) -> socket.socket:
    url = httpx.URL(server.url)
    sock = socket.create_connection((url.host, url.port), timeout=DEADLINE + SLACK + 5)
    return sock


def drain(sock: socket.socket, trickle: bytes = b"", every: float = 0.5) -> tuple[bytes, float]:
    """Send `trickle` a byte every `every` s while reading; (what the server sent, seconds until it closed)."""
    started = time.monotonic()
    received = b""
    sock.settimeout(every)
    while time.monotonic() - started < DEADLINE + SLACK + 5:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if trickle:
                sock.sendall(trickle[:1])
                trickle = trickle[1:] or b"X"
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        received += chunk
    return received, time.monotonic() - started


def test_a_silent_connection_is_closed(strict: LiveServer) -> None:
    with connect(strict) as sock:
        received, took = drain(sock)
    assert took < DEADLINE + SLACK, took
    assert received.startswith(b"HTTP/1.1 408 "), received[:80]


def test_headers_sent_a_byte_at_a_time_are_cut_off(strict: LiveServer) -> None:
    with connect(strict) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        received, took = drain(sock, b"X-Slow: " + b"a" * 1000)
    assert took < DEADLINE + SLACK, took
    assert received.startswith(b"HTTP/1.1 408 "), received[:80]


@pytest.mark.parametrize(
    ("path", "shape"),
    [("/v1/chat/completions", "v1"), ("/api/v2/chat/completions", "pangu_v2"), ("/tokenize", "v1")],
)
def test_a_body_that_stops_is_cut_off(strict: LiveServer, path: str, shape: str) -> None:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode()
    with connect(strict) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body[:10])
        received, took = drain(sock)
    assert took < DEADLINE + SLACK, took
    status, _, rest = received.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 408 "), received[:200]
    headers, _, payload = rest.partition(b"\r\n\r\n")
    assert b"connection: close" in headers.lower()
    data = json.loads(payload)
    if shape == "v1":
        assert data["error_type"] == "Request Timeout"
    else:
        assert data["error"]["code"] == "PANGU.0010"


def test_a_slow_body_that_keeps_moving_is_served(strict: LiveServer) -> None:
    """Each pause is under the deadline, the whole upload is not: the deadline is on pauses, as nginx's."""
    body = json.dumps({"model": MODEL, "prompt": "hello there"}).encode()
    with connect(strict) as sock:
        head = f"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        sock.sendall(head.encode())
        started = time.monotonic()
        step = max(1, len(body) // 8)
        for i in range(0, len(body), step):
            sock.sendall(body[i : i + step])
            time.sleep(DEADLINE * 0.4)
        assert time.monotonic() - started > DEADLINE
        sock.settimeout(30)
        received = sock.recv(65536)
    assert received.startswith(b"HTTP/1.1 200 "), received[:200]


def test_a_long_stream_is_not_cut(strict: LiveServer) -> None:
    """Once the body is in, reads pass through: a stream that outlasts the deadline ends normally."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Count to fifty."}],
        "max_tokens": 48,
        "ignore_eos": True,
        "stream": True,
        "temperature": 0,
    }
    started = time.monotonic()
    with strict.client() as http, http.stream("POST", "/v1/chat/completions", json=body) as r:
        text = "".join(r.iter_text())
    took = time.monotonic() - started
    assert r.status_code == 200 and text.rstrip().endswith("data: [DONE]"), (took, text[-200:])
