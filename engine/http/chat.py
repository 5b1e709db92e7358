"""The one chat handler behind the three chat routes (§1.1): body cap, the shared parser, Pangu narrowing, then
`RequestPolicy.run` (admission, timeout, moderation, metrics: the same policy the page and the notebooks get), then
the route family's response or stream writer.

The routes differ only in credentials (auth.py), Pangu narrowing (pangu.py), error bodies (error_bodies.py) and
wire writers (wire.py for /v1, pangu_wire.py for the Pangu routes); everything else is this one path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine.config import HttpSettings
from engine.http.auth import cache_scope, client_key
from engine.http.pangu_wire import PanguStreamWriter, pangu_response_json
from engine.http.sse import EventWriter, V1Events
from engine.http.wire import V1StreamWriter, response_json
from engine.protocol import pangu
from engine.protocol.errors import ApiError, IncompleteGenerationError, PayloadTooLargeError, RequestValidationError
from engine.protocol.request import ChatCompletionRequest, Route, parse_chat_request
from engine.serving.fold import fold
from engine.serving.policy import CallContext, PolicedRun, RequestPolicy
from engine.serving.rights import is_admin

log = logging.getLogger(__name__)
PANGU_V1_PATH = "/v1/{project_id}/deployments/{deployment_id}/chat/completions"
CHAT_PATHS: dict[Route, str] = {
    "v1": "/v1/chat/completions",
    "pangu_v2": "/api/v2/chat/completions",
    "pangu_v1": PANGU_V1_PATH,
}


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


_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")


def decode_json(body: bytes) -> Any:
    try:
        value = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise RequestValidationError("Request body is not valid UTF-8.") from None
    except json.JSONDecodeError as exc:
        raise RequestValidationError(f"Request body is not valid JSON: {exc.msg} at position {exc.pos}.") from None
    except RecursionError:  # a body nested thousands of levels deep
        raise RequestValidationError("Request body is nested too deeply.") from None
    except ValueError:  # an integer of more digits than Python converts (sys.get_int_max_str_digits, 4300)
        raise RequestValidationError("Request body holds a number too long to read.") from None
    if _SURROGATE_ESCAPE.search(body):  # "\ud800" is valid JSON but no text: tokenizers and encoders choke on it
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise RequestValidationError("Request body contains an unpaired UTF-16 surrogate escape.") from None
    return value


class ChatRoutes:
    """The one chat handler behind the three routes: body, Pangu narrowing, then the policy, then the wire."""

    def __init__(self, settings: HttpSettings, policy: RequestPolicy, body_limit: int) -> None:
        self.settings = settings
        self.policy = policy
        self.body_limit = body_limit

    async def handle(self, request: Request, route: Route, credential: str | None) -> Response:
        host = request.client.host if request.client else None
        ctx = CallContext(
            client_key(credential, host),
            CHAT_PATHS[route],
            route,
            "api",
            may_load=is_admin(credential, self.settings),
            cache_scope=cache_scope(credential, self.settings),
        )
        raw = decode_json(await read_body(request, self.body_limit))
        req = parse_chat_request(raw, route)
        if route != "v1":
            context_length = self.policy.service().model.context_length
            pangu.narrow(req, raw, strict=self.settings.pangu_strict_limits, context_length=context_length)
        headers: dict[str, str] = {}
        if req.enable_search is not None:
            headers["X-Playground-Ignored"] = "enable_search"  # §2.6: validated, never acted on
        access = request.state.access = {}
        run = await _unless_disconnected(request, self.policy.run(req, ctx, access))
        if run is None:  # the client left while its request was prepared, queued or prefilled: it was aborted
            return Response(status_code=499)
        headers["X-Request-Id"] = access["id"]
        if not req.stream:
            resp = await fold_unless_disconnected(request, run)
            body = response_json(resp, self.settings.perf_stats) if route == "v1" else pangu_response_json(resp)
            return JSONResponse(body, headers=headers)
        writer = self._writer(route, req, run.prompt_tokens)

        async def events() -> AsyncIterator[bytes]:
            try:
                async for chunk in run:
                    for event in writer.events(chunk):
                        yield event
            except ApiError as exc:
                for event in writer.error(exc):
                    yield event
            except Exception:  # §6.4: a fatal error after the status line is one error event, then the end
                log.exception("stream failed")
                for event in writer.error(IncompleteGenerationError("Generation failed.")):
                    yield event
            finally:
                run.close()
            for event in writer.end():
                yield event

        headers["Cache-Control"] = "no-cache"
        return _Stream(events(), run.close, media_type="text/event-stream; charset=utf-8", headers=headers)

    def _writer(self, route: Route, req: ChatCompletionRequest, prompt_tokens: int) -> EventWriter:
        if route == "v1":
            opts = req.stream_options
            return V1Events(
                V1StreamWriter(
                    perf_stats=self.settings.perf_stats,
                    full_text=self.settings.full_text_enabled,
                    include_usage=bool(opts and opts.include_usage),
                    continuous_usage=bool(opts and opts.continuous_usage_stats),
                    prompt_tokens=prompt_tokens,
                )
            )
        return PanguStreamWriter(route, prompt_tokens, usage_event=self.settings.pangu_v1_usage_event)


class _Stream(StreamingResponse):
    """A stream that releases its request even when its body never starts (the client left before the status
    line went out): the engine slot, the timeout timer and the client's flight. `release` is idempotent."""

    def __init__(self, content: AsyncIterator[bytes], release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


async def fold_unless_disconnected(request: Request, run: Any) -> Any:
    """A non-streaming answer: the fold of the run's stream, aborted if the client leaves while it is made; the
    run is released either way (`run`: anything with `abort` and `close` that streams chunks)."""
    watcher = asyncio.create_task(_abort_on_disconnect(request, run.abort))
    try:
        return await fold(run)
    finally:
        watcher.cancel()
        run.close()


async def _abort_on_disconnect(request: Request, abort: Callable[[], None]) -> None:
    while True:
        await asyncio.sleep(0.25)
        if await request.is_disconnected():
            abort()
            return


async def _unless_disconnected(request: Request, starting: Awaitable[PolicedRun]) -> PolicedRun | None:
    """Await `starting` (the policy admitting, preparing and starting a request, up to its first token) unless the
    client disconnects first: then it is cancelled, which aborts the engine's request wherever it is (queued,
    prefilling; service.start), so its pages are freed at the engine's next step, and None is returned. vLLM
    aborts on disconnect at any stage; without this a request whose client left kept its place and its KV until
    it produced a first token (issue 31: 72-120 s)."""
    task = asyncio.ensure_future(starting)
    gone = asyncio.ensure_future(_abort_on_disconnect(request, lambda: None))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        gone.cancel()
    if task.done():
        return task.result()  # the request's own error (ApiError) is raised as ever
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    except Exception:  # it failed as it was being cancelled: the client is gone all the same
        log.debug("request failed while it was being cancelled", exc_info=True)
    else:  # it started in the same instant: release it (its engine request is aborted)
        task.result().close()
    return None
