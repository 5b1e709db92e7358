"""Generation: one running request as an async iterator of response chunks.

It turns the engine's per-step deltas into chunks: the opening and closing chunks, logprobs, tool-call parsing,
the reasoning split, usage and timings, and the closing chunks of a request shed by the server. ChatService.start
(service.py) creates it with what it needs (the request's fixed facts, an abort callable, the token formatter), so
it knows nothing of the service; leaving the iteration early aborts the request in the engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from engine.core.types import FINISH_RESOURCES, ChoiceDelta, EngineError, PromptProgress, RequestStats, SamplingParams
from engine.parsers import ToolCallParser, make_parser
from engine.protocol.errors import ApiError, IncompleteGenerationError, ServiceUnavailableError
from engine.protocol.response import (
    ChatCompletionChunk,
    ChoiceLogprobs,
    ChunkChoice,
    CompletionTokensDetails,
    Delta,
    FunctionCall,
    PromptProgressInfo,
    TokenTimeline,
    ToolCallItem,
    Usage,
)
from engine.serving.logprobs import TokenFormatter
from engine.serving.step_times import decode_times, queue_waits


@dataclass(frozen=True)
class RequestFacts:
    """What a Generation knows of its request, fixed when the service submits it to the engine."""

    id: str
    created: int
    model: str
    params: SamplingParams
    accepted: float  # perf_counter at acceptance: token times count from here
    skip_special: bool
    split: bool = False  # reasoning_content is separated from content (spec §7)
    tool_parser: str | None = None  # parser name when tools are active (spec §8)
    streaming: bool = True  # a non-stream parser holds everything back and answers at the end (§8.2)
    prepare_ms: float | None = None  # accepted -> submitted to the engine, on the first token's timeline
    transcription: list[dict[str, Any]] | None = None  # rides on the first chunk
    media: list[dict[str, Any]] | None = None  # media parts the model took (tokens, frames), on the first chunk too


@dataclass
class _ChoiceStats:
    tokens: int = 0
    batch_sizes: list[int] = field(default_factory=list)
    queue_waits_us: list[int] = field(default_factory=list)
    times_ms: list[float] = field(default_factory=list)
    reasoning_tokens: int | None = None
    speculative: bool = False  # speculative decoding ran for it: its drafted and accepted tokens
    drafted: int = 0
    accepted: int = 0


class Generation:
    """One running request: an async iterator of chunks. Leaving the iteration early aborts it in the engine."""

    def __init__(
        self,
        facts: RequestFacts,
        stats: RequestStats,
        queue: asyncio.Queue,
        abort: Callable[[str], None],
        formatter: TokenFormatter,
    ) -> None:
        self.id = facts.id
        self.created = facts.created
        self.model = facts.model
        self.params = facts.params
        self.stats = stats
        self._queue = queue
        self._abort = abort  # the engine's abort(request_id)
        self._formatter = formatter
        self._accepted = facts.accepted
        self.prepare_ms = facts.prepare_ms
        self._skip_special = facts.skip_special
        self.split = facts.split
        self.tool_parser = facts.tool_parser
        self._streaming = facts.streaming
        self._parsers: dict[int, ToolCallParser] = {}
        self._transcription = facts.transcription
        self._media = facts.media
        self._first: Any = None
        self._done = False
        self._choices: dict[int, _ChoiceStats] = {}
        self._closed: set[int] = set()  # choices whose closing chunk has been yielded
        self._shed = False
        self._prompt_logprobs = stats.prompt_logprobs is not None or facts.params.prompt_logprobs is not None

    async def first_answer(self) -> None:
        """Wait for the engine's first answer, so that failures before the first token are raised here (and become
        the caller's error status) rather than in the middle of a stream."""
        self._first = await self._queue.get()
        if isinstance(self._first, EngineError):
            self._done = True
            raise map_engine_error(self._first)

    def abort(self) -> None:
        if not self._done:
            self._done = True
            self._abort(self.id)

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
        if self._transcription is not None:
            extra["transcription"], self._transcription = self._transcription, None
        if self._media is not None:
            extra["media"], self._media = self._media, None
        return ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=choices, **extra)

    def _usage(self, tokens: int, st: _ChoiceStats) -> Usage:
        u = Usage(
            prompt_tokens=self.stats.prompt_tokens,
            completion_tokens=tokens,
            total_tokens=self.stats.prompt_tokens + tokens,
        )
        u.prompt_tokens_details.cached_tokens = self.stats.cached_tokens
        if self.split:
            u.completion_tokens_details = CompletionTokensDetails(reasoning_tokens=st.reasoning_tokens or 0)
        u.batch_size, u.queue_wait_time = list(st.batch_sizes), queue_waits(st.times_ms, st.queue_waits_us)
        if st.speculative:
            u.speculative = {"drafted": st.drafted, "accepted": st.accepted}
        return u

    def _opening(self, index: int) -> ChatCompletionChunk:
        return self._chunk([ChunkChoice(index=index, delta=Delta(role="assistant", content=""))])

    def _convert(self, d: ChoiceDelta) -> ChatCompletionChunk | None:
        st = self._choices.setdefault(d.index, _ChoiceStats())
        st.tokens += len(d.token_ids)
        st.batch_sizes += d.batch_sizes
        st.queue_waits_us += d.queue_waits_us
        st.speculative, st.drafted, st.accepted = (
            st.speculative or d.speculative,
            st.drafted + d.drafted,
            st.accepted + len(d.accepted),
        )
        times = [(t - self._accepted) * 1000 for t in d.token_times]
        st.times_ms += times
        logprobs = None
        if self.params.logprobs and d.logprobs:
            logprobs = ChoiceLogprobs(content=self._formatter.entries(d.logprobs, self._skip_special))
        timeline = TokenTimeline(
            token_ids=d.token_ids, token_times_ms=times, batch_sizes=d.batch_sizes, queue_waits_us=d.queue_waits_us
        )
        timeline.accepted = d.accepted
        if d.steps:  # the x-ray: the records as they are (no copy, no validation), one per token
            timeline.steps, timeline.short_id = d.steps, self.stats.short_id
        if self.prepare_ms is not None and d.token_ids:  # once, with the first token
            timeline.prepare_ms, self.prepare_ms = self.prepare_ms, None
        if d.reasoning_tokens is not None:
            st.reasoning_tokens = d.reasoning_tokens
        final = d.finish_reason is not None
        text, calls, called = self._parse_tools(d.index, d.text, final)
        delta = Delta(role="assistant", content=text, tool_calls=calls or None)
        if self.split:  # each part only when it has text; the closing chunk carries both, so the fold has both
            delta.content = text or ("" if final else None)
            delta.reasoning_content = d.reasoning_text or ("" if final else None)
        choice = ChunkChoice(index=d.index, delta=delta, logprobs=logprobs)
        extra: dict[str, Any] = {}
        if self._prompt_logprobs and d.token_ids:  # once, after the prefill that scored the prompt
            self._prompt_logprobs = False
            extra["prompt_logprobs"] = self._formatter.prompt_entries(self.stats.prompt_logprobs or [])
        if d.finish_reason is None:
            if not d.text and not d.reasoning_text and logprobs is None and not d.token_ids:
                return None
            return self._chunk([choice], timeline=timeline, **extra)
        choice.finish_reason, choice.stop_reason = d.finish_reason, d.stop_reason
        self._closed.add(d.index)
        if called and d.finish_reason in ("stop", "length"):
            choice.finish_reason = "tool_calls"
        prefill, decode = decode_times(st.times_ms)
        return self._chunk(
            [choice],
            usage=self._usage(st.tokens, st),
            timeline=timeline,
            prefill_time=prefill,
            decode_time_arr=decode,
            **extra,
        )

    def _parse_tools(self, index: int, text: str, final: bool) -> tuple[str, list[ToolCallItem], bool]:
        """Content text through the choice's tool-call parser: (content to emit, tool-call deltas, called)."""
        if self.tool_parser is None:
            return text, [], False
        parser = self._parsers.get(index)
        if parser is None:
            parser = self._parsers[index] = make_parser(self.tool_parser, streaming=self._streaming)
        parts = [parser.feed(text)] if text else []
        if final:
            parts.append(parser.finish())
        calls = [
            ToolCallItem(
                index=e.index,
                id=e.id,
                type="function" if e.id else None,
                function=FunctionCall(name=e.name, arguments=e.arguments),
            )
            for p in parts
            for e in p.tool_calls
        ]
        return "".join(p.content for p in parts), calls, final and parser.called

    def _final_usage(self) -> ChatCompletionChunk:
        longest = max(self._choices.values(), key=lambda s: s.tokens, default=_ChoiceStats())
        usage = self._usage(sum(s.tokens for s in self._choices.values()), longest)
        if any(s.speculative for s in self._choices.values()):  # n > 1: every choice's drafts together
            usage.speculative = {
                "drafted": sum(s.drafted for s in self._choices.values()),
                "accepted": sum(s.accepted for s in self._choices.values()),
            }
        if usage.completion_tokens_details is not None:  # for n > 1, choice 0's count (MindIE-faithful)
            usage.completion_tokens_details.reasoning_tokens = self._choices.get(0, longest).reasoning_tokens or 0
        prefill, decode = decode_times(longest.times_ms)
        return self._chunk([], usage=usage, prefill_time=prefill, decode_time_arr=decode)

    async def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        try:
            if self.params.streams_live:
                for i in range(self.params.n):
                    yield self._opening(i)
            item = self._first
            while item is not None:
                if isinstance(item, EngineError):
                    raise map_engine_error(item)
                if isinstance(item, PromptProgress):
                    yield self._chunk(
                        [],
                        prompt_progress=PromptProgressInfo(
                            total=item.total,
                            cache=item.cached,
                            processed=item.processed,
                            time_ms=round(item.time_ms, 1),
                        ),
                    )
                    item = await self._queue.get()
                    continue
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


def map_engine_error(err: EngineError) -> ApiError:
    if err.queue_full:
        return ServiceUnavailableError(str(err), queue_full=True)
    if err.stopped:  # the model was unloaded (or the server stops) under the request: try again, maybe elsewhere
        return ServiceUnavailableError("The model was unloaded or the server is shutting down; retry the request.")
    if err.resources:
        return ServiceUnavailableError(str(err))
    return IncompleteGenerationError("Generation failed before the first token.")
