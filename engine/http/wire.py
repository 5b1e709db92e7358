"""Route-neutral chunks and responses -> the JSON the /v1 (MindIE) route sends (spec §4, §5.2, §5.4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.protocol.response import ChatCompletionChunk, ChatCompletionResponse, Usage


def usage_json(usage: Usage, perf_stats: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.prompt_tokens_details.cached_tokens},
        "completion_tokens": usage.completion_tokens,
    }
    if usage.completion_tokens_details is not None:
        out["completion_tokens_details"] = usage.completion_tokens_details.model_dump()
    out["total_tokens"] = usage.total_tokens
    if perf_stats:
        out["batch_size"] = usage.batch_size
        out["queue_wait_time"] = usage.queue_wait_time
    if usage.speculative is not None:
        out["speculative"] = dict(usage.speculative)
    return out


def response_json(resp: ChatCompletionResponse, perf_stats: bool) -> dict[str, Any]:
    choices = []
    for c in resp.choices:
        message: dict[str, Any] = {"role": "assistant", "content": c.message.content}
        if c.message.reasoning_content is not None:
            message["reasoning_content"] = c.message.reasoning_content
        message["tool_calls"] = [t.model_dump(exclude_none=True, exclude={"index"}) for t in c.message.tool_calls]
        choices.append(
            {
                "index": c.index,
                "message": message,
                "logprobs": c.logprobs.model_dump() if c.logprobs else None,
                "finish_reason": c.finish_reason,
                "stop_reason": c.stop_reason,
            }
        )
    out: dict[str, Any] = {
        "id": resp.id,
        "object": "chat.completion",
        "created": resp.created,
        "model": resp.model,
        "choices": choices,
        "usage": usage_json(resp.usage, perf_stats),
        "prompt_logprobs": resp.prompt_logprobs,
    }
    if resp.transcription is not None:
        out["transcription"] = resp.transcription
    if resp.media is not None:
        out["media"] = resp.media
    if resp.moderation_result is not None:
        out["moderation_result"] = resp.moderation_result
    if perf_stats:
        out["prefill_time"] = resp.prefill_time or 0
        out["decode_time_arr"] = resp.decode_time_arr or []
    return out


@dataclass
class V1StreamWriter:
    """Stateful: full_text mode and continuous usage need what earlier chunks carried."""

    perf_stats: bool = True
    full_text: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    prompt_tokens: int = 0
    _content: dict[int, str] = field(default_factory=dict)
    _reasoning: dict[int, str] = field(default_factory=dict)
    _tokens: dict[int, int] = field(default_factory=dict)

    def chunk(self, chunk: ChatCompletionChunk) -> dict[str, Any] | None:
        head: dict[str, Any] = {
            "id": chunk.id,
            "object": "chat.completion.chunk",
            "created": chunk.created,
            "model": chunk.model,
        }
        if chunk.transcription is not None:
            head["transcription"] = chunk.transcription
        if chunk.media is not None:
            head["media"] = chunk.media
        if chunk.prompt_logprobs is not None:
            head["prompt_logprobs"] = chunk.prompt_logprobs
        if chunk.prompt_progress is not None:
            return {**head, "choices": [], "prompt_progress": chunk.prompt_progress.model_dump()}
        if not chunk.choices:
            if not self.include_usage or chunk.usage is None:
                return None
            return {**head, "choices": [], "usage": usage_json(chunk.usage, self.perf_stats)}
        (c,) = chunk.choices
        if chunk.timeline is not None:
            self._tokens[c.index] = self._tokens.get(c.index, 0) + len(chunk.timeline.token_ids)
        delta: dict[str, Any] = {"role": "assistant"}
        content = c.delta.content
        if self.full_text and content is not None:
            content = self._content[c.index] = self._content.get(c.index, "") + content
        if c.delta.reasoning_content is not None:
            reasoning = c.delta.reasoning_content
            if self.full_text:
                reasoning = self._reasoning[c.index] = self._reasoning.get(c.index, "") + reasoning
            delta["reasoning_content"] = reasoning
        if content is not None:
            delta["content"] = content
        if c.delta.tool_calls:
            delta["tool_calls"] = [t.model_dump(exclude_none=True) for t in c.delta.tool_calls]
        if len(delta) == 1:
            delta["content"] = ""
        choice: dict[str, Any] = {
            "index": c.index,
            "delta": delta,
            "logprobs": c.logprobs.model_dump() if c.logprobs else None,
            "finish_reason": c.finish_reason,
        }
        out: dict[str, Any] = dict(head)
        if c.finish_reason is not None:
            choice["stop_reason"] = c.stop_reason
            if chunk.usage is not None:
                out["usage"] = usage_json(chunk.usage, self.perf_stats)
            if self.full_text:
                out["full_text"] = self._content.get(c.index, "")
        elif self.continuous_usage and chunk.usage is None:
            out["usage"] = self._running_usage()
        out["choices"] = [choice]
        return out

    def _running_usage(self) -> dict[str, Any]:
        done = sum(self._tokens.values())
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": done,
            "total_tokens": self.prompt_tokens + done,
        }
