"""SSE framing shared by the route families, and the /v1 writer behind the same interface as the Pangu one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from engine.http.error_bodies import error_body
from engine.http.wire import V1StreamWriter
from engine.protocol.errors import ApiError
from engine.protocol.response import ChatCompletionChunk


def compact(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def sse(data: dict[str, Any] | str) -> bytes:
    return f"data: {data if isinstance(data, str) else compact(data)}\n\n".encode()


class EventWriter(Protocol):
    """Turns the service's chunks into SSE bytes for one route family."""

    def events(self, chunk: ChatCompletionChunk) -> list[bytes]: ...

    def error(self, exc: ApiError) -> list[bytes]: ...

    def end(self) -> list[bytes]: ...


@dataclass
class V1Events:
    """The MindIE-flavour stream (§5.2) of wire.V1StreamWriter, plus any top-level fields a chunk brings
    (the moderation interception unit)."""

    writer: V1StreamWriter

    def events(self, chunk: ChatCompletionChunk) -> list[bytes]:
        data = self.writer.chunk(chunk)
        if data is None:
            return []
        return [sse({**data, **getattr(chunk, "top_level", {})})]

    def error(self, exc: ApiError) -> list[bytes]:
        return [sse(error_body("v1", exc)[1])]

    def end(self) -> list[bytes]:
        return [sse("[DONE]")]
