"""Fold a chunk stream into a non-stream response (spec §4): the only way complete() is built.

`ChoiceFold` is the one place a choice's deltas become its text, reasoning, tool calls, logprobs and finish reason:
`fold` builds the API's `ChatCompletionResponse` from it, and the page's reply model (playground/client/reply.py,
`ChoiceView`) extends it with what the page shows besides (timings, timeline, statistics), so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from dataclasses import dataclass, field

from engine.protocol.response import (
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChoiceLogprobs,
    ChunkChoice,
    FunctionCall,
    LogprobEntry,
    ResponseChoice,
    ResponseMessage,
    ToolCallItem,
)


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


@dataclass
class ChoiceFold:
    """One choice's deltas so far."""

    index: int
    content: str = ""
    reasoning: str = ""
    reasoning_part: bool = False  # a reasoning part came at all (the response's reasoning_content is None otherwise)
    tool_calls: list[ToolCallItem] = field(default_factory=list)
    logprobs: list[LogprobEntry] = field(default_factory=list)
    logprobs_part: bool = False  # a chunk carried logprobs at all (the response's logprobs are None otherwise)
    finish_reason: str | None = None
    stop_reason: str | int | None = None

    def add_delta(self, c: ChunkChoice, replaces: bool = False) -> None:
        """One chunk of this choice; `replaces`: the moderation hook's fallback reply instead of what it said so far."""
        d = c.delta
        self.content = (d.content or "") if replaces else self.content + (d.content or "")
        if d.reasoning_content is not None:
            self.reasoning_part = True
            self.reasoning += d.reasoning_content
        for call in d.tool_calls or []:  # streamed calls arrive as id + name, then argument fragments
            merge_tool_call(self.tool_calls, call)
        if c.logprobs is not None:
            self.logprobs_part = True
            self.logprobs += c.logprobs.content
        if c.finish_reason is not None:
            self.finish_reason, self.stop_reason = c.finish_reason, c.stop_reason

    def response_choice(self) -> ResponseChoice:
        message = ResponseMessage(
            content=self.content,
            reasoning_content=self.reasoning if self.reasoning_part else None,
            tool_calls=self.tool_calls,
        )
        return ResponseChoice(
            index=self.index,
            message=message,
            logprobs=ChoiceLogprobs(content=list(self.logprobs)) if self.logprobs_part else None,
            finish_reason=self.finish_reason,
            stop_reason=self.stop_reason,
        )


async def fold(chunks: AsyncIterable[ChatCompletionChunk]) -> ChatCompletionResponse:
    choices: dict[int, ChoiceFold] = {}
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
            choices.setdefault(c.index, ChoiceFold(c.index)).add_delta(c, chunk.replaces)
    assert head is not None and final is not None and final.usage is not None, "a stream always ends with usage"
    return ChatCompletionResponse(
        id=head.id,
        created=head.created,
        model=head.model,
        choices=[choices[i].response_choice() for i in sorted(choices)],
        usage=final.usage,
        prefill_time=final.prefill_time,
        decode_time_arr=final.decode_time_arr,
        transcription=transcription,
        media=media,
        moderation_result=final.moderation_result,
        prompt_logprobs=prompt_logprobs,
    )
