"""Chunks -> one reply with its reasoning, tool calls, logprobs and the engine's statistics, as notebooks want them.

Folds the same ChatCompletionChunk objects the UI renders into the UI's own `ReplyView`, reads its numbers
through the UI's `stats.compute`, and folds tool-call deltas with the API's own `merge_tool_call`, so neither the
page nor a non-stream response can disagree with a notebook.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from typing import Any

from engine.protocol.response import ChatCompletionChunk, LogprobEntry, ToolCallItem
from engine.serving.fold import merge_tool_call
from playground import stats as reply_stats
from playground.render import ReplyView, Throttle


@dataclass(frozen=True)
class ToolCall:
    """One function call the model asked for: the id to answer it with, the name, and the arguments as sent (a
    JSON string the model wrote, so possibly not valid JSON; `args` decodes it)."""

    id: str
    name: str
    arguments: str

    @property
    def args(self) -> dict[str, Any]:
        """The arguments decoded: what to call the local function with (`fn(**call.args)`)."""
        value = json.loads(self.arguments or "{}")
        if not isinstance(value, dict):
            raise ValueError(f"tool call {self.id}: arguments are not a JSON object: {self.arguments!r}")
        return value

    def wire(self) -> dict[str, Any]:
        """The call as an assistant message carries it back to the server."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(repr=False)
class ChatResult:
    view: ReplyView = field(default_factory=ReplyView)
    id: str = ""
    reasoning: str | None = None  # None: the reply carried no reasoning part at all
    logprobs: list[LogprobEntry] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)  # empty from a remote backend (not on the wire)
    queue_waits_us: list[int] = field(default_factory=list)  # µs per token, from the timeline or the usage
    prefill_time: int | None = None  # ms to the first token, from the closing chunk
    decode_time_arr: list[int] = field(default_factory=list)  # ms per later token, from the closing chunk
    throttle: Throttle = field(default_factory=Throttle)
    transcription: list[dict[str, Any]] | None = None  # audio parts the server transcribed: {message, part, text}
    wire_calls: list[ToolCallItem] = field(default_factory=list)  # tool-call deltas, folded as the API does

    def add(self, chunk: ChatCompletionChunk) -> bool:
        """Fold one chunk in (choice 0 only); True when a live display should re-render now."""
        self.id = self.id or chunk.id
        self.transcription = self.transcription or chunk.transcription
        for c in chunk.choices:
            if c.index != 0:
                continue
            if c.delta.reasoning_content is not None:
                self.reasoning = (self.reasoning or "") + c.delta.reasoning_content
            for part in c.delta.tool_calls or []:
                merge_tool_call(self.wire_calls, part)
            if c.logprobs is not None:
                self.logprobs += c.logprobs.content
            if c.finish_reason is not None and chunk.decode_time_arr is not None:
                self.prefill_time, self.decode_time_arr = chunk.prefill_time, list(chunk.decode_time_arr)
        if chunk.timeline is not None and (not chunk.choices or chunk.choices[0].index == 0):
            self.token_ids += chunk.timeline.token_ids
            self.queue_waits_us += chunk.timeline.queue_waits_us
        self.view.add(chunk)
        self.view.done = self.view.done or (chunk.usage is not None and not chunk.choices)
        first = self.view.choices.get(0)
        if chunk.usage is not None and not chunk.choices and first is not None:
            # a remote stream has no timeline: take the usage's lists
            self.queue_waits_us = self.queue_waits_us or list(chunk.usage.queue_wait_time)
            first.batch_sizes = first.batch_sizes or list(chunk.usage.batch_size)
        return self.throttle.due() or any(c.finish_reason for c in chunk.choices)

    # ---- what a notebook reads --------------------------------------------------------------------------------
    @property
    def reply(self) -> str:
        return self.view.first.content

    @property
    def finish_reason(self) -> str | None:
        return self.view.first.finish_reason

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The calls the model asked for (finish_reason "tool_calls"), in order; empty when it just answered."""
        return [ToolCall(c.id or "", c.function.name or "", c.function.arguments or "") for c in self.wire_calls]

    def message(self) -> dict[str, Any]:
        """This reply as the assistant turn of the next request's messages, tool calls included.

        The reasoning stays out (chat templates drop earlier thinking anyway), and content that is only the
        whitespace around tool calls is sent as "" (it carries nothing, and a template would render it)."""
        turn: dict[str, Any] = {"role": "assistant", "content": self.reply if self.reply.strip() else ""}
        if self.wire_calls:
            turn["tool_calls"] = [call.wire() for call in self.tool_calls]
        return turn

    @property
    def usage(self) -> Any:
        return self.view.usage_of(0)

    @property
    def token_times_ms(self) -> list[float]:
        return self.view.first.times_ms

    @property
    def batch_sizes(self) -> list[int]:
        return self.view.first.batch_sizes

    @property
    def completion_tokens(self) -> int:
        return self.usage.completion_tokens if self.usage is not None else len(self.token_times_ms)

    @property
    def tokens(self) -> list[str]:
        """Token texts when logprobs were asked for, else the token ids as strings (still fine for distinct-n)."""
        return [e.token for e in self.logprobs] if self.logprobs else [str(i) for i in self.token_ids]

    @property
    def mean_logprob(self) -> float:
        return sum(e.logprob for e in self.logprobs) / len(self.logprobs) if self.logprobs else math.nan

    @property
    def min_logprob(self) -> float:
        return min(e.logprob for e in self.logprobs) if self.logprobs else math.nan

    def stats(self) -> dict[str, Any]:
        """One flat row of numbers: what the sweep and latency tables are made of."""
        usage, s = self.usage, reply_stats.compute(self.view)
        sizes = self.batch_sizes
        return {
            "prompt_tokens": usage.prompt_tokens if usage is not None else None,
            "cached_tokens": usage.prompt_tokens_details.cached_tokens if usage is not None else None,
            "completion_tokens": self.completion_tokens,
            "ttft_ms": s.ttft_ms if s.ttft_ms is not None else math.nan,
            "tokens_per_s": s.decode_tps or 0.0,
            "e2e_ms": self.token_times_ms[-1] if self.token_times_ms else math.nan,
            "max_batch_size": max(sizes) if sizes else 0,
            "mean_queue_wait_us": sum(self.queue_waits_us) / len(self.queue_waits_us) if self.queue_waits_us else 0,
            "finish_reason": self.finish_reason,
        }

    def stats_html(self) -> str:
        return rows_html([(label, value) for label, value, _ in reply_stats.rows(reply_stats.compute(self.view))])

    def __repr__(self) -> str:
        calls = f", tool_calls={[f'{c.name}({c.arguments})' for c in self.tool_calls]}" if self.wire_calls else ""
        return (f"ChatResult(reply={self.reply!r}{calls}, finish_reason={self.finish_reason!r}, "
                f"completion_tokens={self.completion_tokens})")  # fmt: skip

    def _repr_html_(self) -> str:
        parts = []
        for t in self.transcription or []:
            parts.append(f"<p>🎤 transcribed (message {t.get('message')}, part {t.get('part')}): "
                         f"<i>{html.escape(str(t.get('text', '')))}</i></p>")  # fmt: skip
        if self.reasoning:
            parts.append(f"<details><summary>reasoning</summary>{text_html(self.reasoning)}</details>")
        parts.append(text_html(self.reply))
        for c in self.tool_calls:
            parts.append(f"<p>🔧 <code>{html.escape(c.name)}({html.escape(c.arguments)})</code> "
                         f"<small>{html.escape(c.id)}</small></p>")  # fmt: skip
        if self.view.error:
            parts.append(f"<p>⚠️ {html.escape(self.view.error)}</p>")
        parts.append(self.stats_html())
        return "\n".join(parts)


def text_html(text: str) -> str:
    return f'<div style="white-space: pre-wrap">{html.escape(text)}</div>'


def rows_html(rows: list[tuple[str, str]]) -> str:
    """The UI's (statistic, value) rows as a small HTML table (widgets show HTML, not Markdown)."""
    if not rows:
        return ""
    body = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table><tr><th>statistic</th><th>value</th></tr>{body}</table>"


def heatmap_html(entries: list[LogprobEntry]) -> str:
    """The reply with each token shaded by its probability: red = unlikely, green = near certain.

    Hovering a token shows its probability and the alternatives the engine reported (`top_logprobs`).
    """
    spans = []
    for e in entries:
        p = math.exp(e.logprob)
        alternatives = ", ".join(f"{t.token!r} {math.exp(t.logprob):.2f}" for t in e.top_logprobs)
        tip = f"p = {p:.3f}" + (f" | top: {alternatives}" if alternatives else "")
        shown = html.escape(e.token).replace("\n", "↵\n")
        spans.append(
            f'<span title="{html.escape(tip, quote=True)}" style="background: hsl({120 * p:.0f}, 75%, 82%)">{shown}</span>'
        )
    return f'<div style="white-space: pre-wrap; line-height: 1.6">{"".join(spans)}</div>'
