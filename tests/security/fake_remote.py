"""Hostile remote servers on loopback for the page's Backend tab: an OpenAI-style server whose model id is markup
(and which records every path it is asked for), and a tarpit that accepts connections and never answers."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SCRIPT_ID = "<img src=x onerror=\"window.pgPwned=1;document.title='pwned'\">"


@contextlib.contextmanager
def fake_openai(model_id: str = SCRIPT_ID) -> Iterator[tuple[str, list[str]]]:
    """(its base URL, the raw request paths it received). It answers /v1/models with `model_id` and any other GET
    or POST with `{}` (so a call outside the base is seen, not refused)."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, doc: Any) -> None:
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            seen.append(self.path)
            if self.path.split("?")[0] == "/v1/models":
                self._answer({"object": "list", "data": [{"id": model_id, "object": "model"}]})
            else:
                self._answer({"steps": []})

        def do_POST(self) -> None:
            seen.append(self.path)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer({"count": 1, "max_model_len": 8, "tokens": [1]})

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def tarpit() -> Iterator[str]:
    """A listener that accepts every connection and never sends a byte; its URL. Closing it resets them all."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = listener.accept()
                held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()
