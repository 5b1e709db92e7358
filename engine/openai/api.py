"""HTTP routes: auth, body limits, status codes and SSE bytes. Everything else is the ChatService's."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.config import Settings
from engine.openai.errors import (
    ApiError,
    AuthError,
    NotFoundError,
    PayloadTooLargeError,
    RequestValidationError,
    ServiceUnavailableError,
)
from engine.openai.fold import fold
from engine.openai.request import parse_chat_request
from engine.openai.service import ChatService
from engine.openai.wire import V1StreamWriter, response_json

log = logging.getLogger(__name__)

ERROR_TYPES = {
    400: "Bad Request",
    401: "Unauthorized",
    404: "NotFoundError",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    422: "Input Validation Error",
    424: "Generation Error",
    500: "Incomplete Generation",
    503: "Service Unavailable",
}
PROJECT = "llm-playground"


def v1_error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": message, "error_type": ERROR_TYPES.get(status, "Error")}
    return JSONResponse(body, status_code=status, headers=headers)


async def read_body(request: Request, limit: int) -> bytes:
    """Read at most `limit` bytes; answer 413 as soon as the declared or received size exceeds it."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"Request body exceeds {limit} bytes.")
    chunks, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise PayloadTooLargeError(f"Request body exceeds {limit} bytes.")
        chunks.append(part)
    return b"".join(chunks)


def decode_json(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise RequestValidationError("Request body is not valid UTF-8.") from None
    except json.JSONDecodeError as exc:
        raise RequestValidationError(f"Request body is not valid JSON: {exc.msg} at position {exc.pos}.") from None


def check_bearer(request: Request, keys: list[str]) -> None:
    if not keys:
        return
    header = request.headers.get("authorization")
    if not header:
        raise AuthError("Missing credentials: send 'Authorization: Bearer <key>'.", missing=True)
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token or " " in token.strip():
        raise AuthError("Invalid credentials.", missing=False)
    if not any(hmac.compare_digest(token.strip().encode(), k.encode()) for k in keys):
        raise AuthError("Invalid credentials.", missing=False)


def sse(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


def create_app(settings: Settings, get_service: Callable[[], ChatService | None]) -> FastAPI:
    """`get_service` returns None while the model is loading (routes then answer 503)."""
    app = FastAPI(title="LLM Playground API", redirect_slashes=False, docs_url="/docs", openapi_url="/openapi.json")
    body_limit = settings.max_request_length_mb << 20

    def service() -> ChatService:
        svc = get_service()
        if svc is None:
            raise ServiceUnavailableError("The model is loading.")
        return svc

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return v1_error(exc.status, exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = {404: "Not found.", 405: "Method not allowed."}.get(exc.status_code, str(exc.detail))
        return v1_error(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.get("/health", include_in_schema=False)
    async def health() -> Response:
        service()
        return Response(status_code=200)

    app.add_api_route("/v2/health/live", health, methods=["GET"], include_in_schema=False)
    app.add_api_route("/v2/health/ready", health, methods=["GET"], include_in_schema=False)

    def model_card() -> dict[str, Any]:
        svc = service()
        return {"id": svc.served_name, "object": "model", "created": 1730000000, "owned_by": PROJECT,
                "root": svc.served_name, "parent": None, "max_model_len": svc.model.context_length}  # fmt: skip

    @app.get("/v1/models")
    async def list_models(request: Request) -> dict[str, Any]:
        check_bearer(request, settings.api_keys)
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str, request: Request) -> dict[str, Any]:
        check_bearer(request, settings.api_keys)
        card = model_card()
        if model_id != card["id"]:
            raise NotFoundError(f"Model not found: {model_id[:64]!r}.")
        return card

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        check_bearer(request, settings.api_keys)
        req = parse_chat_request(decode_json(await read_body(request, body_limit)), "v1")
        gen = await service().start(req, "v1")
        headers = {"X-Request-Id": gen.id}
        if not req.stream:
            watcher = asyncio.create_task(_abort_on_disconnect(request, gen.abort))
            try:
                resp = await fold(gen)
            finally:
                watcher.cancel()
            return JSONResponse(response_json(resp, settings.perf_stats), headers=headers)
        opts = req.stream_options
        writer = V1StreamWriter(
            perf_stats=settings.perf_stats,
            full_text=settings.full_text_enabled,
            include_usage=bool(opts and opts.include_usage),
            continuous_usage=bool(opts and opts.continuous_usage_stats),
            prompt_tokens=gen.stats.prompt_tokens,
        )

        async def events() -> AsyncIterator[bytes]:
            try:
                async for chunk in gen:
                    data = writer.chunk(chunk)
                    if data is not None:
                        yield sse(data)
            except ApiError as exc:
                yield sse({"error": exc.message, "error_type": ERROR_TYPES.get(exc.status, "Error")})
            finally:
                gen.abort()  # client gone or stream done: free the engine's slot at its next step
            yield sse("[DONE]")

        return StreamingResponse(
            events(), media_type="text/event-stream; charset=utf-8", headers={**headers, "Cache-Control": "no-cache"}
        )

    # Snapshot of the API's own routes, taken before app.py mounts the Gradio UI at "/" (see _ApiRouting).
    app.add_middleware(_ApiRouting, routes=list(app.router.routes))
    return app


class _ApiRouting:
    """Keep 404/405 answers API-shaped when the Gradio UI is mounted at "/" (spec §1.1, §6.1, §6.2).

    Starlette hands any request that no route matches *fully* to the catch-all "/" mount, so with the UI on,
    `GET /v1/chat/completions` would get Gradio's `404 {"detail": "Not Found"}` instead of 405 with `Allow: POST`,
    and unknown paths (`/nope`, trailing slashes) that same non-/v1 body. This wrapper answers a known API path
    with the wrong method itself (405 + Allow), and rewrites a 404 coming from the mounted app into the /v1 error
    body. Requests that an API route matches fully, and every non-404 answer of the UI, pass through untouched.
    """

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
        if allowed:
            await v1_error(405, "Method not allowed.", headers={"Allow": ", ".join(sorted(allowed))})(
                scope, receive, send
            )
            return
        replaced = False

        async def send_api_404(message: Message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] == 404:
                replaced = True
                await v1_error(404, "Not found.")(scope, receive, send)
            elif not replaced:  # after a replaced start, the mounted app's own 404 body is dropped
                await send(message)

        await self.app(scope, receive, send_api_404)


async def _abort_on_disconnect(request: Request, abort: Callable[[], None]) -> None:
    while True:
        await asyncio.sleep(0.25)
        if await request.is_disconnected():
            abort()
            return
