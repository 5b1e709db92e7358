"""The ChatBackend seam: the embedded engine's ChatService, or any OpenAI-compatible server by URL (MindIE, vLLM,
vLLM-Ascend, or another instance of this app). The Gradio page and the notebooks both drive it.

Both take the validated `ChatCompletionRequest` the API itself parses and yield the same `ChatCompletionChunk`
objects, so everything above (chat, widgets, sweeps, latency) is written once. A remote stream carries no engine
timeline, so the remote backend stamps each chunk with the time it arrived here (ms since the request was sent):
its TTFT and tokens/s include the network, which is what a client of that server sees.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from engine.protocol.errors import ApiError
from engine.protocol.request import ChatCompletionRequest, parse_chat_request
from engine.protocol.response import ChatCompletionChunk, TokenTimeline
from engine.serving.policy import CallContext, RequestPolicy

if TYPE_CHECKING:
    from playground.notebooks.result import ChatResult

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


class RemoteError(ApiError):
    """An error answer from a remote server, with its HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ChatBackend(ABC):
    model: str

    def request(self, messages: Messages, **params: Any) -> ChatCompletionRequest:
        """The streaming request body the API would parse, validated by the API's own parser (None = absent)."""
        body = {"model": self.model, "messages": as_messages(messages), **params, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        return parse_chat_request(body)

    @abstractmethod
    def stream(self, req: ChatCompletionRequest) -> AsyncIterator[ChatCompletionChunk]:
        """Chunks of one request; leaving the iteration early aborts the request."""

    async def achat(self, messages: Messages, **params: Any) -> ChatResult:
        """One request, folded: reply, reasoning, logprobs and stats. Validation and server errors raise ApiError."""
        from playground.notebooks.result import ChatResult  # the notebooks' reader of the fold

        req = self.request(messages, **params)
        result = ChatResult()
        async for chunk in self.stream(req):
            result.add(chunk)
        return result

    def chat(self, messages: Messages, **params: Any) -> ChatResult:
        return run_sync(self.achat(messages, **params))


class LocalBackend(ChatBackend):
    """The in-process ChatService (the same object the API routes and the Gradio page call), through a request
    policy as the API's requests are: the service's own settings' limits, timeout, moderation hook and metrics.
    Pass `policy` to share one with a server of the same kernel (`app.serve_in_thread(..., policy=...)`)."""

    CALLER = "notebook"  # the per-client key, metrics route label and access-line entry of a notebook's calls

    def __init__(self, service: Any, policy: RequestPolicy | None = None) -> None:
        self.service = service
        self.model = service.served_name
        self.policy = policy or RequestPolicy(service.settings, lambda: service)

    async def stream(self, req: ChatCompletionRequest) -> AsyncIterator[ChatCompletionChunk]:
        run = await self.policy.run(req, CallContext(self.CALLER, self.CALLER, "v1", "notebook"))
        try:
            async for chunk in run:
                yield chunk
        finally:
            run.close()  # a consumer that stops early frees the engine slot now, not at garbage collection

    def __repr__(self) -> str:
        return f"LocalBackend(model={self.model!r})"


class RemoteBackend(ChatBackend):
    """An OpenAI-compatible server (this app, MindIE, vLLM, ...) at `url`, its SSE parsed back into chunks."""

    def __init__(self, url: str, model: str | None = None, api_key: str | None = None, timeout: float = 300) -> None:
        self.url = url.rstrip("/").removesuffix("/v1")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout
        self.model = model or self._first_model()

    def _first_model(self) -> str:
        r = httpx.get(f"{self.url}/v1/models", headers=self.headers, timeout=self.timeout)
        if r.status_code != 200:
            raise RemoteError(error_message(r.text), r.status_code)
        return r.json()["data"][0]["id"]

    async def stream(self, req: ChatCompletionRequest) -> AsyncIterator[ChatCompletionChunk]:
        body = req.model_dump(mode="json", by_alias=True, exclude_unset=True)
        parser = SSEChunks()
        async with (
            httpx.AsyncClient(timeout=self.timeout, headers=self.headers) as client,
            client.stream("POST", f"{self.url}/v1/chat/completions", json=body) as r,
        ):
            if r.status_code != 200:
                raise RemoteError(error_message((await r.aread()).decode("utf-8", "replace")), r.status_code)
            async for line in r.aiter_lines():
                chunk = parser.line(line)
                if chunk is not None:
                    yield chunk

    def __repr__(self) -> str:
        return f"RemoteBackend(url={self.url!r}, model={self.model!r})"


def connect(target: Any, **kw: Any) -> ChatBackend:
    """A URL string -> RemoteBackend(url, **kw); a ChatService -> LocalBackend."""
    return RemoteBackend(target, **kw) if isinstance(target, str) else LocalBackend(target)


def error_message(text: str) -> str:
    """The message of a MindIE (`{"error": "..."}`) or OpenAI (`{"error": {"message": ...}}`) error body."""
    try:
        err = json.loads(text).get("error")
    except (ValueError, AttributeError):
        return text[:500]
    return err.get("message", str(err)) if isinstance(err, dict) else str(err)


class SSEChunks:
    """One /v1 SSE stream -> ChatCompletionChunk objects with a client-side timeline.

    Tokens per chunk: the logprob entries when present, else one per non-empty delta; the closing chunk is padded
    up to the usage's completion_tokens when it carries usage (engines may pack several tokens per chunk).
    """

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.count = 0

    def line(self, line: str) -> ChatCompletionChunk | None:
        if not line.startswith("data:"):
            return None  # blank separators and ":" comments (keep-alives)
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            return None
        obj = json.loads(payload)
        if "error" in obj and "choices" not in obj:
            raise RemoteError(error_message(payload), 500)
        return self.chunk(obj)

    def chunk(self, obj: dict[str, Any]) -> ChatCompletionChunk:
        now = (time.perf_counter() - self.started) * 1000
        usage = obj.get("usage")
        if usage and usage.get("prompt_tokens_details") is None:
            usage.pop("prompt_tokens_details", None)  # vLLM sends null
        for choice in obj.get("choices", []):
            for entry in (choice.get("logprobs") or {}).get("content") or []:
                entry["bytes"] = entry.get("bytes") or []
                for top in entry.get("top_logprobs") or []:
                    top["bytes"] = top.get("bytes") or []
        chunk = ChatCompletionChunk.model_validate(obj)
        if not chunk.choices or chunk.choices[0].index != 0:
            return chunk  # the timeline follows choice 0, as the UI's does
        c = chunk.choices[0]
        if c.logprobs is not None and c.logprobs.content:
            count = len(c.logprobs.content)
        else:
            count = int(bool(c.delta.content or c.delta.reasoning_content or c.delta.tool_calls))
        if c.finish_reason is not None and chunk.usage is not None:
            count = max(0, chunk.usage.completion_tokens - self.count)
        if count:
            self.count += count
            chunk.timeline = TokenTimeline(token_times_ms=[now] * count)
        return chunk
