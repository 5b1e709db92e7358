"""How much of the context window the next request takes (issue 19, point 2), shown under the input: the prompt
Send would send (the conversation, the typed message and its attachments, counted by the same /tokenize path as
the Prompt tab) plus its max_tokens, against the model's window; it warns before a reply would be cut short
(the engine caps max_tokens to the room left) or the request refused (a prompt over the limit)."""

from __future__ import annotations

from typing import Any

from engine.protocol.errors import ApiError
from playground.page.conversation import Conversation
from playground.page.i18n import say
from playground.page.session import Session
from playground.page.tabs.prompt_view import PromptHandlers, tokenize_body

FITS = (
    "Σ context: {prompt} prompt + {new} max_tokens = {total} of {window} tokens ({pct}%)",
    "Σ 上下文：提示 {prompt} + max_tokens {new} = {total} / {window} 个 token（{pct}%）",
)
CUT = (
    "⚠️ context: {prompt} prompt + {new} max_tokens is over the window of {window}: the reply is cut to {room} tokens",
    "⚠️ 上下文：提示 {prompt} + max_tokens {new} 超过了 {window} 的窗口：回复最多 {room} 个 token",
)
OVER = (
    "⛔ context: the prompt ({prompt} tokens) is over the limit of {limit}: the API will refuse it; shorten the "
    "conversation (Clear, Undo) or the message",
    "⛔ 上下文：提示（{prompt} 个 token）超过上限 {limit}：API 会拒绝此请求；请缩短对话（清空、撤销）或消息",
)


def meter_html(prompt: int, new: int | None, window: int, limit: int, lang: str) -> str:
    """The line under the input: fits, cut (the reply gets fewer tokens than max_tokens) or over (refused)."""
    n = new or 0
    values = {
        "prompt": f"{prompt:,}",
        "new": f"{n:,}",
        "total": f"{prompt + n:,}",
        "window": f"{window:,}",
        "limit": f"{limit:,}",
        "room": f"{max(window - prompt, 0):,}",
        "pct": f"{100 * (prompt + n) / window:.0f}" if window else "?",
    }
    if prompt > limit:
        return f'<div class="pg-context over">{say(OVER, lang, **values)}</div>'
    if prompt + n > window:
        return f'<div class="pg-context cut">{say(CUT, lang, **values)}</div>'
    return f'<div class="pg-context">{say(FITS, lang, **values)}</div>'


class ContextMeter:
    def __init__(self, prompts: PromptHandlers) -> None:
        self.prompts = prompts

    async def measure(
        self,
        message: str,
        pending: list[dict[str, Any]] | None,
        conv: Conversation,
        system: str,
        tools_text: str,
        tool_choice: str | None,
        session: Session,
        **knobs: Any,
    ) -> str:
        """The meter for what Send would send now; empty when there is nothing to send, when the check line
        already says why it would be refused, or when the backend cannot count (no /tokenize)."""
        body, _ = self.prompts.input_body(message, pending, conv, system, tools_text, tool_choice, session, knobs)
        if body is None:
            return ""
        try:
            answer = await self.prompts.tokenize(tokenize_body(body), session)
        except ApiError:
            return ""
        if answer is None:
            return ""
        window = int(answer.get("max_model_len") or 0)
        limit = int((answer.get("details") or {}).get("prompt_limit") or max(window - 1, 0))
        return meter_html(int(answer["count"]), body.get("max_tokens"), window, limit, session.lang)
