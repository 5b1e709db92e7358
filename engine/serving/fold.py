"""Fold a chunk stream into a non-stream response (spec §4): the only way complete() is built."""

from __future__ import annotations

from collections.abc import AsyncIterable

from engine.protocol.response import (
    ChatCompletionChunk,
    ChatCompletionResponse,
    FunctionCall,
    ResponseChoice,
    ResponseMessage,
    ToolCallItem,
)
from engine.serving.logprobs import merge


def merge_tool_call(calls: list[ToolCallItem], part: ToolCallItem) -> None:
    """Add one tool-call delta to the calls so far: a new index starts a call, the same index extends it."""
    if not calls or calls[-1].index != part.index:
        calls.append(
            ToolCallItem(
                index=part.index,
                id=part.id,
                type=part.type or "function",
                function=FunctionCall(name=part.function.name, arguments=""),
            )
        )
    call = calls[-1]
    call.id = call.id or part.id
    call.function.name = call.function.name or part.function.name
    call.function.arguments = (call.function.arguments or "") + (part.function.arguments or "")


async def fold(chunks: AsyncIterable[ChatCompletionChunk]) -> ChatCompletionResponse:
    choices: dict[int, ResponseChoice] = {}
    head: ChatCompletionChunk | None = None
    final: ChatCompletionChunk | None = None
    transcription = media = prompt_logprobs = None
    async for chunk in chunks:
        head = head or chunk
        prompt_logprobs = prompt_logprobs or chunk.prompt_logprobs
        transcription = transcription or chunk.transcription
        media = media or chunk.media
        if chunk.prompt_progress is not None:
            continue
        if not chunk.choices:
            final = chunk
            continue
        for c in chunk.choices:
            choice = choices.setdefault(c.index, ResponseChoice(index=c.index, message=ResponseMessage()))
            msg = choice.message
            if chunk.replaces:  # the moderation hook's fallback reply instead of what the choice said so far
                msg.content = c.delta.content or ""
            elif c.delta.content:
                msg.content += c.delta.content
            if c.delta.reasoning_content is not None:
                msg.reasoning_content = (msg.reasoning_content or "") + c.delta.reasoning_content
            for call in c.delta.tool_calls or []:  # streamed calls arrive as id + name, then argument fragments
                merge_tool_call(msg.tool_calls, call)
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
        transcription=transcription,
        media=media,
        moderation_result=final.moderation_result,
        prompt_logprobs=prompt_logprobs,
    )
