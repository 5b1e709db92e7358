"""Repainting a streaming reply: at most ~10 times a second however fast chunks come (Throttle, throttled), and a folded
choice as the assistant message the next request sends (message_of). The fold itself is playground/client/reply.py.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from playground.client.reply import ChoiceView


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


async def throttled(
    chunks: AsyncIterable[Any],
    fold: Callable[[Any], None],
    every: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[None]:
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
            {
                "id": c.id or f"call_{c.index}",
                "type": "function",
                "function": {"name": c.function.name or "", "arguments": c.function.arguments or ""},
            }
            for c in view.tool_calls
        ]
    return msg
