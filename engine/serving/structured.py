"""A request's structured output (response_format, structured_outputs, guided_*) and forcing tool_choice -> the token constraint the engine decodes under.

Spec §2.2 `response_format`: json_object / json_schema MUST be enforced by constrained decoding or refused, never
ignored. Spec §8.3: tool_choice `required` or a named function SHOULD be constrained to well-formed calls, and is
still served unconstrained where no backend exists. The backend (llguidance) is built once per tokenizer, lazily:
a server that never sees a structured request never pays for it.
"""

from __future__ import annotations

import threading
from typing import Any

from engine.protocol.errors import RequestValidationError
from engine.protocol.request import ChatCompletionRequest
from engine.protocol.request_parts import check_structured, structured_kinds
from engine.protocol.tools import NamedToolChoice


class ConstraintBuilder:
    def __init__(self, tokenizer: Any, vocab_size: int, eos_ids: set[int] | frozenset[int]) -> None:
        self._args = (tokenizer, vocab_size, tuple(eos_ids))
        self._factory: Any = None
        self._unavailable = ""  # why no backend could be built for this model, once tried
        self._lock = threading.Lock()

    def _get(self) -> Any:
        with self._lock:
            if self._factory is None and not self._unavailable:
                from engine.core.constraints import ConstraintFactory

                tokenizer, vocab, eos = self._args
                try:
                    self._factory = ConstraintFactory(tokenizer, vocab, eos)
                except RuntimeError as exc:
                    self._unavailable = str(exc)[:200]
            return self._factory

    def for_request(self, req: ChatCompletionRequest) -> Any:
        """The constraint for a request (None = decode freely); RequestValidationError when it cannot be met.
        Structured outputs come from response_format, vLLM's structured_outputs or its guided_* fields (one kind
        per request, checked by the request model); reads them by name, so a completions request shares this."""
        kinds = structured_kinds(req)
        if kinds:
            path, kind, value = kinds[0]
            check_structured(req)  # one kind, no beam search: the request model checks it too
            factory = self._get()
            if factory is None:
                what = f"response_format.type {kind!r}" if path == "response_format" else path
                raise RequestValidationError(
                    f"Parameter {what} is not supported for this model (no constrained decoding)"
                    + ("; only 'text' is." if path == "response_format" else ".")
                )
            if kind == "json_object":
                return factory.json_object()
            if path == "response_format":
                path = "response_format.json_schema.schema"
            try:
                if kind in ("json", "json_schema"):
                    return factory.json_schema(value)
                return getattr(factory, kind)(value)  # regex, choice, grammar
            except ValueError as exc:
                raise RequestValidationError(f"Parameter {path}: {exc}") from None
        forcing = req.tool_choice == "required" or isinstance(req.tool_choice, NamedToolChoice)
        if req.tools_active and forcing:
            factory = self._get()
            if factory is None:
                return None  # served unconstrained: the model may answer without a call (spec §8.3)
            named = req.tool_choice.function.name if isinstance(req.tool_choice, NamedToolChoice) else None
            return factory.tool_call([t.model_dump(exclude_none=True) for t in req.tools or []], named)
        return None
