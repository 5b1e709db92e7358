"""The ChatBackend seam: the embedded engine through the deployment's RequestPolicy, or any OpenAI-compatible server
by URL (MindIE, vLLM, vLLM-Ascend, or another instance of this app; playground/client/remote.py). The Gradio page (its
Backend tab picks one per browser session) and the notebooks both drive it.

Both take the validated `ChatCompletionRequest` the API itself parses and yield the same `ChatCompletionChunk`
objects, which playground/client/reply.py folds once for everything above (chat, stats, widgets, sweeps, latency).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Coroutine
from typing import Any, Protocol, TypeVar

from engine.protocol.request import ChatCompletionRequest, parse_chat_request
from engine.protocol.response import ChatCompletionChunk
from engine.serving.policy import CallContext, RequestPolicy
from playground.client import branch as branches
from playground.client.result import ChatResult

T = TypeVar("T")
Messages = str | list[dict[str, Any]]


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, also inside Jupyter, whose own loop is already running there:
    then it runs on a fresh loop in a worker thread (the engine answers through whichever loop submitted)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def as_messages(messages: Messages) -> list[dict[str, Any]]:
    return [{"role": "user", "content": messages}] if isinstance(messages, str) else list(messages)


class Running(Protocol):
    """One request in flight: iterate its chunks; `abort()` it from another task (Stop); `close()` lets go of it
    (the engine slot, the client's admission, the HTTP stream), finished or not, and may be called twice."""

    def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]: ...

    def abort(self) -> None: ...

    def close(self) -> None: ...


class ChatBackend(ABC):
    kind = "embedded"  # or "remote": its stream carries arrival times, not the engine's timeline
    model: str
    url: str | None = None  # the server a copied request (curl, Python) goes to; None: the page's own

    def request(self, messages: Messages, **params: Any) -> ChatCompletionRequest:
        """The streaming request body the API would parse, validated by the API's own parser (None = absent)."""
        body = {
            "model": self.model,
            "messages": as_messages(messages),
            **params,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        return parse_chat_request(body)

    @abstractmethod
    async def start(self, req: ChatCompletionRequest, ctx: CallContext | None = None) -> Running:
        """The running request. A refusal before it starts (the API's validation and admission, a remote 4xx)
        raises ApiError here, before any chunk. `ctx`: who asks, for the embedded policy's per-client limit,
        metrics and access line (None: a notebook); a remote server applies its own."""

    async def stream(
        self, req: ChatCompletionRequest, ctx: CallContext | None = None
    ) -> AsyncIterator[ChatCompletionChunk]:
        """Chunks of one request; leaving the iteration early aborts the request."""
        run = await self.start(req, ctx)
        try:
            async for chunk in run:
                yield chunk
        finally:
            run.close()  # a consumer that stops early frees the engine slot now, not at garbage collection

    async def tokenize(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """POST /tokenize's answer to `body` (its chat or prompt form, engine/protocol/tokenize.py) from this
        backend; None when it has no /tokenize."""
        return None

    def label(self) -> str:
        """What the page's header says is answering."""
        return "backend: embedded engine"

    async def achat(self, messages: Messages, ctx: CallContext | None = None, **params: Any) -> ChatResult:
        """One request, folded: reply, reasoning, logprobs and stats. Validation and server errors raise ApiError.
        `ctx`: who asks (the page's grid passes its caller; None: a notebook)."""
        req = self.request(messages, **params)
        result = ChatResult.of(self)
        result.request = req.model_dump(mode="json", by_alias=True, exclude_unset=True)
        async for chunk in self.stream(req, ctx):
            result.add(chunk)
        return result

    def chat(self, messages: Messages, **params: Any) -> ChatResult:
        return run_sync(self.achat(messages, **params))

    async def start_completion(
        self, prompt: Any, ctx: CallContext | None = None, **params: Any
    ) -> tuple[Running, dict[str, Any]]:
        """A legacy completion running (/v1/completions' fields, docs/completions.md), and its body."""
        raise NotImplementedError(f"{type(self).__name__} has no text completion; use the embedded engine")

    async def acomplete(self, prompt: Any, ctx: CallContext | None = None, **params: Any) -> ChatResult:
        """A text completion of `prompt` (a text, texts, token ids; no chat template), folded into the same
        result object as a chat: `text`, logprobs, statistics, and `prompt_logprobs` when asked for."""
        if params.get("echo"):
            raise ValueError("complete() returns the continuation; the prompt is yours already (no echo)")
        run, body = await self.start_completion(prompt, ctx, **params)
        result = ChatResult.of(self)
        result.request = body
        try:
            async for chunk in run:
                result.add(chunk)
        finally:
            run.close()
        return result

    def complete(self, prompt: Any, **params: Any) -> ChatResult:
        return run_sync(self.acomplete(prompt, **params))

    async def abranch(self, result: ChatResult, pos: int, alt: int = 0, choice: int = 0) -> ChatResult:
        """The reply of `result` continued from its token `pos` with that token's alternative `alt` (0: the most
        likely) instead, with the same settings: the page's branch (playground/client/branch.py). Needs a result asked
        with logprobs and top_logprobs; what cannot be branched raises ValueError with the page's reason."""
        made = branches.plan(result.request, result.view, choice, pos, alt)
        if isinstance(made, str):
            raise ValueError(made)
        out = ChatResult(made.reply, request=made.body)
        async for chunk in self.stream(parse_chat_request(made.body)):
            out.add(chunk)
        return out

    def branch(self, result: ChatResult, pos: int, alt: int = 0, choice: int = 0) -> ChatResult:
        return run_sync(self.abranch(result, pos, alt, choice))

    async def aquality(self, result: ChatResult, reference: str | None = None, ctx: CallContext | None = None) -> Any:
        """The quality meter of a chat result (engine/serving/quality.py): its reply teacher-forced through
        `reference` (default: the model's full-precision `@fp32` entry, loaded on first use); a Quality with per
        token `kl` and `differs`, `agreement`, `mean_kl` and `summary()`. Embedded engine only."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot read a remote server's logits; use the embedded engine"
        )

    def quality(self, result: ChatResult, reference: str | None = None) -> Any:
        return run_sync(self.aquality(result, reference))


class LocalBackend(ChatBackend):
    """The in-process ChatService (the same object the API routes call), through a request policy as the API's
    requests are: the deployment's limits, timeout, moderation hook, metrics and access log. The page passes the
    server's own policy (so it never calls the service directly); a notebook gets one over its service's settings,
    or shares a server's (`app.serve_in_thread(..., policy=...)`)."""

    CALLER = "notebook"  # the per-client key, metrics route label and access-line entry of a notebook's calls

    def __init__(self, service: Any = None, policy: RequestPolicy | None = None) -> None:
        if policy is None:
            if service is None:
                raise ValueError("LocalBackend needs a ChatService or a RequestPolicy")
            policy = RequestPolicy(service.settings, lambda: service)
        self.policy = policy

    @property
    def service(self) -> Any:
        """The ChatService, or None while the model loads."""
        return self.policy.get_service()

    @property
    def model(self) -> str:  # type: ignore[override]
        service = self.service
        return service.served_name if service is not None else ""

    async def start(self, req: ChatCompletionRequest, ctx: CallContext | None = None) -> Running:
        # A notebook holds the engine in its own process: its operator may load the models its pool offers.
        return await self.policy.run(req, ctx or CallContext(self.CALLER, self.CALLER, "v1", "notebook", may_load=True))

    async def start_completion(
        self, prompt: Any, ctx: CallContext | None = None, **params: Any
    ) -> tuple[Running, dict[str, Any]]:
        """The route's own path (engine/http/completions.py does the same): each prompt through the policy."""
        from engine.protocol.completions import parse_completion_request
        from engine.serving.completions import CompletionStream, prompts_for

        body = completion_body(self.model, prompt, params)
        creq = parse_completion_request(body)
        ctx = ctx or CallContext(self.CALLER, self.CALLER, "v1", "notebook", may_load=True)
        prompts = await asyncio.to_thread(prompts_for, creq, self.policy.service_for(creq, ctx))
        first = await self.policy.run(prompts[0].request, ctx)
        return CompletionStream(self.policy, ctx, prompts, creq.n, first, None), body

    async def aquality(self, result: ChatResult, reference: str | None = None, ctx: CallContext | None = None) -> Any:
        from engine.serving.quality import measure_request

        ctx = ctx or CallContext(self.CALLER, self.CALLER, "v1", "notebook", may_load=True)
        report = await measure_request(self.policy, ctx, result.request or {}, result.token_ids, reference)
        result.view.quality = report.as_json()  # the page's and widgets' view of the result carries it too
        return report

    async def tokenize(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The same code POST /tokenize runs (engine/serving/tokenize.py), on the loaded service."""
        from engine.protocol.tokenize import parse_tokenize_request
        from engine.serving.tokenize import tokenize

        return await tokenize(self.policy.service(), parse_tokenize_request(body))

    def __repr__(self) -> str:
        return f"LocalBackend(model={self.model!r})"


class ModelBackend(LocalBackend):
    """The embedded engine, this session's requests sent for one model: a model of the server's pool or a loaded
    model's LoRA adapter (`model` = its id, so the policy routes each request to that model's engine). The page's
    model picker gives each browser session its own (playground/page/header_models.py)."""

    def __init__(self, policy: RequestPolicy, name: str) -> None:
        super().__init__(policy=policy)
        self.name = name

    @property
    def service(self) -> Any:
        """The service that answers for `name`; None while it is not loaded."""
        pool = self.policy.models
        if pool is None:  # one model: `name` is it or one of its adapters
            return self.policy.get_service()
        owner = pool.owner_of(self.name)
        return pool.get(owner) if owner is not None else None

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.name

    async def tokenize(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """POST /tokenize's work on this model (503 while it is not loaded), as the route picks it."""
        from engine.protocol.tokenize import parse_tokenize_request
        from engine.serving.tokenize import tokenize

        return await tokenize(self.policy.loaded_service(self.name), parse_tokenize_request(body))

    def __repr__(self) -> str:
        return f"ModelBackend(model={self.name!r})"


def completion_body(model: str, prompt: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The /v1/completions body a backend's `complete` sends: the fields given (None left out), streamed with
    usage, so the result folds like a chat reply's."""
    given = {k: v for k, v in params.items() if v is not None}
    return {"model": model, "prompt": prompt, **given, "stream": True, "stream_options": {"include_usage": True}}
