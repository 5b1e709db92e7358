"""One reply as notebooks want it: its text, reasoning, tool calls, logprobs and the engine's statistics.

A ChatResult folds nothing itself: its chunks go into the page's own fold (`ReplyView`, playground/client/reply.py) and
it reads that, statistics included (`ReplyView.stats()`), so the page, a notebook and the API's fold of the same stream
cannot disagree, and a number the backend did not give is None here as it is "not provided" on the page.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.protocol.response import ChatCompletionChunk, LogprobEntry
from playground.client import stats as reply_stats
from playground.client.render import Throttle
from playground.client.reply import ChoiceView, ReplyView


class Kinded(Protocol):
    """What a result needs of its backend: its kind ("embedded" or "remote"; playground/client/backend.py)."""

    kind: str


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
    throttle: Throttle = field(default_factory=Throttle)
    request: dict[str, Any] | None = None  # the body that produced it (a branch continues it with its settings)
    # vLLM's `prompt_logprobs` when asked for: per prompt token None (the first) or {token id: {logprob, rank,
    # decoded_token}}; with several prompts (complete()), the first prompt's.
    prompt_logprobs: list[Any] | None = None

    @classmethod
    def of(cls, backend: Kinded) -> ChatResult:
        """An empty result for one request of `backend` (its kind names what the statistics lack)."""
        return cls(ReplyView(backend=backend.kind))

    def add(self, chunk: ChatCompletionChunk) -> bool:
        """Fold one chunk in; True when a live display should re-render now."""
        if chunk.prompt_logprobs is not None and self.prompt_logprobs is None:
            self.prompt_logprobs = chunk.prompt_logprobs
        self.view.add(chunk)
        self.view.done = self.view.done or (chunk.usage is not None and not chunk.choices)
        return self.throttle.due() or any(c.finish_reason for c in chunk.choices)

    # ---- what a notebook reads (choice 0) -----------------------------------------------------------------------
    @property
    def first(self) -> ChoiceView:
        return self.view.first

    @property
    def id(self) -> str:
        return self.view.id

    @property
    def reply(self) -> str:
        return self.first.content

    @property
    def reasoning(self) -> str | None:
        """None: the reply carried no reasoning part at all."""
        return self.first.reasoning if self.first.reasoning_part else None

    @property
    def finish_reason(self) -> str | None:
        return self.first.finish_reason

    @property
    def transcription(self) -> list[dict[str, Any]] | None:
        """Audio parts the server transcribed: {message, part, text}."""
        return self.view.transcription

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The calls the model asked for (finish_reason "tool_calls"), in order; empty when it just answered."""
        return [ToolCall(c.id or "", c.function.name or "", c.function.arguments or "") for c in self.first.tool_calls]

    def message(self) -> dict[str, Any]:
        """This reply as the assistant turn of the next request's messages, tool calls included.

        The reasoning stays out (chat templates drop earlier thinking anyway), and content that is only the
        whitespace around tool calls is sent as "" (it carries nothing, and a template would render it)."""
        turn: dict[str, Any] = {"role": "assistant", "content": self.reply if self.reply.strip() else ""}
        if self.first.tool_calls:
            turn["tool_calls"] = [call.wire() for call in self.tool_calls]
        return turn

    @property
    def usage(self) -> Any:
        return self.view.usage_of(0)

    @property
    def logprobs(self) -> list[LogprobEntry]:
        return self.first.logprobs

    @property
    def token_ids(self) -> list[int]:
        """Empty from a remote backend (not on the wire)."""
        return self.first.token_ids

    @property
    def token_times_ms(self) -> list[float]:
        return self.first.times_ms

    @property
    def batch_sizes(self) -> list[int]:
        return self.first.batch_sizes

    @property
    def queue_waits_us(self) -> list[int]:
        return self.first.queue_waits_us

    @property
    def prefill_time(self) -> int | None:
        return self.first.prefill_time

    @property
    def decode_time_arr(self) -> list[int]:
        return self.first.decode_time_arr

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
        """One flat row of numbers: what the sweep and latency tables are made of (None: not given)."""
        s = self.view.stats()
        return {
            "prompt_tokens": s.prompt_tokens,
            "cached_tokens": s.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "ttft_ms": s.ttft_ms,
            "tokens_per_s": s.decode_tps,
            "e2e_ms": s.e2e_ms,
            "max_batch_size": s.max_batch,
            "mean_queue_wait_us": s.mean_queue_wait_us,
            "finish_reason": self.finish_reason,
        }

    def stats_html(self) -> str:
        return rows_html([(label, value) for label, value, _ in reply_stats.rows(self.view.stats())])

    def __repr__(self) -> str:
        calls = f", tool_calls={[f'{c.name}({c.arguments})' for c in self.tool_calls]}" if self.first.tool_calls else ""
        return (
            f"ChatResult(reply={self.reply!r}{calls}, finish_reason={self.finish_reason!r}, "
            f"completion_tokens={self.completion_tokens})"
        )

    def _repr_html_(self) -> str:
        parts = []
        for t in self.transcription or []:
            parts.append(
                f"<p>♪ transcribed (message {t.get('message')}, part {t.get('part')}): "
                f"<i>{html.escape(str(t.get('text', '')))}</i></p>"
            )
        if self.reasoning:
            parts.append(f"<details><summary>reasoning</summary>{text_html(self.reasoning)}</details>")
        parts.append(text_html(self.reply))
        for c in self.tool_calls:
            parts.append(
                f"<p>⚒ <code>{html.escape(c.name)}({html.escape(c.arguments)})</code> "
                f"<small>{html.escape(c.id)}</small></p>"
            )
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
