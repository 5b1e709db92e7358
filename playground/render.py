"""Chunks -> one reply's view: per choice its answer, reasoning, tool calls, logprobs and per-token engine timings.

Everything here is folded from `ChatCompletionChunk`s exactly as the service yields them; nothing is re-parsed or
estimated. The excluded `timeline` attribute of a chunk belongs to that chunk's (single) choice.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from engine.protocol.response import ChatCompletionChunk, ChunkChoice, LogprobEntry, TokenTimeline, ToolCallItem, Usage
from engine.serving.fold import merge_tool_call

RAW_CHUNKS_KEPT = 400  # the raw view shows the tail of a long stream


@dataclass
class ChoiceView:
    index: int
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallItem] = field(default_factory=list)
    logprobs: list[LogprobEntry] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    times_ms: list[float] = field(default_factory=list)  # when each token was ready, since the request was accepted
    batch_sizes: list[int] = field(default_factory=list)  # batch size of the step that made each token
    queue_waits_us: list[int] = field(default_factory=list)  # wait before the step that made each token
    prepare_ms: float | None = None  # accepted -> handed to the engine (media, template, tokens)
    finish_reason: str | None = None
    usage: Usage | None = None  # from the choice's closing chunk
    answer_at: int | None = None  # tokens before the first answer text or tool call (the reasoning boundary)
    _before_answer: int = 0

    def add(self, c: ChunkChoice, timeline: TokenTimeline | None) -> None:
        d = c.delta
        if d.reasoning_content:
            self.reasoning += d.reasoning_content
        if self.answer_at is None and (d.content or d.tool_calls):
            self.answer_at = self._before_answer
        if timeline is not None:
            self.token_ids += timeline.token_ids
            self.times_ms += timeline.token_times_ms
            self.batch_sizes += timeline.batch_sizes
            self.queue_waits_us += timeline.queue_waits_us
            if timeline.prepare_ms is not None:
                self.prepare_ms = timeline.prepare_ms
            if self.answer_at is None:
                self._before_answer += len(timeline.token_ids)
        self.content += d.content or ""
        for call in d.tool_calls or []:
            merge_tool_call(self.tool_calls, call)
        if c.logprobs is not None:
            self.logprobs += c.logprobs.content
        if c.finish_reason is not None:
            self.finish_reason = c.finish_reason

    @property
    def reasoning_tokens(self) -> int:
        """The engine's count once the choice closed; while streaming, the tokens before the answer began."""
        details = self.usage.completion_tokens_details if self.usage is not None else None
        if details is not None:
            return details.reasoning_tokens
        if not self.reasoning:
            return 0
        return self.answer_at if self.answer_at is not None else len(self.token_ids)

    @property
    def thinking(self) -> bool:
        return bool(self.reasoning) and self.answer_at is None and self.finish_reason is None

    @property
    def cumulative_logprob(self) -> float | None:
        return sum(e.logprob for e in self.logprobs) if self.logprobs else None

    @property
    def reasoning_exhausted(self) -> bool:
        """Reasoning used up max_tokens and left no answer: the case the UI warns about."""
        return (
            self.finish_reason == "length"
            and bool(self.reasoning)
            and not self.content.strip()
            and not (self.tool_calls)
        )


@dataclass
class ReplyView:
    choices: dict[int, ChoiceView] = field(default_factory=dict)
    usage: Usage | None = None  # the trailing usage chunk: the whole request
    error: str | None = None
    stopped: bool = False  # the user pressed Stop
    done: bool = False
    raw: deque[str] = field(default_factory=lambda: deque(maxlen=RAW_CHUNKS_KEPT))
    transcription: list[dict[str, Any]] | None = None  # the first chunk's: audio parts the server transcribed
    media: list[dict[str, Any]] | None = None  # the first chunk's: media parts the model took (type, tokens, ...)
    backend: str = "embedded"  # "embedded", or "remote" (its timings are arrival times here, see stats.py)

    def add(self, chunk: ChatCompletionChunk) -> None:
        self.raw.append(chunk.model_dump_json(exclude_none=True))
        if chunk.transcription:
            self.transcription = chunk.transcription
        if chunk.media:
            self.media = chunk.media
        if not chunk.choices:
            if chunk.usage is not None:
                self.usage = chunk.usage
            return
        for c in chunk.choices:
            view = self.choices.setdefault(c.index, ChoiceView(c.index))
            view.add(c, chunk.timeline if len(chunk.choices) == 1 else None)
            if c.finish_reason is not None and chunk.usage is not None:
                view.usage = chunk.usage

    @property
    def first(self) -> ChoiceView:
        return self.choices.get(0) or ChoiceView(0)

    def usage_of(self, index: int = 0) -> Usage | None:
        """The choice's own usage, else (aborted, or n = 1) the request's."""
        view = self.choices.get(index)
        own = view.usage if view is not None else None
        return own or self.usage


class Throttle:
    """True at most once per `every` seconds: the page re-renders ~10 times a second however fast tokens come."""

    def __init__(self, every: float = 0.1, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self._last = -math.inf
        self.count = 0

    def due(self) -> bool:
        now = self.clock()
        if now - self._last >= self.every:
            self._last = now
            self.count += 1
            return True
        return False


async def throttled(chunks: AsyncIterable[Any], fold: Callable[[Any], None], every: float = 0.1,
                    clock: Callable[[], float] = time.monotonic) -> AsyncIterator[None]:  # fmt: skip
    """Fold every chunk and yield whenever the page should repaint: at once when the last repaint is `every` old,
    otherwise as soon as it is, so a slow stream shows each token when it comes and a fast one ~1/every a second.

    The next chunk is awaited through a task, never cancelled by the timer: cancelling it would abort the stream.
    """
    it = chunks.__aiter__()
    last, dirty = -math.inf, False
    nxt: asyncio.Future = asyncio.ensure_future(it.__anext__())
    try:
        while True:
            timeout = max(0.0, last + every - clock()) if dirty else None
            done, _ = await asyncio.wait({nxt}, timeout=timeout)
            if done:
                try:
                    chunk = nxt.result()
                except StopAsyncIteration:
                    break
                fold(chunk)
                dirty = True
                nxt = asyncio.ensure_future(it.__anext__())
            if dirty and clock() - last >= every:
                last, dirty = clock(), False
                yield
    finally:
        nxt.cancel()  # the consumer left early: the stream's own cleanup (abort) runs


def message_of(view: ChoiceView) -> dict[str, Any]:
    """The assistant message this choice adds to the conversation history (what the next request sends)."""
    msg: dict[str, Any] = {"role": "assistant", "content": view.content}
    if view.tool_calls:
        msg["tool_calls"] = [
            {"id": c.id or f"call_{c.index}", "type": "function",
             "function": {"name": c.function.name or "", "arguments": c.function.arguments or ""}}
            for c in view.tool_calls
        ]  # fmt: skip
    return msg
