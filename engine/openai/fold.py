"""Fold a chunk stream into a non-stream response (spec §4): the only way complete() is built."""

from __future__ import annotations

from collections.abc import AsyncIterable

from engine.openai.logprobs import merge
from engine.openai.response import ChatCompletionChunk, ChatCompletionResponse, ResponseChoice, ResponseMessage


async def fold(chunks: AsyncIterable[ChatCompletionChunk]) -> ChatCompletionResponse:
    choices: dict[int, ResponseChoice] = {}
    head: ChatCompletionChunk | None = None
    final: ChatCompletionChunk | None = None
    async for chunk in chunks:
        head = head or chunk
        if not chunk.choices:
            final = chunk
            continue
        for c in chunk.choices:
            choice = choices.setdefault(c.index, ResponseChoice(index=c.index, message=ResponseMessage()))
            msg = choice.message
            if c.delta.content:
                msg.content += c.delta.content
            if c.delta.reasoning_content is not None:
                msg.reasoning_content = (msg.reasoning_content or "") + c.delta.reasoning_content
            if c.delta.tool_calls:
                msg.tool_calls.extend(c.delta.tool_calls)
            choice.logprobs = merge(choice.logprobs, c.logprobs)
            if c.finish_reason is not None:
                choice.finish_reason, choice.stop_reason = c.finish_reason, c.stop_reason
    assert head is not None and final is not None and final.usage is not None, "a stream always ends with usage"
    return ChatCompletionResponse(
        id=head.id,
        created=head.created,
        model=head.model,
        choices=[choices[i] for i in sorted(choices)],
        usage=final.usage,
        prefill_time=final.prefill_time,
        decode_time_arr=final.decode_time_arr,
    )
