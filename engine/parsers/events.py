"""What a tool-call parser hands the service: text in, content text and tool-call events out (spec §8)."""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

_ID_ALPHABET = string.ascii_letters + string.digits


def new_call_id() -> str:
    """`call_` + 8 random characters from [A-Za-z0-9] (spec §8.2 step 3)."""
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))


IdFactory = Callable[[], str]


@dataclass(frozen=True)
class ToolCallEvent:
    """One streamed piece of a tool call; folding all events of one `index` gives the whole call."""

    index: int  # 0 for the first call of the choice, +1 per call
    id: str | None = None  # set on the first event of a call
    name: str | None = None  # set on the first event of a call
    arguments: str | None = None  # a fragment of the arguments JSON text; the fragments concatenate to all of it


@dataclass(frozen=True)
class ParsedDelta:
    content: str = ""  # content text to emit now
    tool_calls: tuple[ToolCallEvent, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.content or self.tool_calls)


class ToolCallParser(Protocol):
    def feed(self, text: str) -> ParsedDelta:
        """The next piece of the content text (already detokenised)."""
        ...

    def finish(self) -> ParsedDelta:
        """End of generation: flush held-back text and buffered calls."""
        ...

    @property
    def called(self) -> bool:
        """Whether the choice ends with `finish_reason` "tool_calls"; final once `finish()` has returned."""
        ...


def fold(deltas: list[ParsedDelta]) -> tuple[str, list[dict[str, str]]]:
    """Concatenate deltas the way a client does: (content, [{"id", "name", "arguments"} per index])."""
    content = ""
    calls: dict[int, dict[str, str]] = {}
    for delta in deltas:
        content += delta.content
        for ev in delta.tool_calls:
            call = calls.setdefault(ev.index, {"id": "", "name": "", "arguments": ""})
            call["id"] = ev.id or call["id"]
            call["name"] = ev.name or call["name"]
            call["arguments"] += ev.arguments or ""
    return content, [calls[i] for i in sorted(calls)]
