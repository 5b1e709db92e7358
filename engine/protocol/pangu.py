"""Pangu-route narrowing of the shared request model (spec §2.5, §5.3).

The Pangu routes parse with the same `parse_chat_request` as /v1; this adds only the rules the Pangu contract
narrows. `pangu_strict_limits` switches the narrower ranges; the stream `n` = 1 rule holds either way because
a Pangu stream carries one choice by construction (§5.3).
"""

from __future__ import annotations

from typing import Any

from engine.protocol.errors import RequestValidationError
from engine.protocol.messages import TextPart, show
from engine.protocol.request import ChatCompletionRequest

MAX_MESSAGES = 20


def narrow(req: ChatCompletionRequest, raw: dict[str, Any], *, strict: bool, context_length: int) -> None:
    """Raise RequestValidationError (with the Pangu code where one exists) for what Pangu refuses."""
    n = req.effective_n
    if req.stream and n != 1:
        raise RequestValidationError(f"Parameter n must be 1 when stream is true, got {n}.", code="PANGU.3321")
    if not strict:
        return
    if not req.stream and n not in (1, 2):
        raise RequestValidationError(f"Parameter n must be 1 or 2, got {n}.", code="PANGU.3320")
    if len(req.messages) > MAX_MESSAGES:
        raise RequestValidationError(
            f"Parameter messages must have at most {MAX_MESSAGES} items, got {len(req.messages)}."
        )
    for i, message in enumerate(req.messages):
        if message.role == "tool" and not req.tools:
            raise RequestValidationError(f"messages[{i}].role may be 'tool' only when tools are given.")
        for j, part in enumerate(message.content if isinstance(message.content, list) else []):
            if not isinstance(part, TextPart):
                raise RequestValidationError(f"messages[{i}].content[{j}] must be a text part, got {part.type}.")
    for name in ("temperature", "top_p"):
        value = getattr(req, name)
        if value is not None and not 0 < value <= 1:
            raise RequestValidationError(f"Parameter {name} must be in (0, 1], got {show(value)}.")
    max_tokens = req.effective_max_tokens
    if max_tokens is not None and max_tokens > context_length:
        name = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
        raise RequestValidationError(
            f"Parameter {name} must be at most the model maximum {context_length}, got {max_tokens}."
        )
    if raw.get("stop") == []:
        raise RequestValidationError("Parameter stop must be a non-empty string or a non-empty array, got [].")
