"""ChatService: the one code path from a validated request to response chunks.

The HTTP routes, the Gradio UI and the notebooks all call `start()` and iterate the Generation it returns;
`complete()` is nothing but the fold of that stream, so streamed and non-streamed output cannot drift apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from engine.config import Settings
from engine.core.engine import Engine
from engine.core.types import FINISH_RESOURCES, ChoiceDelta, EngineError, EngineRequest, RequestStats, SamplingParams
from engine.openai import prompt as prompts
from engine.openai.errors import (
    ApiError,
    IncompleteGenerationError,
    RequestValidationError,
    ServiceUnavailableError,
)
from engine.openai.fold import fold
from engine.openai.logprobs import TokenFormatter
from engine.openai.params import sampling_params
from engine.openai.request import ChatCompletionRequest, Route
from engine.openai.response import (
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChoiceLogprobs,
    ChunkChoice,
    Delta,
    TokenTimeline,
    Usage,
)


@dataclass
class ModelInfo:
    name: str
    context_length: int
    generation_config: dict[str, Any] = field(default_factory=dict)


@dataclass
class _ChoiceStats:
    tokens: int = 0
    batch_sizes: list[int] = field(default_factory=list)
    queue_waits_us: list[int] = field(default_factory=list)
    times_ms: list[float] = field(default_factory=list)


class Generation:
    """One running request: an async iterator of chunks. Leaving the iteration early aborts it in the engine."""

    def __init__(self, service: ChatService, request_id: str, created: int, model: str, params: SamplingParams,
                 stats: RequestStats, queue: asyncio.Queue, accepted: float, skip_special: bool):  # fmt: skip
        self.service = service
        self.id = request_id
        self.created = created
        self.model = model
        self.params = params
        self.stats = stats
        self._queue = queue
        self._accepted = accepted
        self._skip_special = skip_special
        self._first: Any = None
        self._done = False
        self._choices: dict[int, _ChoiceStats] = {}
        self._closed: set[int] = set()  # choices whose closing chunk has been yielded
        self._shed = False

    async def _prefetch(self) -> None:
        """Wait for the engine's first answer so failures before the first token become HTTP errors."""
        self._first = await self._queue.get()
        if isinstance(self._first, EngineError):
            self._done = True
            raise _map_engine_error(self._first)

    def abort(self) -> None:
        if not self._done:
            self._done = True
            self.service.engine.abort(self.id)

    def shed(self) -> None:
        """End the request early on the server's behalf (draining, request timeout): the engine drops it at its
        next step and every choice still open gets a closing chunk with `insufficient_system_resource` and its
        usage, so the stream still ends well-formed (spec §4.5, §6.4). Safe to call from any thread."""
        if not self._done:
            self._shed = True
            self.abort()

    def _close_open_choices(self) -> list[ChatCompletionChunk]:
        out = []
        for i in range(self.params.n):
            if i in self._closed:
                continue
            if not self.params.streams_live:
                out.append(self._opening(i))
            st = self._choices.setdefault(i, _ChoiceStats())
            choice = ChunkChoice(index=i, delta=Delta(role="assistant", content=""), finish_reason=FINISH_RESOURCES)
            out.append(self._chunk([choice], usage=self._usage(st.tokens, st)))
        return out

    def _chunk(self, choices: list[ChunkChoice], **extra: Any) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=choices, **extra)

    def _usage(self, tokens: int, st: _ChoiceStats) -> Usage:
        u = Usage(
            prompt_tokens=self.stats.prompt_tokens,
            completion_tokens=tokens,
            total_tokens=self.stats.prompt_tokens + tokens,
        )
        u.prompt_tokens_details.cached_tokens = self.stats.cached_tokens
        u.batch_size, u.queue_wait_time = list(st.batch_sizes), list(st.queue_waits_us)
        return u

    def _opening(self, index: int) -> ChatCompletionChunk:
        return self._chunk([ChunkChoice(index=index, delta=Delta(role="assistant", content=""))])

    def _convert(self, d: ChoiceDelta) -> ChatCompletionChunk | None:
        st = self._choices.setdefault(d.index, _ChoiceStats())
        st.tokens += len(d.token_ids)
        st.batch_sizes += d.batch_sizes
        st.queue_waits_us += d.queue_waits_us
        times = [(t - self._accepted) * 1000 for t in d.token_times]
        st.times_ms += times
        logprobs = None
        if self.params.logprobs and d.logprobs:
            logprobs = ChoiceLogprobs(content=self.service.formatter.entries(d.logprobs, self._skip_special))
        timeline = TokenTimeline(token_ids=d.token_ids, token_times_ms=times, batch_sizes=d.batch_sizes,
                                 queue_waits_us=d.queue_waits_us)  # fmt: skip
        choice = ChunkChoice(index=d.index, delta=Delta(role="assistant", content=d.text), logprobs=logprobs)
        if d.finish_reason is None:
            if not d.text and logprobs is None and not d.token_ids:
                return None
            return self._chunk([choice], timeline=timeline)
        choice.finish_reason, choice.stop_reason = d.finish_reason, d.stop_reason
        self._closed.add(d.index)
        ms = [round(t) for t in st.times_ms]
        return self._chunk(
            [choice],
            usage=self._usage(st.tokens, st),
            timeline=timeline,
            prefill_time=ms[0] if ms else 0,
            decode_time_arr=[max(0, b - a) for a, b in zip(ms, ms[1:])],
        )

    def _final_usage(self) -> ChatCompletionChunk:
        longest = max(self._choices.values(), key=lambda s: s.tokens, default=_ChoiceStats())
        usage = self._usage(sum(s.tokens for s in self._choices.values()), longest)
        ms = [round(t) for t in longest.times_ms]
        decode = [max(0, b - a) for a, b in zip(ms, ms[1:])]
        return self._chunk([], usage=usage, prefill_time=ms[0] if ms else 0, decode_time_arr=decode)

    async def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        try:
            if self.params.streams_live:
                for i in range(self.params.n):
                    yield self._opening(i)
            item = self._first
            while item is not None:
                if isinstance(item, EngineError):
                    raise _map_engine_error(item)
                for d in item:
                    if not self.params.streams_live:
                        yield self._opening(d.index)
                    chunk = self._convert(d)
                    if chunk is not None:
                        yield chunk
                item = await self._queue.get()
            self._done = True
            if self._shed:
                for chunk in self._close_open_choices():
                    yield chunk
            yield self._final_usage()
        finally:
            self.abort()


def _map_engine_error(err: EngineError) -> ApiError:
    if err.queue_full:
        return ServiceUnavailableError(str(err), queue_full=True)
    if err.resources:
        return ServiceUnavailableError(str(err))
    return IncompleteGenerationError("Generation failed before the first token.")


class ChatService:
    def __init__(self, engine: Engine, tokenizer: Any, model: ModelInfo, settings: Settings) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.model = model
        self.settings = settings
        self.formatter = TokenFormatter(tokenizer)
        self.served_name = settings.served_model_name or model.name

    def check_model(self, req: ChatCompletionRequest, route: Route) -> str:
        if route == "pangu_v1":
            return self.served_name
        if req.model != self.served_name:
            raise RequestValidationError(f"Model not found: {str(req.model)[:64]!r}.")
        return req.model

    async def start(self, req: ChatCompletionRequest, route: Route = "v1") -> Generation:
        """Validate against the model and server, submit to the engine, and wait for its first answer."""
        accepted = time.perf_counter()
        model = self.check_model(req, route)
        text = await asyncio.to_thread(prompts.render_prompt, req, self.tokenizer, self.settings)
        ids = await asyncio.to_thread(prompts.tokenize, text, self.tokenizer, self.settings, self.model.context_length)
        params = sampling_params(req, self.settings, len(ids), self.model.context_length, self.model.generation_config)
        prefix = "chatcmpl-" if route == "v1" else "chat-"
        request_id = prefix + uuid.uuid4().hex
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def sink(item: Any) -> None:
            # A closed loop (its server stopped) has nobody left to tell; raising here would take down the
            # engine thread that every other server and the UI share.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(queue.put_nowait, item)

        try:
            stats = self.engine.submit(EngineRequest(request_id, ids, params), sink)
        except EngineError as err:
            raise _map_engine_error(err) from None
        gen = Generation(
            self, request_id, int(time.time()), model, params, stats, queue, accepted, req.skip_special_tokens
        )
        try:
            await gen._prefetch()
        except asyncio.CancelledError:
            gen.abort()
            raise
        return gen

    async def count_prompt_tokens(self, req: ChatCompletionRequest, route: Route = "v1") -> tuple[str, int]:
        """(model name, prompt tokens) after the same validation as start(), without generating: for a request
        that is answered without the engine (a question the moderation hook blocked)."""
        model = self.check_model(req, route)
        text = await asyncio.to_thread(prompts.render_prompt, req, self.tokenizer, self.settings)
        ids = await asyncio.to_thread(prompts.tokenize, text, self.tokenizer, self.settings, self.model.context_length)
        sampling_params(req, self.settings, len(ids), self.model.context_length, self.model.generation_config)
        return model, len(ids)

    async def complete(self, req: ChatCompletionRequest, route: Route = "v1") -> ChatCompletionResponse:
        gen = await self.start(req, route)
        return await fold(gen)

    def render_for_debug(self, req: ChatCompletionRequest) -> str:
        """The exact prompt text a request renders to (the UI's 'show prompt')."""
        return prompts.render_prompt(req, self.tokenizer, self.settings)
