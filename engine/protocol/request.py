"""The chat-completion request model and its validation (spec §2.1-§2.4, §6.2).

`parse_chat_request` validates a decoded JSON value and raises `RequestValidationError` with a MindIE-style message
("Parameter temperature must be in [0.0, 2.0], got 2.5."). Only rules that need no server configuration live
here; the server adds `model` matching, `max_n`, `max_new_tokens`, token and byte limits, Pangu strict narrowing,
chat-template path handling and media decoding.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import (
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from engine.protocol.errors import RequestValidationError
from engine.protocol.messages import (
    MEDIA_MODALITY,
    AudioURLPart,
    ContentPart,
    ImageURL,
    ImageURLPart,
    InputAudio,
    InputAudioPart,
    MediaURL,
    Message,
    StrictModel,
    TextPart,
    ToolCall,
    VideoURLPart,
    fail,
    show,
    to_request_error,
)
from engine.protocol.request_parts import (
    INT32_MAX,
    MAX_CHAT_TEMPLATE_BYTES,
    RESERVED_TEMPLATE_KWARGS,
    ChoiceField,
    JsonSchemaField,
    ModerationConfig,
    PatternField,
    ResponseFormat,
    Route,
    StreamOptions,
    StructuredOutputs,
    _range,
    check_logit_bias,
    check_media_limits,
    check_structured,
)
from engine.protocol.tools import (
    MAX_TOOLS,
    MAX_TOOLS_DEPTH,
    FunctionDefinition,
    NamedToolChoice,
    Tool,
    ToolChoice,
    json_depth,
)

__all__ = [
    "AudioURLPart",
    "ChatCompletionRequest",
    "ContentPart",
    "FunctionDefinition",
    "ImageURL",
    "ImageURLPart",
    "InputAudio",
    "InputAudioPart",
    "MediaURL",
    "Message",
    "ModerationConfig",
    "NamedToolChoice",
    "ResponseFormat",
    "Route",
    "StreamOptions",
    "StructuredOutputs",
    "TextPart",
    "Tool",
    "ToolCall",
    "VideoURLPart",
    "json_depth",
    "parse_chat_request",
]


class ChatCompletionRequest(StrictModel):
    model: Annotated[str, StringConstraints(min_length=1)] | None = None
    messages: Annotated[list[Message], Field(min_length=1)]
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: Annotated[float, _range("[-2.0, 2.0]")] | None = None
    frequency_penalty: Annotated[float, _range("[-2.0, 2.0]")] | None = None
    repetition_penalty: Annotated[float, _range("(0.0, 2.0]")] | None = None
    temperature: Annotated[float, _range("[0.0, 2.0]")] | None = None
    top_p: Annotated[float, _range("(1e-6, 1.0]")] | None = None
    top_k: Annotated[int, _range("[-1, 2147483647]")] | None = None  # -1 and 0 both mean "disabled"
    # Extension (vLLM's): a token survives when its probability is at least min_p times the top token's; 0 = off.
    min_p: Annotated[float, _range("[0.0, 1.0]")] | None = None
    seed: Annotated[int, _range("[0, 18446744073709551615]")] | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    ignore_eos: bool = False
    max_tokens: Annotated[int, _range("[1, 2147483647]")] | None = None
    max_completion_tokens: Annotated[int, _range("[1, 2147483647]")] | None = None
    n: Annotated[int, _range("[1, 8192]")] | None = None
    best_of: Annotated[int, _range("[1, 128]")] | None = None
    use_beam_search: bool = False
    logprobs: bool | None = None
    top_logprobs: Annotated[int, _range("[0, 20]")] | None = None
    # Extension (vLLM's): each prompt token's logprob given the tokens before it, its rank and up to k others;
    # the response's top-level `prompt_logprobs` (engine/serving/logprobs.py prompt_entries).
    prompt_logprobs: Annotated[int, _range("[0, 20]")] | None = None
    # A legacy completion's prompt (engine/serving/completions.py): its token ids as they are, no chat template;
    # the messages then only say what the prompt reads (moderation, the access line). Never from a request body.
    _prompt_ids: list[int] | None = PrivateAttr(default=None)
    chat_template: Annotated[str, StringConstraints(min_length=1)] | None = None
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    response_format: ResponseFormat | None = None
    moderation_config: ModerationConfig | None = None
    enable_search: bool | None = None
    user: str | None = None
    # Extension (llama.cpp's): chunks with `prompt_progress` while the prompt is prefilled; streams only.
    return_progress: bool = False
    # Extensions (vLLM's): render without the assistant turn's opening; with continue_final_message the final
    # assistant message is left open and the reply continues its text (the page's branches from a token).
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    # Extension: each logprobs entry also gets the top candidates after the samplers (penalties, constraints,
    # temperature, top-k, top-p) and the chosen token's logprob among them; needs logprobs and top_logprobs.
    sampler_logprobs: bool = False
    # Extension: speculative decoding by prompt lookup (n-gram drafts, engine/core/speculative.py) on or off for
    # this request, overriding the server's --speculative-ngram; absent = the server's choice. Greedy output is
    # the same either way; the usage then reports `speculative: {drafted, accepted}`.
    speculative: bool | None = None
    # Extension (OpenAI's): token id (a JSON key) -> bias in [-100, 100] added to the logits before the samplers.
    logit_bias: dict[int, float] | None = None
    # Extensions (vLLM's): structured outputs by JSON schema, regex, choice or grammar, and the older guided_* names;
    # one kind per request, response_format included (request_parts.check_structured).
    structured_outputs: StructuredOutputs | None = None
    guided_json: JsonSchemaField | None = None
    guided_regex: PatternField | None = None
    guided_choice: ChoiceField | None = None
    guided_grammar: PatternField | None = None

    @field_validator("logit_bias", mode="before")
    @classmethod
    def _check_logit_bias(cls, value: Any) -> Any:
        return check_logit_bias(value)

    @field_validator("stop", mode="before")
    @classmethod
    def _check_stop(cls, value: Any) -> Any:
        if isinstance(value, str):
            if not 1 <= len(value) <= 1024:
                raise fail(f"must be 1 to 1024 characters long, got {len(value)}.")
            return value
        if not isinstance(value, list):
            raise fail(f"must be a string or an array of strings, got {show(value)}.")
        if len(value) > 1024:
            raise fail(f"must have at most 1024 items, got {len(value)}.")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise fail(f"must be a string, got {show(item)}.", sub=f"[{i}]")
            if not 1 <= len(item) <= 1024:
                raise fail(f"must be 1 to 1024 characters long, got {len(item)}.", sub=f"[{i}]")
        if sum(map(len, value)) > 32768:
            raise fail(f"must have at most 32768 characters in total, got {sum(map(len, value))}.")
        return value or None  # [] equals absent

    @field_validator("chat_template")
    @classmethod
    def _check_template_size(cls, value: str) -> str:
        if len(value) > MAX_CHAT_TEMPLATE_BYTES // 4 and len(value.encode("utf-8")) > MAX_CHAT_TEMPLATE_BYTES:
            raise fail("must be at most 1 MiB.")
        return value

    @field_validator("chat_template_kwargs")
    @classmethod
    def _check_template_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        for key in RESERVED_TEMPLATE_KWARGS:
            if key in kwargs:
                raise fail("is reserved and cannot be set in chat_template_kwargs.", sub=key)
        thinking, budget = kwargs.get("enable_thinking"), kwargs.get("thinking_budget")
        if thinking is not None and not isinstance(thinking, bool):
            raise fail(f"must be a boolean, got {show(thinking)}.", sub="enable_thinking")
        if budget is not None and (type(budget) is not int or not 1 <= budget <= INT32_MAX):
            raise fail(f"must be an integer in [1, 2147483647], got {show(budget)}.", sub="thinking_budget")
        return kwargs

    @field_validator("tools", mode="before")
    @classmethod
    def _check_tools_shape(cls, value: Any) -> Any:
        if isinstance(value, list):
            if len(value) > MAX_TOOLS:
                raise fail(f"must have at most {MAX_TOOLS} tools, got {len(value)}.")
            if json_depth(value) > MAX_TOOLS_DEPTH:
                raise fail(f"must not be nested more than {MAX_TOOLS_DEPTH} levels deep.")
        return value

    @model_validator(mode="after")
    def _cross_field_rules(self) -> ChatCompletionRequest:
        def bad(message: str) -> RequestValidationError:
            return RequestValidationError(message)

        if self.tools is not None and not self.tools:
            self.tools = None  # empty array = absent
        names = [t.function.name for t in self.tools or []]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise bad(f"tools[{i}].function.name duplicates an earlier tool name, got {show(name)}.")
        choice = self.tool_choice
        if isinstance(choice, NamedToolChoice):
            if not names:
                raise bad("Parameter tool_choice names a function but no tools are given.")
            if choice.function.name not in names:
                raise bad(f"tool_choice.function.name must name a tool in tools, got {show(choice.function.name)}.")
        elif choice == "required" and not names:
            raise bad("Parameter tool_choice 'required' needs a non-empty tools array.")
        if self.stream_options is not None and not self.stream:
            raise bad("Parameter stream_options is only allowed when stream is true.")
        if self.return_progress and not self.stream:
            raise bad("Parameter return_progress is only allowed when stream is true.")
        if self.continue_final_message:
            if self.add_generation_prompt:
                raise bad("Parameters add_generation_prompt and continue_final_message cannot both be true.")
            final = self.messages[-1]
            if final.role != "assistant" or not isinstance(final.content, str) or not final.content:
                raise bad("Parameter continue_final_message needs a final assistant message with text content.")
        if self.logprobs is False and self.top_logprobs is not None:
            raise bad("Parameter top_logprobs requires logprobs to be true or absent, got logprobs false.")
        if self.speculative and self.use_beam_search:
            raise bad("Parameter speculative cannot be true with use_beam_search.")
        if self.sampler_logprobs and (self.logprobs is not True or (self.top_logprobs or 0) < 1):
            raise bad("Parameter sampler_logprobs requires logprobs to be true and top_logprobs of at least 1.")

        n, best_of, beam = self.n, self.best_of, self.use_beam_search
        multi = (n or 1) > 1 or (best_of or 1) > 1
        if multi and not beam and self.effective_temperature == 0:
            raise bad("Parameter temperature must be greater than 0 when n or best_of is greater than 1, got 0.")
        if not beam and best_of is not None:  # best_of is not validated against n under beam search
            if not self.stream and best_of < (n or 1):
                raise bad(f"Parameter best_of must be greater than or equal to n, got best_of={best_of}, n={n or 1}.")
            if self.stream and n is None:
                raise bad("Parameter best_of must not be set without n when stream is true.")
            if self.stream and best_of != n:
                raise bad(f"Parameter best_of must equal n when stream is true, got best_of={best_of}, n={n}.")
        if beam and self.stop_list:
            raise bad("Parameter stop is not supported with use_beam_search.")
        if beam and self.sampler_logprobs:  # a beam step ranks the model's own logprobs: no samplers run
            raise bad("Parameter sampler_logprobs is not supported with use_beam_search.")
        if beam and (self.effective_max_tokens or 0) > 128:
            raise bad(
                f"Parameter max_tokens must be at most 128 with use_beam_search, got {self.effective_max_tokens}."
            )
        if self.tools_active:
            for field, active in (
                ("n", (n or 1) > 1),
                ("best_of", (best_of or 1) > 1),
                ("use_beam_search", beam),
                ("logprobs", self.wants_logprobs),
            ):
                if active:
                    raise bad(f"Parameter {field} is not supported when tools are used (tool_choice is not 'none').")
        if self.thinking_budget is not None and self.enable_thinking and (multi or beam):
            raise bad("chat_template_kwargs.thinking_budget cannot be combined with n or best_of > 1 or beam search.")
        check_structured(self)
        check_media_limits(self.messages)
        return self

    # ---- derived values the engine uses -------------------------------------------------------------------
    @property
    def effective_temperature(self) -> float:
        return 1.0 if self.temperature is None else self.temperature

    @property
    def effective_max_tokens(self) -> int | None:
        """`max_completion_tokens` wins over `max_tokens`; None means "server default"."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def effective_n(self) -> int:
        return self.n or 1

    @property
    def effective_best_of(self) -> int:
        """Candidates to sample (`best_of`, default `n`); under beam search the beam width is max(n, best_of)."""
        best_of = self.best_of or self.effective_n
        return max(best_of, self.effective_n) if self.use_beam_search else best_of

    @property
    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def stop_token_id_list(self) -> list[int]:
        """Out-of-range ids dropped silently (MindIE-faithful), duplicates removed, order kept."""
        return list(dict.fromkeys(i for i in self.stop_token_ids or [] if 0 <= i <= INT32_MAX))

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs is True or self.top_logprobs is not None

    @property
    def top_logprobs_count(self) -> int:
        return self.top_logprobs or 0

    @property
    def tools_active(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def enable_thinking(self) -> bool | None:
        """`chat_template_kwargs.enable_thinking`, None when not given (the tokenizer/model default applies)."""
        return self.chat_template_kwargs.get("enable_thinking")

    @property
    def thinking_budget(self) -> int | None:
        return self.chat_template_kwargs.get("thinking_budget")

    @property
    def has_media(self) -> bool:
        return any(m.media_parts() for m in self.messages)

    def text_only_messages(self, media: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
        """Messages as plain dicts for a chat template. Text-only arrays are flattened (§2.4.1); absent assistant
        content becomes "". Tool-call `arguments` that are a JSON object are decoded to a dict (what HF templates
        expect), otherwise kept as the string. A message with parts of a modality in `media` (those the model
        takes) keeps its parts, as `{"type": "text", "text": ...}` and `{"type": "image" | "video" | "audio"}`, so
        the template writes the placeholders. Other media parts → RequestValidationError naming the modality."""
        out = []
        for i, message in enumerate(self.messages):
            parts: list[dict[str, Any]] = []
            for j, part in enumerate(message.content if isinstance(message.content, list) else []):
                if isinstance(part, TextPart):
                    parts.append({"type": "text", "text": part.text})
                    continue
                modality = MEDIA_MODALITY[part.type]
                if modality not in media:
                    raise RequestValidationError(f"messages[{i}].content[{j}]: model does not accept {modality} input.")
                parts.append({"type": modality})
            has_media = any(p["type"] != "text" for p in parts)
            item: dict[str, Any] = {"role": message.role, "content": parts if has_media else message.text}
            for key in ("name", "tool_call_id", "reasoning_content"):
                if getattr(message, key) is not None:
                    item[key] = getattr(message, key)
            if message.tool_calls:
                item["tool_calls"] = [_tool_call_dict(call) for call in message.tool_calls]
            out.append(item)
        return out


def _tool_call_dict(call: ToolCall) -> dict[str, Any]:
    try:
        arguments: Any = json.loads(call.function.arguments)
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        arguments = call.function.arguments
    return {"id": call.id, "type": call.type, "function": {"name": call.function.name, "arguments": arguments}}


def _given(value: Any) -> bool:
    return value is not None and value != [] and value != ""


def parse_chat_request(obj: object, route: Route = "v1") -> ChatCompletionRequest:
    """Validate a decoded JSON value. Raises RequestValidationError with a clear, MindIE-style message."""
    if not isinstance(obj, dict):
        raise RequestValidationError("Request body must be a JSON object.")
    data = {k: v for k, v in obj.items() if v is not None}  # null = absent (§2.1.2)
    if route == "pangu_v1":
        data.pop("model", None)  # the deployment path chooses the model; a value, if sent, is ignored
    elif "model" not in data:
        raise RequestValidationError("Field 'model' is required.", missing=True)
    stream = data.get("stream")
    if route != "v1" and isinstance(stream, str) and stream.lower() in ("true", "false"):
        data["stream"] = stream.lower() == "true"
    no_stop = not (_given(data.get("stop")) or _given(data.get("stop_token_ids")))
    if no_stop and not isinstance(data.get("include_stop_str_in_output"), bool):
        data.pop("include_stop_str_in_output", None)  # ignored, its type unchecked (MindIE-faithful, case 43)
    try:
        return ChatCompletionRequest.model_validate(data, strict=True, context={"route": route})
    except ValidationError as exc:
        raise to_request_error(exc) from None
