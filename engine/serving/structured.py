"""A request's response_format and forcing tool_choice -> the token constraint the engine decodes under.

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
        """The constraint for a request (None = decode freely); RequestValidationError when it cannot be met."""
        rf = req.response_format
        if rf is not None and rf.type != "text":
            if req.use_beam_search:
                raise RequestValidationError(f"Parameter response_format.type {rf.type!r} cannot be combined "
                                             "with use_beam_search.")  # fmt: skip
            factory = self._get()
            if factory is None:
                raise RequestValidationError(
                    f"Parameter response_format.type {rf.type!r} is not supported for this model (no constrained "
                    "decoding); only 'text' is."
                )
            if rf.type == "json_object":
                return factory.json_object()
            try:
                assert rf.json_schema is not None  # the request model requires it with type json_schema
                return factory.json_schema(rf.json_schema.schema_)
            except ValueError as exc:
                raise RequestValidationError(f"Parameter response_format.json_schema.schema: {exc}") from None
        forcing = req.tool_choice == "required" or isinstance(req.tool_choice, NamedToolChoice)
        if req.tools_active and forcing:
            factory = self._get()
            if factory is None:
                return None  # served unconstrained: the model may answer without a call (spec §8.3)
            named = req.tool_choice.function.name if isinstance(req.tool_choice, NamedToolChoice) else None
            return factory.tool_call([t.model_dump(exclude_none=True) for t in req.tools or []], named)
        return None
