"""The one chat handler behind the three chat routes (§1.1): admission, body cap, the shared parser, Pangu
narrowing, moderation, the service with its timeout, then the route family's response or stream writer.

The routes differ only in credentials (auth.py), Pangu narrowing (pangu.py), error bodies (error_bodies.py) and
wire writers (wire.py for /v1, pangu_wire.py for the Pangu routes); everything else is this one path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine.config import Settings
from engine.http.auth import client_key
from engine.http.pangu_wire import PanguStreamWriter, pangu_response_json
from engine.http.sse import EventWriter, V1Events
from engine.http.wire import V1StreamWriter, response_json
from engine.protocol import pangu
from engine.protocol.errors import (
    ApiError,
    IncompleteGenerationError,
    PayloadTooLargeError,
    RequestValidationError,
    ServiceUnavailableError,
)
from engine.protocol.request import ChatCompletionRequest, ModerationConfig, Route, parse_chat_request
from engine.protocol.response import ChatCompletionChunk, PromptTokensDetails, Usage
from engine.serving.admission import Admission, Flight
from engine.serving.fold import fold
from engine.serving.generation import Generation
from engine.serving.metrics import Metrics
from engine.serving.moderation import CONTENT_FILTER, Moderator, QuestionBlocked
from engine.serving.service import ChatService

log = logging.getLogger(__name__)
PANGU_V1_PATH = "/v1/{project_id}/deployments/{deployment_id}/chat/completions"
CHAT_PATHS: dict[Route, str] = {"v1": "/v1/chat/completions", "pangu_v2": "/api/v2/chat/completions",
                                "pangu_v1": PANGU_V1_PATH}  # fmt: skip


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
    if _SURROGATE_ESCAPE.search(body):  # "\ud800" is valid JSON but no text: tokenizers and encoders choke on it
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise RequestValidationError("Request body contains an unpaired UTF-16 surrogate escape.") from None
    return value


class ChatRoutes:
    """The one chat handler behind the three routes."""

    def __init__(self, settings: Settings, service: Callable[[], ChatService], admission: Admission,
                 metrics: Metrics, hook: Any, body_limit: int) -> None:  # fmt: skip
        self.settings = settings
        self.service = service
        self.admission = admission
        self.metrics = metrics
        self.hook = hook
        self.body_limit = body_limit

    async def handle(self, request: Request, route: Route, credential: str | None) -> Response:
        client = request.client.host if request.client else None
        flight = self.admission.enter(client_key(credential, client))
        try:
            response = await self._respond(request, route, flight)
        except BaseException:
            flight.close()
            raise
        if not isinstance(response, _Stream):
            flight.close()  # a stream closes its flight when its last byte is sent
        return response

    async def _respond(self, request: Request, route: Route, flight: Flight) -> Response:
        settings = self.settings
        svc = self.service()
        raw = decode_json(await read_body(request, self.body_limit))
        req = parse_chat_request(raw, route)
        if route != "v1":
            pangu.narrow(req, raw, strict=settings.pangu_strict_limits, context_length=svc.model.context_length)
        access = request.state.access = self._access_info(req, route)
        headers: dict[str, str] = {}
        if req.enable_search is not None:
            headers["X-Playground-Ignored"] = "enable_search"  # §2.6: validated, never acted on
        moderator = Moderator(self.hook, req.moderation_config or ModerationConfig()) if self.hook else None
        started = time.monotonic()
        chunks, gen = await self._start(svc, req, route, moderator, access)
        headers["X-Request-Id"] = access["id"]
        if gen is not None:
            flight.attach(gen)
        timer = self._deadline(gen, started)
        observed = _record(self.metrics.observe(chunks, CHAT_PATHS[route]), access)
        if not req.stream:
            watcher = asyncio.create_task(_abort_on_disconnect(request, gen.abort)) if gen is not None else None
            try:
                resp = await fold(observed)
            finally:
                for pending in (watcher, timer):
                    if pending is not None:
                        pending.cancel()
            body = response_json(resp, settings.perf_stats) if route == "v1" else pangu_response_json(resp)
            if moderator is not None:
                for i, (verdict, _) in moderator.blocked.items():
                    body["choices"][i]["message"]["content"] = verdict.reply
                    body["choices"][i]["finish_reason"] = CONTENT_FILTER
                    body["choices"][i]["stop_reason"] = None
                result = moderator.result()
                if result is not None:
                    body["moderation_result"] = result
            return JSONResponse(body, headers=headers)
        writer = self._writer(route, req, gen)

        def release() -> None:
            if gen is not None:
                gen.abort()  # client gone or stream done: free the engine's slot at its next step
            if timer is not None:
                timer.cancel()
            flight.close()

        async def events() -> AsyncIterator[bytes]:
            try:
                async for chunk in observed:
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
                release()
            for event in writer.end():
                yield event

        headers["Cache-Control"] = "no-cache"
        return _Stream(events(), release, media_type="text/event-stream; charset=utf-8", headers=headers)

    async def _start(self, svc: ChatService, req: ChatCompletionRequest, route: Route, moderator: Moderator | None,
                     access: dict[str, Any]) -> tuple[AsyncIterator[ChatCompletionChunk], Generation | None]:  # fmt: skip
        """The chunk stream and its Generation (None when the moderation hook blocked the question: such a
        request never reaches the engine)."""
        if moderator is not None:
            verdict = await moderator.check_question(req.messages)
            if verdict.blocked:
                model, prompt = await svc.count_prompt_tokens(req, route)
                return _blocked(moderator, req, route, QuestionBlocked(verdict, model, prompt), access), None
        timeout = self.settings.request_timeout_s or None
        try:
            gen = await asyncio.wait_for(svc.start(req, route, moderator.screen if moderator else None), timeout)
        except asyncio.TimeoutError:
            raise ServiceUnavailableError(f"The request timed out after {timeout} s waiting for the engine.") from None
        except QuestionBlocked as blocked:  # its transcripts were (§2.4.1)
            assert moderator is not None
            return _blocked(moderator, req, route, blocked, access), None
        access["id"] = gen.id
        if moderator is None:
            return gen.__aiter__(), gen
        chunks = moderator.answers(gen, gen.stats.prompt_tokens, gen.stats.cached_tokens, req.effective_n, gen.abort)
        return chunks, gen

    def _deadline(self, gen: Any, started: float) -> asyncio.TimerHandle | None:
        """Past `request_timeout_s` a running request is shed: its choices close with insufficient_system_resource."""
        timeout = self.settings.request_timeout_s
        if not timeout or gen is None:
            return None
        return asyncio.get_running_loop().call_later(max(0.0, timeout - (time.monotonic() - started)), gen.shed)

    def _writer(self, route: Route, req: ChatCompletionRequest, gen: Any) -> EventWriter:
        prompt_tokens = gen.stats.prompt_tokens if gen is not None else 0
        if route == "v1":
            opts = req.stream_options
            return V1Events(V1StreamWriter(
                perf_stats=self.settings.perf_stats,
                full_text=self.settings.full_text_enabled,
                include_usage=bool(opts and opts.include_usage),
                continuous_usage=bool(opts and opts.continuous_usage_stats),
                prompt_tokens=prompt_tokens,
            ))  # fmt: skip
        return PanguStreamWriter(route, prompt_tokens, usage_event=self.settings.pangu_v1_usage_event)

    def _access_info(self, req: ChatCompletionRequest, route: Route) -> dict[str, Any]:
        """What the access log line adds for a chat request; message text only with --log-message-content."""
        info: dict[str, Any] = {"family": route, "stream": req.stream, "messages": len(req.messages),
                                "n": req.effective_n}  # fmt: skip
        if self.settings.log_message_content:
            info["content"] = [{"role": m.role, "text": m.text} for m in req.messages]
        return info


def _blocked(moderator: Moderator, req: ChatCompletionRequest, route: Route, blocked: QuestionBlocked,
             access: dict[str, Any]) -> AsyncIterator[ChatCompletionChunk]:  # fmt: skip
    """The stream of a request whose question the hook blocked: the fallback reply, and usage for the prompt."""
    prefix = "chatcmpl-" if route == "v1" else "chat-"
    head = ChatCompletionChunk(id=prefix + uuid.uuid4().hex, created=int(time.time()), model=blocked.model, choices=[])
    access["id"] = head.id
    prompt = blocked.prompt_tokens
    usage = Usage(prompt_tokens=prompt, total_tokens=prompt, prompt_tokens_details=PromptTokensDetails())
    return moderator.blocked_question(head, req.effective_n, usage, blocked.verdict)


async def _record(chunks: AsyncIterator[ChatCompletionChunk], access: dict[str, Any]) -> AsyncIterator[Any]:
    """Pass chunks through, noting for the access log how the request ended (never what it said)."""
    finishes = access["finish_reasons"] = []
    async for chunk in chunks:
        finishes.extend(c.finish_reason for c in chunk.choices if c.finish_reason)
        if not chunk.choices and chunk.usage is not None:
            access["prompt_tokens"] = chunk.usage.prompt_tokens
            access["completion_tokens"] = chunk.usage.completion_tokens
        yield chunk


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


async def _abort_on_disconnect(request: Request, abort: Callable[[], None]) -> None:
    while True:
        await asyncio.sleep(0.25)
        if await request.is_disconnected():
            abort()
            return
