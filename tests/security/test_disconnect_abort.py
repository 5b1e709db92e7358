"""Issue 31, item 8: a client that leaves while its request is queued or prefilling has it aborted, so the engine
is idle soon after a crowd of clients has left (vLLM aborts on disconnect at any stage).

On ad58bb7 a request was aborted only once it had produced its first token (the disconnect watch started with the
response), so every queued request whose client had left still waited its turn and prefilled its whole prompt.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import httpx

from tests.conftest import MODEL, serving

CLIENTS = 12
PANGRAM = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches"
WORDS = PANGRAM.split()


def _raw_request(url: str, body: dict[str, Any]) -> bytes:
    host, port = httpx.URL(url).host, httpx.URL(url).port
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    return head + payload


def _leave_when(url: str, body: dict[str, Any], leave: threading.Event) -> None:
    """Send the request on a socket of its own, wait for the signal, and close the socket without reading a byte."""
    u = httpx.URL(url)
    with socket.create_connection((u.host, u.port), timeout=30) as sock:
        sock.sendall(_raw_request(url, body))
        leave.wait(60)


def _load(client: httpx.Client) -> tuple[int, int]:
    requests = client.get("/server/state").json()["requests"]
    return requests["running"], requests["waiting"]


def _idle_within(client: httpx.Client, seconds: float) -> float | None:
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        if _load(client) == (0, 0):
            return time.monotonic() - began
        time.sleep(0.1)
    return None


def test_clients_that_leave_while_queued_or_prefilling_are_aborted(settings: Any, service: Any) -> None:
    """Twelve clients send long prompts (about 1,500 tokens each, distinct) to a server that runs one request at a
    time, half of them streaming, and leave once the engine holds them (one running, the others queued). The engine
    must be idle within 10 s of the last one leaving (ad58bb7: each queued request still prefilled in turn)."""
    with serving(settings.replace(max_num_seqs=1, ui=False), service) as server, server.client() as client:
        leave = threading.Event()
        threads = []
        for i in range(CLIENTS):
            words = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(1500))
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": f"{i}: {words}"}],
                "max_tokens": 300,
                "ignore_eos": True,
                "stream": i % 2 == 1,
            }
            threads.append(threading.Thread(target=_leave_when, args=(server.url, body, leave)))
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while sum(_load(client)) < CLIENTS // 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # the requests are prepared (templated, tokenized) and reach the engine
        held = _load(client)
        leave.set()
        assert sum(held) >= CLIENTS // 2, held  # the storm is queued behind the one running
        for t in threads:
            t.join()
        took = _idle_within(client, 10.0)
        assert took is not None, f"still busy 10 s after the clients left: {_load(client)}"
        # And the server serves the next client as ever (the aborted requests freed their pages and slots).
        r = client.post(
            "/v1/chat/completions",
            json={"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
        )
        assert r.status_code == 200, r.text
