"""Route-neutral chunks and responses -> the bytes the Pangu routes send (spec §4.3, §5.3, §6.3, §6.4).

V2 (`/api/v2/chat/completions`) and V1 (`/v1/{project}/deployments/{deployment}/chat/completions`) share one
writer; they differ in the key that wraps a choice's increment (`delta` vs `message`), the terminator spelling
(`data: [DONE]` vs `data:[DONE]`) and V1's optional `event:` usage line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.http.error_bodies import error_body
from engine.http.sse import compact, sse
from engine.http.wire import response_json
from engine.protocol.errors import ApiError
from engine.protocol.request import Route
from engine.protocol.response import ChatCompletionChunk, ChatCompletionResponse


def pangu_response_json(resp: ChatCompletionResponse) -> dict[str, Any]:
    """Non-stream body on both Pangu routes: the /v1 shape without MindIE's timing extras (§4.3)."""
    return response_json(resp, perf_stats=False)


@dataclass
class PanguStreamWriter:
    """Stateful: every chunk carries the cumulative usage of the (single) choice."""

    route: Route  # "pangu_v1" or "pangu_v2"
    prompt_tokens: int
    usage_event: bool = False  # V1 only: the extra `event:` usage line before the terminator
    _completion: int = 0
    _opened: set[int] = field(default_factory=set)

    @property
    def key(self) -> str:
        return "message" if self.route == "pangu_v1" else "delta"

    def _usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self._completion,
            "total_tokens": self.prompt_tokens + self._completion,
        }

    def events(self, chunk: ChatCompletionChunk) -> list[bytes]:
        head: dict[str, Any] = {
            "id": chunk.id,
            "object": "chat.completion.chunk",
            "created": chunk.created,
            "model": chunk.model,
        }
        head.update(getattr(chunk, "top_level", {}))
        if chunk.prompt_progress is not None:  # a /v1 extension: the Pangu routes send none
            return []
        if not chunk.choices:
            if chunk.usage is not None:
                self._completion = chunk.usage.completion_tokens
            out = [sse({**head, "choices": [], "usage": self._usage()})]
            if self.usage_event and self.route == "pangu_v1":
                p, done = self.prompt_tokens, self._completion
                event = {
                    "usage": {"completionTokens": done, "promptTokens": p, "totalTokens": p + done},
                    "tokens": p,
                    "token_number": done,
                }
                out.append(f"event:{compact(event)}\n\n".encode())
            return out
        (c,) = chunk.choices
        if chunk.timeline is not None:
            self._completion += len(chunk.timeline.token_ids)
        body: dict[str, Any] = {}
        if c.index not in self._opened:  # the service opens every choice with an empty assistant chunk
            self._opened.add(c.index)
            body["role"] = "assistant"
        if c.delta.reasoning_content:
            body["reasoning_content"] = c.delta.reasoning_content
        if c.delta.content:
            body["content"] = c.delta.content
        if c.delta.tool_calls:
            body["tool_calls"] = [t.model_dump(exclude_none=True) for t in c.delta.tool_calls]
        if not body:
            body["content"] = ""
        choice: dict[str, Any] = {
            "index": c.index,
            self.key: body,
            "logprobs": c.logprobs.model_dump() if c.logprobs else None,
            "finish_reason": c.finish_reason,
        }
        if c.finish_reason is not None:
            choice["stop_reason"] = c.stop_reason
        return [sse({**head, "choices": [choice], "usage": self._usage()})]

    def error(self, exc: ApiError) -> list[bytes]:
        return [sse(error_body(self.route, exc)[1])]

    def end(self) -> list[bytes]:
        return [b"data:[DONE]\n\n" if self.route == "pangu_v1" else b"data: [DONE]\n\n"]
