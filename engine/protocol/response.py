"""Response and chunk models. The service yields ChatCompletionChunk objects; a non-stream response is their fold.

The chunks are route-neutral: `wire.py` turns them into the /v1 (and later Pangu) JSON shapes. Fields marked
`exclude=True` are engine statistics the UI and the fold read but the wire format places elsewhere or omits.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class LogprobEntry(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)
    # Extension (`sampler_logprobs`): the top candidates after the samplers and the chosen token's logprob among
    # them (null when it was forced, not sampled). A request that did not ask has neither key in its JSON.
    sampler_logprob: float | None = None
    sampler_top_logprobs: list[TopLogprob] | None = None

    @model_serializer(mode="wrap")
    def _asked_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        if self.sampler_top_logprobs is None:
            out.pop("sampler_logprob", None)
            out.pop("sampler_top_logprobs", None)
        return out


class ChoiceLogprobs(BaseModel):
    content: list[LogprobEntry] = Field(default_factory=list)


class FunctionCall(BaseModel):
    name: str | None = None
    arguments: str | None = None


class ToolCallItem(BaseModel):
    index: int | None = None  # streaming deltas only
    id: str | None = None
    type: str | None = None
    function: FunctionCall


class Delta(BaseModel):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallItem] | None = None


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class Usage(BaseModel):
    prompt_tokens: int
    prompt_tokens_details: PromptTokensDetails = Field(default_factory=PromptTokensDetails)
    completion_tokens: int = 0
    completion_tokens_details: CompletionTokensDetails | None = None
    total_tokens: int = 0
    batch_size: list[int] = Field(default_factory=list)
    queue_wait_time: list[int] = Field(default_factory=list)  # microseconds
    # Extension: speculative decoding's {drafted, accepted} tokens, when it ran for the request (else absent).
    speculative: dict[str, int] | None = None


class TokenTimeline(BaseModel):
    """Engine facts about the tokens a chunk carries: the UI's live timeline and the fold's timing fields."""

    token_ids: list[int] = Field(default_factory=list)
    token_times_ms: list[float] = Field(default_factory=list)  # since the request was accepted
    batch_sizes: list[int] = Field(default_factory=list)
    queue_waits_us: list[int] = Field(default_factory=list)
    # On the first chunk: accepted -> handed to the engine (validation, media loading or transcription, template,
    # tokenisation). The engine's queue wait starts there; the first token's time minus both is the prefill.
    prepare_ms: float | None = None
    # The scheduler x-ray (engine/core/step_log.py): each token's StepRecord (none when the engine keeps no step
    # log), and the request's own short id among each record's `requests`. In-process only, never serialised.
    steps: list[Any] = Field(default_factory=list, exclude=True)
    short_id: str | None = Field(default=None, exclude=True)
    # Speculative decoding: which of these tokens (indices into token_ids) were accepted drafts. In-process only.
    accepted: list[int] = Field(default_factory=list, exclude=True)


class PromptProgressInfo(BaseModel):
    """Extension (llama.cpp's `return_progress`): how far the prompt is prefilled. `processed` counts the tokens
    ready, the `cache`d ones among them; `time_ms` since the request was accepted."""

    total: int
    cache: int
    processed: int
    time_ms: float


class ChunkChoice(BaseModel):
    index: int
    delta: Delta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: str = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    timeline: TokenTimeline | None = Field(default=None, exclude=True)
    prefill_time: int | None = Field(default=None, exclude=True)  # closing chunks: ms to the first token
    decode_time_arr: list[int] | None = Field(default=None, exclude=True)  # closing chunks: ms per later token
    transcription: list[dict[str, Any]] | None = Field(default=None, exclude=True)  # first chunk: audio → text
    media: list[dict[str, Any]] | None = Field(default=None, exclude=True)  # first chunk: parts the model took
    # A moderation interception: this chunk's content replaces what its choice said so far (the fold's view; the
    # wire sends the chunk as it is). On the last chunk: the request's `moderation_result`, for a non-stream body.
    replaces: bool = Field(default=False, exclude=True)
    moderation_result: dict[str, Any] | None = Field(default=None, exclude=True)
    prompt_progress: PromptProgressInfo | None = Field(default=None, exclude=True)  # a chunk with no choices
    # `prompt_logprobs` (vLLM's), as the wire sends it: on the first chunk that carries tokens, once a request.
    prompt_logprobs: list[Any] | None = Field(default=None, exclude=True)


class ResponseMessage(BaseModel):
    role: str = "assistant"
    content: str = ""
    reasoning_content: str | None = None
    tool_calls: list[ToolCallItem] = Field(default_factory=list)


class ResponseChoice(BaseModel):
    index: int
    message: ResponseMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: str | int | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[ResponseChoice]
    usage: Usage
    prompt_logprobs: Any = None
    prefill_time: int | None = None
    decode_time_arr: list[int] | None = None
    transcription: list[dict[str, Any]] | None = None  # audio parts transcribed into the prompt (spec §2.4.1)
    media: list[dict[str, Any]] | None = None  # media parts a multimodal model took: type, tokens, frames sampled
    moderation_result: dict[str, Any] | None = None  # with a moderation hook and `show_result` (spec §2.6)
