"""The exact request of a reply as raw JSON, a curl command and openai-SDK Python, MindIE extras included."""

from __future__ import annotations

import json
import shlex
from typing import Any

# Fields the openai SDK has no keyword for: they travel in `extra_body`.
SDK_KEYWORDS = {
    "model",
    "messages",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "logprobs",
    "top_logprobs",
    "tools",
    "tool_choice",
    "response_format",
    "user",
}
# ... and of `completions.create` (a text-mode body: `prompt`, no `messages`; docs/completions.md).
COMPLETION_KEYWORDS = {
    "model",
    "prompt",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
    "max_tokens",
    "n",
    "best_of",
    "logprobs",
    "echo",
    "logit_bias",
    "suffix",
    "user",
}


def _text(body: dict[str, Any]) -> bool:
    return "prompt" in body and "messages" not in body


def as_json(body: dict[str, Any]) -> str:
    return json.dumps(body, indent=2, ensure_ascii=False)


def as_curl(body: dict[str, Any], base_url: str) -> str:
    data = json.dumps(body, ensure_ascii=False)
    route = "/v1/completions" if _text(body) else "/v1/chat/completions"
    return (
        f"curl -sN {shlex.quote(base_url.rstrip('/') + route)} \\\n"
        f"  -H 'Content-Type: application/json' \\\n  -d {shlex.quote(data)}"
    )


def as_python(body: dict[str, Any], base_url: str) -> str:
    text = _text(body)
    keywords = COMPLETION_KEYWORDS if text else SDK_KEYWORDS
    known = {k: v for k, v in body.items() if k in keywords}
    extra = {k: v for k, v in body.items() if k not in keywords}
    args = "".join(f"    {k}={v!r},\n" for k, v in known.items())
    if extra:
        args += f"    extra_body={extra!r},\n"
    piece, whole = ("text", "text") if text else ("delta.content or ''", "message.content")
    loop = (
        f"for chunk in reply:\n    if chunk.choices:\n        print(chunk.choices[0].{piece}, end='')\n"
        if body.get("stream")
        else f"print(reply.choices[0].{whole})\n"
    )
    return (
        "from openai import OpenAI\n\n"
        f"client = OpenAI(base_url={base_url.rstrip('/') + '/v1'!r}, api_key='unused')\n"
        f"reply = client.{'' if text else 'chat.'}completions.create(\n{args})\n{loop}"
    )
