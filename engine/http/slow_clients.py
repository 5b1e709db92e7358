"""Read deadlines for slow clients (`--read-timeout-s`, as nginx's client_header_timeout / client_body_timeout).

uvicorn bounds only the idle time between two requests of a keep-alive connection (`timeout_keep_alive`): a
client that opens a connection and sends its headers a byte at a time, or stops in the middle of its body, holds
a socket and a task for as long as it likes (200 such connections stayed open 80 s and more). Two bounds here:

* `header_deadline(seconds)`: uvicorn's h11 protocol with a deadline on the request line and headers, counted
  from the connection's start (or the previous response's end on a keep-alive connection): past it the server
  answers 408 and closes the connection.
* `BodyReadDeadline`: ASGI middleware; while a request's body is incomplete, each read must bring data within
  `seconds` (a pause, not the whole upload: a large upload over a slow link is fine as long as it moves). Past it
  the request ends with 408 in its route family's error body and the connection closes. Once the body is in,
  reads pass through untouched (a stream's wait for the client's disconnect is not a body read).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from engine.http.error_bodies import error_response, family_of
from engine.protocol.errors import RequestTimeoutError

log = logging.getLogger(__name__)
_HEADERS_408 = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: 36\r\n\r\nThe request headers took too long.\r\n"
)


class _HeaderDeadlineProtocol(H11Protocol):
    """H11Protocol whose request line and headers must arrive within `header_timeout` seconds."""

    header_timeout = 30.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # a request's headers are in: its body has its own deadline
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()  # the next request on this connection

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expired(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        log.debug("closing a connection whose request headers took over %.0f s", self.header_timeout)
        self.transport.write(_HEADERS_408)
        self.transport.close()


def header_deadline(seconds: float) -> type[H11Protocol]:
    """uvicorn's `http` protocol class with this header deadline (`uvicorn.Config(http=...)`)."""
    return type("HeaderDeadlineProtocol", (_HeaderDeadlineProtocol,), {"header_timeout": float(seconds)})


class _BodyTimedOut(ClientDisconnect):
    """Raised into the route by a body read that waited too long: to the app it is a client that left."""


class BodyReadDeadline:
    """ASGI middleware: a request whose body pauses longer than `seconds` ends with 408 (see the module)."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app, self.seconds = app, seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body_done, timed_out, started = False, False, False

        async def read() -> Message:
            nonlocal body_done, timed_out
            if body_done:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.seconds)
            except asyncio.TimeoutError:
                timed_out = True
                raise _BodyTimedOut() from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, read, watch)
        except ClientDisconnect:
            if not timed_out:
                raise
        if timed_out and not started:
            log.debug("ending a request whose body paused over %.0f s", self.seconds)
            exc = RequestTimeoutError(f"The request body paused for more than {self.seconds:g} s.")
            response = error_response(family_of(scope["path"]), exc)
            response.headers["Connection"] = "close"  # the rest of the body is never read: no keep-alive
            await response(scope, receive, send)
