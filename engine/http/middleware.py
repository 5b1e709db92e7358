"""ASGI wrappers around the whole app (API and the Gradio UI mounted at "/").

`ApiRouting` keeps 404/405 answers API-shaped, in the body of the family the path suggests. `RequestContext`
gives every response an `X-Request-Id`, counts it in the metrics and writes one structured access-log line
without secrets and, unless asked, without message content. Both are plain ASGI (not BaseHTTPMiddleware) so
streams pass through unbuffered and a client disconnect still reaches the route.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.http.error_bodies import error_response, family_of
from engine.protocol.errors import IncompleteGenerationError, MethodNotAllowedError, NotFoundError
from engine.serving.metrics import Metrics

log = logging.getLogger(__name__)
access_log = logging.getLogger("playground.access")
SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
QUIET_PATHS = ("/health", "/metrics")  # polled: logged at DEBUG while they answer
API_PREFIXES = ("/v1/", "/v2/", "/api/", "/health", "/metrics", "/docs", "/openapi.json")


def client_request_id(scope: Scope) -> str | None:
    """The client's X-Request-Id when it is short and plain (no log injection, no header games), else None."""
    for name, value in scope.get("headers", []):
        if name == b"x-request-id":
            text = value.decode("latin-1")
            return text if SANE_REQUEST_ID.fullmatch(text) else None
    return None


class ApiRouting:
    """Starlette hands any request that no route matches *fully* to the catch-all "/" mount, so with the UI on,
    `GET /v1/chat/completions` would get Gradio's `404 {"detail": "Not Found"}` instead of 405 with `Allow: POST`,
    and unknown paths (`/nope`, trailing slashes) that same non-API body. This wrapper answers a known API path
    with the wrong method itself (405 + Allow), and rewrites a 404 coming from the mounted app into the error
    body of the path's family (§6.1). Requests that an API route matches fully, and every non-404 answer of the
    UI, pass through untouched."""

    def __init__(self, app: ASGIApp, routes: list[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        allowed: set[str] = set()
        for route in self.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                await self.app(scope, receive, send)
                return
            if match == Match.PARTIAL:
                allowed |= getattr(route, "methods", None) or set()
        family = family_of(scope["path"])
        if allowed:
            exc = MethodNotAllowedError("Method not allowed.", allow=", ".join(sorted(allowed)))
            await error_response(family, exc)(scope, receive, send)
            return
        replaced = False

        async def send_api_404(message: Message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] == 404:
                replaced = True
                await error_response(family, NotFoundError("Not found."))(scope, receive, send)
            elif not replaced:  # after a replaced start, the mounted app's own 404 body is dropped
                await send(message)

        await self.app(scope, receive, send_api_404)


def route_label(routes: list[BaseRoute], scope: Scope) -> str:
    """A bounded label for metrics: the matched route's template, else "ui" or "unmatched"."""
    for route in routes:
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return getattr(route, "path", "unmatched")
    path = scope["path"]
    return "unmatched" if path.startswith(API_PREFIXES) else "ui"


class RequestContext:
    def __init__(self, app: ASGIApp, routes: list[BaseRoute], metrics: Metrics) -> None:
        self.app = app
        self.routes = routes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        given = client_request_id(scope)
        state = scope.setdefault("state", {})
        state["client_request_id"] = given
        label = route_label(self.routes, scope)
        info: dict[str, Any] = {"status": 0, "bytes_out": 0, "request_id": given}

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if given:
                    headers["x-request-id"] = given
                elif "x-request-id" not in headers:
                    headers["x-request-id"] = uuid.uuid4().hex
                info["request_id"] = headers["x-request-id"]
                info["status"] = message["status"]
            elif message["type"] == "http.response.body":
                info["bytes_out"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except ClientDisconnect:  # the client left while sending its body: nobody to answer, nothing went wrong
            log.debug("client left before its request body arrived (request %s)", info["request_id"])
        except Exception:
            # A bug, not a client error: the trace goes to the log under the request id, the client gets the
            # family's generic 500 body (§6.5: never a stack trace, a path or a value from the server).
            log.exception("unhandled error in request %s", info["request_id"])
            if not info["status"]:
                await error_response(family_of(scope["path"]), IncompleteGenerationError("Internal error."))(
                    scope, receive, send_with_id
                )
        finally:
            self.metrics.requests.labels(label, str(info["status"])).inc()
            self._log(scope, label, info, state, started)

    def _log(self, scope: Scope, label: str, info: dict[str, Any], state: dict[str, Any], started: float) -> None:
        # The page's own traffic and health/metrics polls at DEBUG (200, or /health's 503 while the model loads): a
        # load balancer polling every second would otherwise bury the requests (issue 30: 236 lines in one start).
        quiet = label == "ui" or scope.get("path") in QUIET_PATHS and info["status"] in (200, 503)
        level = logging.DEBUG if quiet else logging.INFO
        if not access_log.isEnabledFor(level):
            return
        client = scope.get("client")
        record: dict[str, Any] = {
            "request_id": info["request_id"],
            "method": scope["method"],
            "path": scope["path"],  # never the query string: it is where tokens end up when clients misbehave
            "route": label,
            "status": info["status"],  # 0: the client left before a response started
            "ms": round((time.perf_counter() - started) * 1000, 1),
            "client": client[0] if client else None,
            "bytes_out": info["bytes_out"],
        }
        record.update(state.get("access", {}))  # what the chat route adds: ids, token counts, finish reasons
        access_log.log(level, json.dumps(record, separators=(",", ":")))  # ASCII: safe for any log sink
