"""Chat-template rendering in a sandboxed, immutable Jinja environment with hard limits (spec §2.7).

transformers renders templates in the same kind of sandbox, but its environment is private and unbounded in
time and output, so we build our own with the same helpers templates expect (`raise_exception`, `tojson`,
`strftime_now`, loop controls) and add: `range()` capped at 100,000 items, string / list repetition capped,
output capped, and a 5 s wall-clock budget checked inside every loop iteration and output chunk.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.protocol.errors import RequestValidationError

MAX_RANGE = 100_000
RENDER_SECONDS = 5.0
MAX_TEMPLATE_BYTES = 1 << 20
_RELATIVE_NAME = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*\.jinja$")


class _Budget:
    def __init__(self, max_chars: int) -> None:
        self.deadline = time.monotonic() + RENDER_SECONDS
        self.max_chars = max_chars

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise jinja2.TemplateError("chat template rendering exceeded its time budget")


class _Env(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset(["*", "**"])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**":
            if isinstance(right, int) and right > 64:
                raise jinja2.TemplateError("chat template exponent too large")
            return left**right
        if isinstance(left, (str, list, tuple)) and isinstance(right, int) or isinstance(right, (str, list, tuple)):
            seq, times = (left, right) if isinstance(left, (str, list, tuple)) else (right, left)
            if isinstance(times, int) and isinstance(seq, (str, list, tuple)) and len(seq) * times > MAX_RANGE * 10:
                raise jinja2.TemplateError("chat template repetition too large")
        return left * right


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _no_callables(value: Any) -> Any:
    return "" if callable(value) else value


@lru_cache(maxsize=64)
def _compile(source: str) -> jinja2.Template:
    # finalize: a callable printed by mistake (or on purpose: {{ raise_exception }}) renders as nothing, never as a
    # repr carrying a memory address. lipsum is Jinja's text generator, of no use to a chat template.
    env = _Env(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"], finalize=_no_callables)
    env.globals.pop("lipsum", None)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


def _bounded_range(budget: _Budget):
    def bounded(*args: int):
        r = range(*args)
        if len(r) > MAX_RANGE:
            raise jinja2.TemplateError(f"range() is limited to {MAX_RANGE} items")
        for i in r:
            budget.tick()
            yield i

    return bounded


def render(source: str, variables: dict[str, Any], max_chars: int) -> str:
    """Render `source` with `variables`; any template problem becomes a RequestValidationError."""
    budget = _Budget(max_chars)
    try:
        template = _compile(source)
        parts, size = [], 0
        for piece in template.generate(**variables, range=_bounded_range(budget)):
            budget.tick()
            size += len(piece)
            if size > max_chars:
                raise jinja2.TemplateError("rendered chat template exceeds the request size limit")
            parts.append(piece)
        return "".join(parts)
    except jinja2.TemplateError as exc:
        raise RequestValidationError(f"chat_template error: {_safe(exc)}") from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError, OverflowError) as exc:
        raise RequestValidationError(f"chat_template error: {type(exc).__name__}") from None


_QUOTED = re.compile(r"'([^'\n]{65,})'")


def _safe(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    # Spec §6.5 echoes input values only up to 64 characters: Jinja quotes the offending piece of the template
    # ("'<name>' is undefined"), which comes from the request, so quoted fragments are cut to 64; the 200 cap is
    # for the template's own message (raise_exception text, which §2.7 says the error carries).
    text = _QUOTED.sub(lambda m: f"'{m.group(1)[:64]}...'", text)
    return text[:200]


def _looks_like_path(value: str) -> bool:
    if "\n" in value:
        return False
    return value.startswith(("/", "./", "../", "~", "file:")) or (value.endswith(".jinja") and "{" not in value)


def resolve_source(value: str, allow_path: bool, directory: str) -> str:
    """An inline template, or (when enabled) a file confined to `directory`; never reveals what exists."""
    if allow_path and directory and _RELATIVE_NAME.match(value) and ".." not in value.split("/"):
        root = Path(directory).resolve()
        try:
            path = (root / value).resolve(strict=True)
            st = path.stat()
            ok = path.is_relative_to(root) and path.is_file() and st.st_size <= MAX_TEMPLATE_BYTES
            ok = ok and not st.st_mode & 0o022
            if ok:
                return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            pass
        raise RequestValidationError("chat_template file is not allowed or not readable.")
    if _looks_like_path(value):
        raise RequestValidationError("chat_template paths are not allowed.")
    return value
