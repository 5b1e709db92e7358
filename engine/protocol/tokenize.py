"""`POST /tokenize` and `POST /detokenize` request models (issue 19), in vLLM's shapes.

A tokenize body is either a completion prompt `{model?, prompt, add_special_tokens=true, return_token_strs=false}`
or a chat `{model?, messages, add_generation_prompt=true, continue_final_message=false, add_special_tokens=false,
chat_template?, chat_template_kwargs?, tools?, return_token_strs=false}`; a detokenize body is `{model?, tokens}`.

The chat form's messages, template, template kwargs and tools are validated by the chat request's own model
(`ChatCompletionRequest`), so a message /v1/chat/completions refuses is refused here with the same sentence, and
the prompt is rendered from that request by the chat's own code (engine/serving/tokenize.py).

Extensions, off unless asked for, so the default wire is vLLM's: `tool_choice` (chat's: "none" renders no tools,
a named choice only that tool) and `return_details` (the answer's `details`: the rendered text, each token's
piece and whether it is a special / added token, and the media placeholders' expansions).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints, ValidationError

from engine.protocol.errors import RequestValidationError
from engine.protocol.messages import StrictModel, to_request_error
from engine.protocol.request import ChatCompletionRequest
from engine.protocol.request_parts import INT32_MAX

CHAT_FIELDS = ("messages", "chat_template", "chat_template_kwargs", "tools", "tool_choice")
MAX_DETOKENIZE_TOKENS = 1_048_576


class TokenizeCompletionRequest(StrictModel):
    model: Annotated[str, StringConstraints(min_length=1)] | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool = False
    return_details: bool = False  # extension


class TokenizeChatRequest(StrictModel):
    """The chat form's own flags; `chat` is the chat request its messages, template and tools make."""

    model: Annotated[str, StringConstraints(min_length=1)] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    return_token_strs: bool = False
    return_details: bool = False  # extension
    chat: ChatCompletionRequest = Field(exclude=True)


class DetokenizeRequest(StrictModel):
    model: Annotated[str, StringConstraints(min_length=1)] | None = None
    tokens: Annotated[list[int], Field(max_length=MAX_DETOKENIZE_TOKENS)]


TokenizeRequest = TokenizeCompletionRequest | TokenizeChatRequest


def _validate(model: Any, data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data, strict=True, context={"route": "v1"})
    except ValidationError as exc:
        raise to_request_error(exc) from None


def _object(obj: object) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise RequestValidationError("Request body must be a JSON object.")
    return {k: v for k, v in obj.items() if v is not None}  # null = absent (§2.1.2)


def parse_tokenize_request(obj: object) -> TokenizeRequest:
    """Validate a decoded JSON value as one of the two forms; RequestValidationError in the project's words."""
    data = _object(obj)
    if "prompt" in data and "messages" in data:
        raise RequestValidationError("Send either 'prompt' or 'messages', not both.")
    if "messages" not in data:
        if "prompt" not in data:
            raise RequestValidationError("Field 'prompt' or 'messages' is required.", missing=True)
        return _validate(TokenizeCompletionRequest, {k: v for k, v in data.items() if k not in CHAT_FIELDS})
    flags = {k: v for k, v in data.items() if k not in CHAT_FIELDS}
    chat = _validate(ChatCompletionRequest, {k: data[k] for k in ("model", *CHAT_FIELDS) if k in data})
    req: TokenizeChatRequest = _validate(TokenizeChatRequest, {**flags, "chat": chat})
    if req.add_generation_prompt and req.continue_final_message:
        raise RequestValidationError("Parameters add_generation_prompt and continue_final_message cannot both be true.")
    if req.continue_final_message:
        final = req.chat.messages[-1]
        if final.role != "assistant" or not isinstance(final.content, str) or not final.content:
            raise RequestValidationError(
                "Parameter continue_final_message needs a final assistant message with text content."
            )
    return req


def parse_detokenize_request(obj: object) -> DetokenizeRequest:
    data = _object(obj)
    if "tokens" not in data:
        raise RequestValidationError("Field 'tokens' is required.", missing=True)
    req: DetokenizeRequest = _validate(DetokenizeRequest, data)
    return req


def check_token_ids(tokens: list[int], vocab: int) -> None:
    """Every id names a token of the vocabulary: [0, vocab)."""
    for i, token in enumerate(tokens):
        if not 0 <= token < min(vocab, INT32_MAX + 1):
            shown = token if abs(token) < 10**20 else "a very large integer"
            raise RequestValidationError(f"tokens[{i}] must be in [0, {vocab}), got {shown}.")
