"""Helpers for the serving tests (not a test module): a service on a small engine, and long-running clients."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

from tests.conftest import MODEL

HI = [{"role": "user", "content": "hi"}]


@contextlib.contextmanager
def served(settings: Any, service: Any, **changes: Any) -> Iterator[tuple[httpx.Client, Any]]:
    """Like conftest.extra_server, also yielding the app (to drain it, or to read its state)."""
    from tests.conftest import serving

    with serving(settings.replace(**changes), service) as server, server.client() as client:
        yield client, server.server.config.app


@contextlib.contextmanager
def small_service(service: Any, settings: Any, **limits: Any) -> Iterator[Any]:
    """A second ChatService on the session's model with its own engine and tight limits (max_queue=2, ...)."""
    from engine.core.engine import Engine, EngineLimits
    from engine.serving.service import ChatService
    from tests.engine.core.test_engine import pool_tokens

    core = service.engine
    lim = EngineLimits(max_model_len=service.model.context_length, **limits)
    engine = Engine(core.runner.sibling(pool_tokens(lim)), core.tokenizer, set(core.eos_ids), lim)
    engine.start()
    try:
        yield ChatService(engine, service.tokenizer, service.model, settings.serving)
    finally:
        engine.shutdown()


def wait_for(predicate: Any, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class LongStream:
    """A stream held open on a thread until `close()`; `first` is set at the first content chunk (or at the end)."""

    def __init__(self, base_url: str, path: str = "/v1/chat/completions", **fields: Any) -> None:
        body = {
            "model": MODEL,
            "messages": HI,
            "stream": True,
            "max_tokens": 400,
            "ignore_eos": True,
            "top_k": 1,
            **fields,
        }
        self.body = {k: v for k, v in body.items() if v is not None}  # greedy by top_k: Pangu refuses temperature 0
        self.base_url, self.path = base_url, path
        self.headers: dict[str, str] | None = None
        self.first = threading.Event()
        self._stop = threading.Event()
        self.lines: list[str] = []
        self.status: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self, headers: dict[str, str] | None = None) -> LongStream:
        self.headers = headers
        self.thread.start()
        return self

    def _run(self) -> None:
        with (
            httpx.Client(base_url=self.base_url, timeout=120) as c,
            c.stream("POST", self.path, json=self.body, headers=self.headers) as r,
        ):
            self.status = r.status_code
            for line in r.iter_lines():
                self.lines.append(line)
                if '"content":"' in line and '"content":""' not in line:
                    self.first.set()
                if self._stop.is_set():
                    break
        self.first.set()  # never leave a waiter hanging; `status` and `lines` tell what happened

    def wait_started(self, timeout: float = 60) -> None:
        """Until the first content chunk; fails if the stream was refused or ended before it."""
        assert self.first.wait(timeout), "no content chunk in time"
        assert self.status == 200 and self.thread.is_alive(), (self.status, self.lines[-3:])

    def close(self) -> None:
        self._stop.set()
        self.thread.join(timeout=60)

    def join(self, timeout: float = 120) -> None:
        self.thread.join(timeout=timeout)
