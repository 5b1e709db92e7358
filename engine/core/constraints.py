"""Constrained decoding: per-sequence token masks that keep the output inside a JSON schema or a Hermes tool call.

Backed by llguidance (Rust, no dependencies; it builds the lexer lazily, so a schema compiles in about a
millisecond and a mask costs tens of microseconds on CPU). One ConstraintFactory per loaded tokenizer, built
once; one TokenConstraint per running sequence, advanced by the engine thread:

    mask = c.allowed(vocab_size)        # before sampling the row
    apply_mask(logits_row, mask)
    c.accept(token)                     # after sampling it
    if c.finished(): ...                # only EOS may follow: end the sequence (even when ignore_eos is set)

When the grammar is complete the mask allows only the EOS token(s), so a plain engine ends the sequence by
sampling EOS; accept(EOS) then succeeds and finished() stays true.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, Literal, Protocol

import numpy as np
import torch

try:
    import llguidance
    import llguidance.hf
except ImportError:  # no wheel for this host: the caller must then reject json_object/json_schema, not ignore them
    llguidance = None  # type: ignore[assignment]

# Whitespace between JSON tokens, bounded: with unbounded whitespace small models can fall into emitting
# newlines until max_tokens. 16 still allows pretty-printed output a few levels deep.
JSON_OPTIONS: Any = {"whitespace_pattern": r"[\x20\x0A\x0D\x09]{0,16}"}  # llguidance's JsonCompileOptions
CACHE_SIZE = 64  # compiled grammars kept per tokenizer
TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
NUMPY_FLOATS = (torch.float32, torch.float64, torch.float16)


class TokenConstraint(Protocol):
    def allowed(self, vocab_size: int) -> torch.Tensor | None: ...

    def accept(self, token_id: int) -> bool: ...

    def finished(self) -> bool: ...

    def fork(self) -> TokenConstraint: ...


def apply_mask(logits_row: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Set the logits of disallowed tokens to -inf, in place (also any logits column beyond the mask)."""
    if mask is None:
        return logits_row
    n = min(logits_row.shape[-1], mask.shape[-1])
    logits_row[n:] = float("-inf")
    if logits_row.device.type == "cpu" and logits_row.dtype in NUMPY_FLOATS and not logits_row.requires_grad:
        # numpy runs this on the calling thread: torch's masked_fill_ wakes the OpenMP pool for a vocabulary-sized
        # row, which costs more than the fill itself (measured 2-10x on 2 busy cores).
        np.copyto(logits_row[:n].numpy(), -np.inf, where=~mask[:n].numpy())
    else:
        logits_row[:n].masked_fill_(~mask[:n].to(logits_row.device), float("-inf"))
    return logits_row


class GrammarConstraint:
    """One sequence's position in a compiled grammar (an llguidance matcher)."""

    def __init__(self, matcher: Any, n_vocab: int, eos_ids: tuple[int, ...]) -> None:
        self._m = matcher
        self._n_vocab = n_vocab
        self._eos = eos_ids

    def allowed(self, vocab_size: int) -> torch.Tensor:
        # One bit per token, least significant first; in an error state llguidance allows only EOS.
        bits = np.frombuffer(self._m.compute_bitmask(), dtype=np.uint8)
        mask = np.unpackbits(bits, bitorder="little")[: min(vocab_size, self._n_vocab)]
        out = torch.from_numpy(mask.view(np.bool_))
        if vocab_size > out.shape[0]:
            out = torch.cat([out, torch.zeros(vocab_size - out.shape[0], dtype=torch.bool)])
        return out

    def accept(self, token_id: int) -> bool:
        # Checked first so a refused token leaves the state usable (a failed consume poisons the matcher for good,
        # and so does validating an id outside the vocabulary). Once stopped, the matcher validates nothing, not even
        # the EOS its own mask allows: accept that here.
        if self._m.is_stopped():
            return token_id in self._eos and not self._m.is_error()
        if not 0 <= token_id < self._n_vocab or self._m.validate_tokens([token_id]) != 1:
            return False
        return self._m.consume_token(token_id)

    def finished(self) -> bool:
        return self._m.is_stopped()

    def fork(self) -> GrammarConstraint:
        return GrammarConstraint(self._m.deep_copy(), self._n_vocab, self._eos)

    @property
    def error(self) -> str:
        """Why the matcher gave up (empty when it has not): e.g. a grammar too complex for the parser's limits."""
        return self._m.get_error()


def short_error(message: str, limit: int = 200) -> str:
    first = " ".join(message.split())
    return first if len(first) <= limit else first[: limit - 1] + "…"


class ConstraintFactory:
    """Builds constraints for one tokenizer. Thread-safe: requests may compile in any thread."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_ids: Iterable[int] | None = None) -> None:
        """vocab_size is the width of the model's logits (may exceed the tokenizer's); eos_ids the ids that end a
        sequence (default: the tokenizer's EOS). Raises RuntimeError when constrained decoding is impossible here."""
        if llguidance is None:
            raise RuntimeError("constrained decoding needs the llguidance package, which is not installed")
        eos = sorted(set(eos_ids)) if eos_ids else None
        try:
            self._tok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size, eos_token=eos)
        except (ValueError, TypeError) as e:  # slow (non-Rust) tokenizers are not supported
            raise RuntimeError(f"constrained decoding is not available for this tokenizer: {e}") from e
        self._hf = tokenizer
        self.vocab_size = vocab_size
        self.eos_ids = tuple(self._tok.eos_tokens)
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def _matcher(self, key: str, grammar: Callable[[], str]) -> GrammarConstraint:
        with self._lock:
            template = self._cache.get(key)
            if template is not None:
                self._cache.move_to_end(key)
                return GrammarConstraint(template.deep_copy(), self._tok.vocab_size, self.eos_ids)
        try:
            text = grammar()
        except ValueError as e:
            raise ValueError(short_error(str(e))) from None
        template = llguidance.LLMatcher(self._tok, text, log_level=0)  # never raises: errors are a state
        if template.is_error():
            raise ValueError(short_error(template.get_error()))
        with self._lock:
            self._cache[key] = template
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
            return GrammarConstraint(template.deep_copy(), self._tok.vocab_size, self.eos_ids)

    def json_object(self) -> GrammarConstraint:
        return self.json_schema({"type": "object"})

    def json_schema(self, schema: dict) -> GrammarConstraint:
        """Raises ValueError (short message) for a schema the backend cannot enforce."""
        if not isinstance(schema, dict):
            raise ValueError("cannot enforce this JSON schema: it must be a JSON object")
        # Key order is kept: properties are generated in the order the schema lists them.
        key = "schema:" + json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
        try:
            return self._matcher(
                key, lambda: llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
            )
        except ValueError as e:
            raise ValueError(f"cannot enforce this JSON schema: {e}") from None

    def regex(self, pattern: str) -> GrammarConstraint:
        """Text that matches the regex fully (Rust regex syntax). Raises ValueError with the compiler's message."""
        return self._grammar("regex", pattern, "regex")

    def choice(self, choices: list[str]) -> GrammarConstraint:
        """Exactly one of the strings."""
        return self._grammar("choice", json.dumps(choices, ensure_ascii=False), "choice list")

    def grammar(self, text: str) -> GrammarConstraint:
        """A Lark grammar (llguidance's dialect), or a GBNF one, which llguidance converts to Lark."""
        return self._grammar("grammar", text, "grammar")

    def _grammar(self, kind: Literal["regex", "choice", "grammar"], text: str, what: str) -> GrammarConstraint:
        try:
            return self._matcher(f"{kind}:{text}", partial(llguidance.grammar_from, kind, text))
        except ValueError as e:
            raise ValueError(f"cannot compile this {what}: {e}") from None

    def tool_call(self, tools: list[dict], named: str | None) -> GrammarConstraint | None:
        """Hermes `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>` blocks: exactly one call of `named`,
        or (named None, tool_choice "required") one or more calls of any tool. Arguments follow each tool's
        `parameters`; if those cannot be compiled, any JSON object. None when no constraint can be built."""
        fns = [t.get("function", t) for t in tools if isinstance(t, dict)]
        fns = [f for f in fns if isinstance(f, dict) and isinstance(f.get("name"), str)]
        if named is not None:
            fns = [f for f in fns if f["name"] == named]
        if not fns:
            return None
        for strict_args in (True, False):
            grammar = self._tool_grammar(fns, named is None, strict_args)
            try:
                return self._matcher("tools:" + grammar, partial(llguidance.LLMatcher.grammar_from_lark, grammar))
            except ValueError:
                continue
        return None

    def _tool_grammar(self, fns: list[dict], many: bool, strict_args: bool) -> str:
        def call(f: dict) -> dict:
            params = f.get("parameters") if strict_args else None
            return {
                "type": "object",
                "properties": {"name": {"const": f["name"]}, "arguments": params or {"type": "object"}},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }

        schema = call(fns[0]) if len(fns) == 1 else {"anyOf": [call(f) for f in fns]}
        schema = {**schema, "x-guidance": JSON_OPTIONS}
        block = f'{self._tag(TOOL_OPEN)} "\\n" call "\\n" {self._tag(TOOL_CLOSE)}'
        start = 'block ("\\n" block)*' if many else "block"
        return f"start: {start}\nblock: {block}\ncall: %json {json.dumps(schema, ensure_ascii=False)}\n"

    def _tag(self, text: str) -> str:
        """A tag as a grammar item: a special token must be named by id (its text never matches), else a literal."""
        ids = self._hf.encode(text, add_special_tokens=False)
        if len(ids) == 1 and self._tok.is_special_token(ids[0]):
            return f"<[{ids[0]}]>"
        return json.dumps(text)
