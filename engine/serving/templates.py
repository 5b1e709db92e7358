"""Chat templates (spec §2.7): where a template comes from (inline, or a file confined to one directory), and its
rendering in the sandbox.

Rendering happens in template_sandbox.py's worker processes: a sandboxed, immutable Jinja environment with the
helpers templates expect (`raise_exception`, `tojson`, `strftime_now`, loop controls), `range()` capped at 100,000
items, repetition and output capped, a 5 s wall-clock budget enforced by killing the worker, and an address-space
limit per worker, so no template can hold the server's CPU or memory (issue 31). Here, a failure becomes the
request's validation error, its message cut as §6.5 says.
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from engine.protocol.errors import RequestValidationError
from engine.serving.template_sandbox import MAX_RANGE, RENDER_SECONDS, TemplateFailure, pool

__all__ = ["MAX_RANGE", "RENDER_SECONDS", "render", "resolve_source"]

MAX_TEMPLATE_BYTES = 1 << 20
_RELATIVE_NAME = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*\.jinja$")


Kind = Literal["model", "request"]  # the model's (or operator's) template, or one a client sent
_executors: dict[str, ThreadPoolExecutor] = {}
_executors_lock = threading.Lock()


def render(source: str, variables: dict[str, Any], max_chars: int, kind: Kind = "request") -> str:
    """Render `source` with `variables` in the sandbox; any template problem becomes a RequestValidationError.
    Blocks its thread for up to the budget (plus the wait for a free worker): call it on `executor(kind)`."""
    try:
        return pool(kind).render(source, variables, max_chars)
    except TemplateFailure as exc:
        raise RequestValidationError(f"chat_template error: {_safe(exc)}") from None


def executor(kind: Kind) -> ThreadPoolExecutor:
    """The threads that wait on renders of one kind: never the event loop's default executor, which the engine's
    callers need, so renders that wait out their budget hold only threads of their own (issue 31)."""
    with _executors_lock:
        found = _executors.get(kind)
        if found is None:
            found = _executors[kind] = ThreadPoolExecutor(max_workers=32, thread_name_prefix=f"template-{kind}")
        return found


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
