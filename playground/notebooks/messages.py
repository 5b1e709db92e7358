"""Building a request's messages from a notebook: a file as an audio part, mixed-part user turns, tool results.

Only the wire format of /v1/chat/completions: what these build is what any OpenAI-compatible client would send.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from playground.client.result import ToolCall

AUDIO_FORMATS = ("mp3", "wav", "flac")  # what `input_audio.format` may say


def audio_part(path: str | Path, format: str | None = None) -> dict[str, Any]:
    """An `input_audio` content part carrying the file's bytes as base64; the format defaults to the suffix."""
    path = Path(path)
    fmt = format or path.suffix.lstrip(".").lower()
    if fmt not in AUDIO_FORMATS:
        raise ValueError(f"{path.name}: input_audio takes {', '.join(AUDIO_FORMATS)}, not {fmt or 'no suffix'!r}")
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}


def user_message(*parts: str | dict[str, Any]) -> dict[str, Any]:
    """A user turn of several parts, in order: strings become text parts, dicts (e.g. `audio_part(...)`) stay."""
    return {"role": "user", "content": [{"type": "text", "text": p} if isinstance(p, str) else p for p in parts]}


def tool_result_message(call: ToolCall, content: Any) -> dict[str, Any]:
    """The `tool` turn answering `call`: a string as it is, anything else as JSON."""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return {"role": "tool", "tool_call_id": call.id, "content": text}
