"""Chunks -> what the page shows: the reply text and the engine's statistics for it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from engine.openai.response import ChatCompletionChunk

UPDATE_EVERY_S = 0.05  # throttle re-renders: long replies stay smooth


@dataclass
class ReplyView:
    content: str = ""
    finish_reason: str | None = None
    error: str | None = None
    token_times_ms: list[float] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    usage: Any = None
    _last_render: float = 0.0

    def add(self, chunk: ChatCompletionChunk) -> bool:
        """Fold one chunk in; True when the page should re-render now."""
        for c in chunk.choices:
            if c.index != 0:
                continue
            self.content += c.delta.content or ""
            if c.finish_reason:
                self.finish_reason = c.finish_reason
        if chunk.timeline and (not chunk.choices or chunk.choices[0].index == 0):
            self.token_times_ms += chunk.timeline.token_times_ms
            self.batch_sizes += chunk.timeline.batch_sizes
        if chunk.usage is not None and not chunk.choices:
            self.usage = chunk.usage
        now = time.monotonic()
        if now - self._last_render >= UPDATE_EVERY_S or self.finish_reason:
            self._last_render = now
            return True
        return False

    def message(self) -> dict[str, Any]:
        text = self.content
        if self.error:
            text = (text + "\n\n" if text else "") + f"⚠️ {self.error}"
        return {"role": "assistant", "content": text}

    @property
    def ttft_ms(self) -> float | None:
        """Time to first token, from the engine's timeline (ms since the request was accepted)."""
        return self.token_times_ms[0] if self.token_times_ms else None

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens after the first over the time they took: the decode speed, prefill excluded."""
        t = self.token_times_ms
        return (len(t) - 1) / ((t[-1] - t[0]) / 1000) if len(t) > 1 and t[-1] > t[0] else 0.0

    def stats_rows(self) -> list[tuple[str, str]]:
        """(statistic, value) pairs: the one list the page and the notebooks both render."""
        t = self.token_times_ms
        if not t:
            return []
        rows = [("completion tokens", str(len(t))), ("time to first token", f"{self.ttft_ms:.0f} ms"),
                ("decode speed", f"{self.decode_tokens_per_s:.1f} tokens/s"), ("end to end", f"{t[-1]:.0f} ms"),
                ("batch size (max)", str(max(self.batch_sizes) if self.batch_sizes else 0))]  # fmt: skip
        if self.usage is not None:
            rows.insert(0, ("prompt tokens", str(self.usage.prompt_tokens)))
            rows.insert(1, ("cached tokens", str(self.usage.prompt_tokens_details.cached_tokens)))
        if self.finish_reason:
            rows.append(("finish reason", self.finish_reason))
        return rows

    def stats_markdown(self) -> str:
        rows = self.stats_rows()
        if not rows:
            return ""
        return "| statistic | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)
