"""The seam's remote side: an OpenAI-compatible server (this app, MindIE, vLLM, ...) at a URL, its SSE parsed back
into the same `ChatCompletionChunk`s the embedded engine yields.

A remote stream carries no engine timeline, so each chunk is stamped with the time it arrived here (ms since the
request was sent): its TTFT and tokens/s include the network, which is what a client of that server sees. What
else it carries (usage; MindIE's per-token batch sizes and queue waits when the server sends perf stats) is read
by the fold, playground/client/reply.py, like any chunk's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from engine.protocol.errors import ApiError
from engine.protocol.request import ChatCompletionRequest
from engine.protocol.response import ChatCompletionChunk, TokenTimeline
from engine.serving.policy import CallContext
from playground.client.backend import ChatBackend, completion_body, run_sync


class RemoteError(ApiError):
    """An error answer from a remote server, with its HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


# A remote server that takes this long to accept a connection, or between two reads, is not answering. The read
# limit is per read (a stream's next chunk), not for a whole reply.
CONNECT_S = 5.0
READ_S = 60.0
PROBE_S = 10.0  # the whole answer of /v1/models (the Backend tab's click waits for it)


def timeouts(read: float = READ_S) -> httpx.Timeout:
    return httpx.Timeout(read, connect=min(CONNECT_S, read))


Allow = Callable[[str], bool]  # whether the server may call this URL (the page: its --remote-backend-urls)


class RemoteBackend(ChatBackend):
    """An OpenAI-compatible server at `url` (with or without the /v1); `model` None: its first model. `timeout`:
    the read limit (CONNECT_S to connect). `allow`: whether a URL may be called; a route outside it (`/tokenize`,
    `/server/steps` at the server's root when only its /v1 is allowed) is then one the backend has not.

    `RemoteBackend(url)` asks for the first model in a blocking call (a notebook's way); a server that must not
    block (the page) uses `await RemoteBackend.open(...)`."""

    kind = "remote"

    def __init__(
        self,
        url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = READ_S,
        allow: Allow | None = None,
    ) -> None:
        self.url = url.rstrip("/").removesuffix("/v1")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout
        self.allow = allow
        self.model = model or run_sync(self._first_model())

    @classmethod
    async def open(
        cls,
        url: str,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = READ_S,
        allow: Allow | None = None,
    ) -> RemoteBackend:
        """The backend, its first model asked for without blocking the event loop or any thread."""
        backend = cls(url, model or "?", api_key, timeout, allow)
        if not model:
            backend.model = await backend._first_model()
        return backend

    def allows(self, url: str) -> bool:
        return self.allow is None or self.allow(url)

    async def _first_model(self) -> str:
        url = f"{self.url}/v1/models"
        if not self.allows(url):
            raise RemoteError("the server's model list is outside the allowed base URL; name the model", 400)
        probe = min(self.timeout, PROBE_S)
        async with httpx.AsyncClient(timeout=timeouts(probe), headers=self.headers) as client:
            try:  # the whole answer in time: a server trickling bytes is not answering either
                r = await asyncio.wait_for(client.get(url), probe)
            except asyncio.TimeoutError:
                raise RemoteError(f"{url} did not answer within {probe:g} s", 504) from None
        if r.status_code != 200:
            raise RemoteError(error_message(r.text), r.status_code)
        return str(r.json()["data"][0]["id"])

    async def start(self, req: ChatCompletionRequest, ctx: CallContext | None = None) -> RemoteRun:
        """The stream, primed: its first chunk is in, so a refusal (HTTP 4xx) raises here. The remote server
        applies its own limits; `ctx` is not sent."""
        return await RemoteRun(self._chunks(req)).prime()

    async def start_completion(
        self, prompt: Any, ctx: CallContext | None = None, **params: Any
    ) -> tuple[RemoteRun, dict[str, Any]]:
        """The server's /v1/completions stream as chat chunks (`completion_chunk`): the same result object."""
        body = completion_body(self.model, prompt, params)
        return await RemoteRun(self._chunks(body, "/v1/completions")).prime(), body

    async def _chunks(
        self, req: ChatCompletionRequest | dict[str, Any], path: str = "/v1/chat/completions"
    ) -> AsyncIterator[ChatCompletionChunk]:
        body = req if isinstance(req, dict) else req.model_dump(mode="json", by_alias=True, exclude_unset=True)
        if not self.allows(f"{self.url}{path}"):
            raise RemoteError(f"the server's {path} route is outside the allowed base URL", 400)
        parser = SSEChunks(completions=path.endswith("/v1/completions"))
        async with (
            httpx.AsyncClient(timeout=timeouts(self.timeout), headers=self.headers) as client,
            client.stream("POST", f"{self.url}{path}", json=body) as r,
        ):
            if r.status_code != 200:
                raise RemoteError(error_message((await r.aread()).decode("utf-8", "replace")), r.status_code)
            async for line in r.aiter_lines():
                chunk = parser.line(line)
                if chunk is not None:
                    yield chunk

    async def tokenize(self, body: dict[str, Any]) -> dict[str, Any] | None:
        return await remote_tokenize(self, body)

    def label(self) -> str:
        return f"backend: remote {self.url} · {self.model}"

    def __repr__(self) -> str:
        return f"RemoteBackend(url={self.url!r}, model={self.model!r})"


class RemoteRun:
    """A remote stream with the embedded run's shape: iterate chunks, `abort()` from another task, `close()`.
    Aborting cancels the read in progress, which closes the HTTP stream: the remote server sees the disconnect."""

    def __init__(self, chunks: AsyncIterator[ChatCompletionChunk]) -> None:
        self._it = chunks
        self._first: list[ChatCompletionChunk] = []
        self._current: asyncio.Future | None = None
        self._aborted = False

    async def prime(self) -> RemoteRun:
        with contextlib.suppress(StopAsyncIteration):
            self._first.append(await self.__anext__())
        return self

    def __aiter__(self) -> RemoteRun:
        return self

    async def __anext__(self) -> ChatCompletionChunk:
        if self._first:
            return self._first.pop()
        if self._aborted:
            raise StopAsyncIteration
        self._current = asyncio.ensure_future(self._it.__anext__())
        try:
            return await self._current
        except asyncio.CancelledError:
            if self._aborted:
                raise StopAsyncIteration from None
            raise

    def abort(self) -> None:
        self._aborted = True
        if self._current is not None and not self._current.done():
            self._current.cancel()

    def close(self) -> None:
        reading = self._current is not None and not self._current.done()
        self.abort()
        if not reading:  # between reads: close the stream's generator (and its HTTP response) now
            with contextlib.suppress(RuntimeError):  # no running loop: it closes when collected
                asyncio.ensure_future(self._it.aclose())  # type: ignore[attr-defined]


def error_message(text: str) -> str:
    """The message of a MindIE (`{"error": "..."}`) or OpenAI (`{"error": {"message": ...}}`) error body."""
    try:
        err = json.loads(text).get("error")
    except (ValueError, AttributeError):
        return text[:500]
    return err.get("message", str(err)) if isinstance(err, dict) else str(err)


class SSEChunks:
    """One /v1 SSE stream -> ChatCompletionChunk objects with a client-side timeline (arrival times).

    Tokens per chunk: the logprob entries when present, else one per non-empty delta; the closing chunk is padded
    up to the usage's completion_tokens when it carries usage (engines may pack several tokens per chunk).
    """

    def __init__(self, completions: bool = False) -> None:
        self.started = time.perf_counter()
        self.count = 0
        self.completions = completions  # text_completion chunks (/v1/completions), read as chat chunks

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
        prompt_logprobs = None
        if self.completions:
            obj, prompt_logprobs = completion_chunk(obj)
        usage = obj.get("usage")
        if usage and usage.get("prompt_tokens_details") is None:
            usage.pop("prompt_tokens_details", None)  # vLLM sends null
        for choice in obj.get("choices", []):
            for entry in (choice.get("logprobs") or {}).get("content") or []:
                entry["bytes"] = entry.get("bytes") or []
                for top in entry.get("top_logprobs") or []:
                    top["bytes"] = top.get("bytes") or []
        chunk = ChatCompletionChunk.model_validate(obj)
        chunk.prompt_logprobs = prompt_logprobs
        chunk.replaces = obj.get("suggestion") == "block"  # an interception chunk: its reply replaces the choice's text
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


def completion_chunk(obj: dict[str, Any]) -> tuple[dict[str, Any], list[Any] | None]:
    """A text_completion chunk as a chat chunk (each choice's `text` its delta's content, the completions logprobs
    object as logprob entries) and the first `prompt_logprobs` it carries. Without `echo` (ChatBackend.complete
    refuses it) every position is a generated token."""
    choices, prompt_logprobs = [], None
    for c in obj.get("choices") or []:
        prompt_logprobs = prompt_logprobs or c.get("prompt_logprobs")
        lp = c.get("logprobs") or None
        content = None
        if lp is not None:
            tops = lp.get("top_logprobs") or [None] * len(lp.get("tokens") or [])
            content = [
                {
                    "token": t,
                    "logprob": v,
                    "bytes": [],
                    "top_logprobs": [{"token": k, "logprob": x, "bytes": []} for k, x in (top or {}).items()],
                }
                for t, v, top in zip(lp.get("tokens") or [], lp.get("token_logprobs") or [], tops)
                if v is not None
            ]
        choices.append(
            {
                "index": c.get("index", 0),
                "delta": {"role": "assistant", "content": c.get("text") or ""},
                "logprobs": {"content": content} if content is not None else None,
                "finish_reason": c.get("finish_reason"),
                "stop_reason": c.get("stop_reason"),
            }
        )
    return {**obj, "choices": choices}, prompt_logprobs


async def remote_tokenize(backend: Any, body: dict[str, Any]) -> dict[str, Any] | None:
    """A remote server's POST /tokenize (vLLM serves it at the root; so does this app); None when it has none."""
    headers = dict(getattr(backend, "headers", {}) or {})
    timeout = getattr(backend, "timeout", READ_S)
    url = f"{backend.url}/tokenize"
    if not getattr(backend, "allows", lambda u: True)(url):
        return None  # outside the allowed base: a route this backend has not, for this server
    try:
        async with httpx.AsyncClient(timeout=timeouts(timeout), headers=headers) as client:
            r = await client.post(url, json=body)
    except httpx.HTTPError as exc:
        raise ApiError(f"{type(exc).__name__}: {exc}") from None
    if r.status_code in (404, 405, 501):  # no such route (a plain HTTP server answers a POST with 501)
        return None
    if r.status_code != 200:
        raise ApiError(error_message(r.text))
    answer: dict[str, Any] = r.json()
    return answer
