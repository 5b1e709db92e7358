"""One request policy for every entry point: the API's routes, the page and its Gradio endpoints, the notebooks.

`RequestPolicy.run(request, context)` is the only way a chat request reaches the service. It admits or refuses
(the per-client limit and draining, admission.py; the engine refuses past `--max-queue`), starts the generation
under `--request-timeout-s`, applies the moderation hook to the question and to the stream itself (so a
non-stream answer is still the fold of the moderated stream), feeds the Prometheus metrics and writes the access
line. Callers keep only what is theirs: HTTP reads bodies, authenticates and writes the wire format; the page
renders chunks. The `CallContext` says who is asking, so a page user, a Gradio-API script and an API client on
the same address (or with the same credential) count against one limit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.config import ServingSettings
from engine.protocol.completions import CompletionRequest
from engine.protocol.errors import ApiError, ServiceUnavailableError
from engine.protocol.request import ChatCompletionRequest, ModerationConfig, Route
from engine.protocol.response import ChatCompletionChunk, PromptTokensDetails, Usage
from engine.serving.admission import Admission, Flight
from engine.serving.generation import Generation
from engine.serving.metrics import Metrics
from engine.serving.model_pool import ModelPool
from engine.serving.moderation import ModerationHook, Moderator, QuestionBlocked, load_hook
from engine.serving.service import ChatService

access_log = logging.getLogger("playground.access")
Entry = Literal["api", "page", "notebook", "mcp"]


@dataclass(frozen=True)
class CallContext:
    """Who is asking and through what: the same fields whichever front end builds it."""

    client: str  # what --max-concurrent-per-client counts: "key:<hash>" (a verified credential), "ip:<address>"
    label: str  # the metrics' route label: an API path template, "page:/chat", "notebook"
    route: Route = "v1"  # the protocol family the answer is shaped for (ids, Pangu narrowing)
    entry: Entry = "api"
    started: float = field(default_factory=time.monotonic)  # acceptance: the request timeout counts from here
    # Rights default to the least: whether a request for a model not loaded may load it (an admin, or a server
    # with no credentials and no admin keys). Every entry point says so for its caller.
    may_load: bool = False
    cache_scope: str = ""  # whose cached prompt prefixes it may reuse ("" = the shared scope); from the credential


class RequestPolicy:
    """The policy of one deployment: one admission, one metrics registry and one moderation hook, shared by every
    front end that serves it. `get_service` returns None while the model loads (requests then get 503); with
    several models (`models`, engine/serving/model_pool.py) it is the current one, and a request goes to the
    service of the model it names."""

    def __init__(
        self,
        settings: ServingSettings,
        get_service: Callable[[], ChatService | None],
        hook: ModerationHook | None = None,
        models: ModelPool | None = None,
    ) -> None:
        self.settings = settings
        self.get_service = get_service
        self.models = models
        self.admission = Admission(settings.max_concurrent_per_client)
        self.metrics = Metrics(get_service, self.admission)
        self.hook = hook if hook is not None else load_hook(settings.moderation_hook)

    def service(self) -> ChatService:
        svc = self.get_service()
        if svc is None:
            raise ServiceUnavailableError("The model is loading.")
        return svc

    def loaded_service(self, model: str | None) -> ChatService:
        """The service of the loaded model `model` names, for the routes that never load one (/tokenize,
        /detokenize); None or a name no model has: the current service (whose model check says "Model not found");
        a model of the pool that is not loaded: 503."""
        if self.models is not None and model:
            owner = self.models.owner_of(model)
            svc = self.models.get(owner) if owner is not None else None
            if svc is not None:
                return svc
            if model in self.models.candidates:
                raise ServiceUnavailableError(f"Model {model[:64]!r} is not loaded.")
        return self.service()

    def service_for(self, req: ChatCompletionRequest | CompletionRequest, ctx: CallContext) -> ChatService:
        """The service of the model `req` names (Pangu V1 names none: the current one). A model that can be loaded
        but is not raises 503 (and starts loading when `ctx.may_load`); an unknown name gets the current service,
        whose model check answers "Model not found"."""
        if self.models is not None and ctx.route != "pangu_v1":
            svc = self.models.service_for(str(req.model), ctx.may_load)
            if svc is not None:
                return svc
        return self.service()

    async def run(
        self, req: ChatCompletionRequest, ctx: CallContext, access: dict[str, Any] | None = None
    ) -> PolicedRun:
        """Admit, start and wrap one request; raises the API's error when it is refused before it starts.
        `access`: the dict the caller's own access line will carry (HTTP); None: the policy writes the line."""
        own_line = access is None
        access = self._access_info(req, ctx, {} if access is None else access)
        try:
            flight = self.admission.enter(ctx.client)
        except ApiError as exc:
            self._finish(ctx, access, exc.status, own_line)
            raise
        try:
            chunks, gen = await self._start(self.service_for(req, ctx), req, ctx, access)
        except BaseException as exc:
            flight.close()
            status = (
                exc.status if isinstance(exc, ApiError) else 499 if isinstance(exc, asyncio.CancelledError) else 500
            )
            self._finish(ctx, access, status, own_line)
            raise
        if gen is not None:
            flight.attach(gen)
        timer = self._deadline(gen, ctx.started)
        observed = _record(self.metrics.observe(chunks, ctx.label), access)
        return PolicedRun(observed, gen, flight, timer, lambda status: self._finish(ctx, access, status, own_line))

    async def _start(
        self, svc: ChatService, req: ChatCompletionRequest, ctx: CallContext, access: dict[str, Any]
    ) -> tuple[AsyncIterator[ChatCompletionChunk], Generation | None]:
        """The chunk stream and its Generation (None when the moderation hook blocked the question: such a
        request never reaches the engine)."""
        moderator = Moderator(self.hook, req.moderation_config or ModerationConfig()) if self.hook else None
        if moderator is not None:
            verdict = await moderator.check_question(req.messages)
            if verdict.blocked:
                model, prompt = await svc.count_prompt_tokens(req, ctx.route)
                return _blocked(moderator, req, ctx.route, QuestionBlocked(verdict, model, prompt), access), None
        timeout = self.settings.request_timeout_s or None
        try:
            screen = moderator.screen if moderator else None
            gen = await asyncio.wait_for(svc.start(req, ctx.route, screen, ctx.cache_scope), timeout)
        except asyncio.TimeoutError:
            raise ServiceUnavailableError(f"The request timed out after {timeout} s waiting for the engine.") from None
        except QuestionBlocked as blocked:  # its transcripts were (§2.4.1)
            assert moderator is not None
            return _blocked(moderator, req, ctx.route, blocked, access), None
        access["id"] = gen.id
        if moderator is None:
            return gen.__aiter__(), gen
        chunks = moderator.answers(gen, gen.stats.prompt_tokens, gen.stats.cached_tokens, req.effective_n, gen.abort)
        return chunks, gen

    def _deadline(self, gen: Generation | None, started: float) -> asyncio.TimerHandle | None:
        """Past `request_timeout_s` a running request is shed: its choices close with insufficient_system_resource."""
        timeout = self.settings.request_timeout_s
        if not timeout or gen is None:
            return None
        return asyncio.get_running_loop().call_later(max(0.0, timeout - (time.monotonic() - started)), gen.shed)

    def _access_info(self, req: ChatCompletionRequest, ctx: CallContext, info: dict[str, Any]) -> dict[str, Any]:
        """What the access line says of a chat request; message text only with --log-message-content."""
        info.update({"family": ctx.route, "stream": req.stream, "messages": len(req.messages), "n": req.effective_n})
        if self.settings.log_message_content:
            info["content"] = [{"role": m.role, "text": m.text} for m in req.messages]
        return info

    def _finish(self, ctx: CallContext, access: dict[str, Any], status: int, own_line: bool) -> None:
        """Count the request and, for a front end without an HTTP access line of its own, write one."""
        self.metrics.chat_requests.labels(ctx.label, ctx.entry, str(status)).inc()
        if not own_line or not access_log.isEnabledFor(logging.INFO):
            return
        record = {
            "request_id": access.get("id"),
            "entry": ctx.entry,
            "route": ctx.label,
            "status": status,
            "ms": round((time.monotonic() - ctx.started) * 1000, 1),
            "client": ctx.client,
            **access,
        }
        record.pop("id", None)
        access_log.info(json.dumps(record, separators=(",", ":"), default=str))


class PolicedRun:
    """One admitted request: an async iterator of its (moderated, counted) chunks. `close()` releases it (the
    engine slot, the timeout, the client's flight) and is idempotent; iterating to the end, or leaving the
    iteration early, closes it too."""

    def __init__(
        self,
        chunks: AsyncIterator[ChatCompletionChunk],
        gen: Generation | None,
        flight: Flight,
        timer: asyncio.TimerHandle | None,
        finish: Callable[[int], None],
    ) -> None:
        self._chunks = chunks
        self.gen = gen
        self._flight = flight
        self._timer = timer
        self._finish = finish
        self._status = 200
        self._closed = False

    @property
    def prompt_tokens(self) -> int:
        return self.gen.stats.prompt_tokens if self.gen is not None else 0

    def abort(self) -> None:
        if self.gen is not None:
            self.gen.abort()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.abort()  # client gone or stream done: free the engine's slot at its next step
        if self._timer is not None:
            self._timer.cancel()
        self._flight.close()
        self._finish(self._status)

    async def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        try:
            async for chunk in self._chunks:
                yield chunk
        except ApiError as exc:
            self._status = exc.status
            raise
        except (asyncio.CancelledError, GeneratorExit):
            self._status = 499  # the caller left (a closed page, a disconnected client, Stop)
            raise
        except BaseException:
            self._status = 500
            raise
        finally:
            self.close()


def _blocked(
    moderator: Moderator, req: ChatCompletionRequest, route: Route, blocked: QuestionBlocked, access: dict[str, Any]
) -> AsyncIterator[ChatCompletionChunk]:
    """The stream of a request whose question the hook blocked: the fallback reply, and usage for the prompt."""
    prefix = "chatcmpl-" if route == "v1" else "chat-"
    head = ChatCompletionChunk(id=prefix + uuid.uuid4().hex, created=int(time.time()), model=blocked.model, choices=[])
    access["id"] = head.id
    prompt = blocked.prompt_tokens
    usage = Usage(prompt_tokens=prompt, total_tokens=prompt, prompt_tokens_details=PromptTokensDetails())
    return moderator.blocked_question(head, req.effective_n, usage, blocked.verdict)


async def _record(chunks: AsyncIterator[ChatCompletionChunk], access: dict[str, Any]) -> AsyncIterator[Any]:
    """Pass chunks through, noting for the access line how the request ended (never what it said)."""
    finishes = access["finish_reasons"] = []
    async for chunk in chunks:
        finishes.extend(c.finish_reason for c in chunk.choices if c.finish_reason)
        if not chunk.choices and chunk.usage is not None:
            access["prompt_tokens"] = chunk.usage.prompt_tokens
            access["completion_tokens"] = chunk.usage.completion_tokens
        yield chunk
