"""Replay's comparison: the exact request JSON (original vs replay) and the reply text, each as a unified diff."""

from __future__ import annotations

import difflib
import json
from typing import Any

from playground.page.attachments import elide


def request_lines(body: dict[str, Any]) -> list[str]:
    """The body as the Request tab shows it (keys in sent order), long inline media elided to placeholders."""
    return json.dumps(elide(body), indent=2, ensure_ascii=False).splitlines()


def request_diff(original: dict[str, Any], replay: dict[str, Any]) -> str | None:
    """A unified diff of the two request bodies, or None when they are the same request."""
    if original == replay:
        return None
    lines = difflib.unified_diff(
        request_lines(original), request_lines(replay), "original request", "replay request", lineterm="", n=2
    )
    return "\n".join(lines)


def text_diff(original: str, new: str) -> str | None:
    if original == new:
        return None
    lines = difflib.unified_diff(original.splitlines(), new.splitlines(), "original reply", "replay reply", lineterm="")
    return "\n".join(lines)
