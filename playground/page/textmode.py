"""Text-completion mode (issue 33 item 5): the box's text sent as a raw prompt, no chat template, for base models.

A Send in text mode builds a /v1/completions body from the same controls (`completion_body`), checks it with the
route's own parser, and runs it through the backend's `start_completion`: on the embedded engine that is the
route's path (engine/serving/completions.py `prompts_for` + `CompletionStream` through the request policy), so
admission, limits, moderation, metrics and the access line are the API's. The reply folds into the same ReplyView
as a chat reply (statistics, timeline, X-ray, token heatmap); the prompt's own `prompt_logprobs` become a second
heatmap: how surprised the model is by the user's text.

A model without a chat template of its own (served with engine/serving/plain_template.jinja: ModelInfo's
`plain_template`) starts in text mode; the "Chat | Text" radio under the input switches.
"""

from __future__ import annotations

from html import escape
from typing import Any

from engine.protocol.completions import SHARED_FIELDS, parse_completion_request
from engine.protocol.errors import RequestValidationError
from engine.protocol.request import parse_chat_request
from engine.protocol.response import LogprobEntry, TopLogprob
from playground.page import heatmap
from playground.page.i18n import labels, say

# The labels this module shows, translated in the browser (playground/page/i18n.py `t`).
TEXTS = labels(
    __name__,
    {
        "mode_chat": ("Chat", "对话"),
        "mode_text": ("Text", "文本"),
    },
)

CHAT, TEXT = "chat", "text"
MODE_KEYS = {CHAT: "mode_chat", TEXT: "mode_text"}  # the radio's values and their labels' i18n keys
PROMPT_LOGPROBS = 5  # alternatives asked for each prompt token in text mode
LOGPROBS = 5  # and for each generated token, unless Sampling's top_logprobs says otherwise

PROMPT_TITLE = (
    "Your text, as the model reads it: how surprised it is by each token",
    "模型如何读您的文本：它对每个 token 的意外程度",
)
PROMPT_NOTE = (
    "the first token has no probability (nothing comes before it)",
    "第一个 token 没有概率（它之前没有任何内容）",
)
REPLY_TITLE = ("The continuation", "续写部分")
REMOTE_ONLY = ("this backend has no text completion: switch to Chat", "此后端不支持文本续写：请切换到对话模式")


def default_mode(service: Any) -> str:
    """Text for a base model served on the plain template (it has no chat template of its own), else chat."""
    model = getattr(service, "model", None)
    return TEXT if getattr(model, "plain_template", False) else CHAT


def is_text(body: dict[str, Any] | None) -> bool:
    """Whether a turn's request is a text completion (a `prompt`, no `messages`)."""
    return isinstance(body, dict) and "prompt" in body and "messages" not in body


def completion_body(model: str, prompt: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The exact /v1/completions body of a text-mode Send: the chat controls' fields the route shares, the
    generated tokens' logprobs (Sampling's top_logprobs, else LOGPROBS) and the prompt's (PROMPT_LOGPROBS)."""
    body: dict[str, Any] = {"model": model, "prompt": prompt}
    body.update({k: v for k, v in fields.items() if k in SHARED_FIELDS and k not in ("model", "stream")})
    body["logprobs"] = fields.get("top_logprobs") or LOGPROBS
    body.setdefault("prompt_logprobs", PROMPT_LOGPROBS)
    body["stream"], body["stream_options"] = True, {"include_usage": True}
    return body


def check(body: dict[str, Any]) -> str | None:
    """The completions route's validation message for this body, or None when it would be accepted."""
    try:  # its own fields, then the sampling fields with the chat's rules, as prompts_for builds each prompt's
        parse_chat_request(
            {**parse_completion_request(body).chat_body(), "messages": [{"role": "user", "content": "…"}]}
        )
    except RequestValidationError as exc:
        return exc.message
    return None


def params_of(body: dict[str, Any]) -> dict[str, Any]:
    """What `ChatBackend.start_completion` takes besides the prompt (it adds model, stream and usage itself)."""
    return {k: v for k, v in body.items() if k not in ("model", "prompt", "stream", "stream_options")}


def prompt_entries(prompt_logprobs: list[Any] | None, k: int = PROMPT_LOGPROBS) -> list[LogprobEntry]:
    """vLLM's `prompt_logprobs` (per token None for the first, then {token id: {logprob, rank, decoded_token}}, the
    prompt's own token first) as the heatmap's entries: the prompt's token, its logprob, and the top `k` (the
    request's prompt_logprobs) as alternatives, best first, the prompt's own among them only when it is one of
    them. The first token, which has no probability, is left out."""
    out = []
    for item in prompt_logprobs or []:
        if not item:
            continue
        values = list(item.values())
        own = values[0]
        alts = sorted((v for v in values if v is not own or own["rank"] <= k), key=lambda v: v["rank"])
        top = [TopLogprob(token=v["decoded_token"], logprob=v["logprob"], bytes=_bytes(v)) for v in alts]
        out.append(
            LogprobEntry(token=own["decoded_token"], logprob=own["logprob"], bytes=_bytes(own), top_logprobs=top)
        )
    return out


def _bytes(v: dict[str, Any]) -> list[int]:
    return list(str(v["decoded_token"]).encode("utf-8", "surrogateescape"))


def prompt_heatmap_html(prompt_logprobs: list[Any] | None, lang: str = "en", k: int = PROMPT_LOGPROBS) -> str:
    """The prompt's heatmap (the Tokens panel's top in text mode), empty without prompt logprobs."""
    entries = prompt_entries(prompt_logprobs, k)
    if not entries:
        return ""
    head = (
        f'<div class="pg-note pg-prompt-title"><b>{say(PROMPT_TITLE, lang)}</b> · '
        f"{heatmap._summary(entries, lang)} · {say(PROMPT_NOTE, lang)}</div>"
    )
    return f'<div class="pg-prompt-heat">{head}{heatmap.heatmap_html(entries, lang)}</div>'


def reply_title(lang: str = "en") -> str:
    return f'<div class="pg-note pg-reply-title"><b>{say(REPLY_TITLE, lang)}</b></div>'


def _raw(text: str) -> str:
    """Text shown as it is inside the chat's Markdown: escaped, line breaks kept, no `$` for the LaTeX pass."""
    return escape(text).replace("$", "&#36;").replace("\r", "").replace("\n", "<br>")


def continuation_html(prompt: str, continuation: str, extra: str = "") -> str:
    """The prompt with its continuation after it, highlighted: one HTML block (no blank line, so Markdown leaves
    it alone); `extra`: Markdown-free notes after it (stopped, an error)."""
    shown = _raw(continuation) if continuation else "…"
    return (
        f'<div class="pg-textmode"><span class="pg-text-prompt">{_raw(prompt)}</span>'
        f'<mark class="pg-text-cont">{shown}</mark>{_raw(extra)}</div>'
    )
