"""The Prompt tab (issue 19): the exact text the chat template produced for a request and its tokens, with counts.

For the message being typed (the body Send would send, from `ChatHandlers.build`, settings and attachments
included) or for the selected reply's request. The page never touches the tokenizer or the template: the embedded
engine answers through engine/serving/tokenize.py, the same code `POST /tokenize` runs; a remote backend through
its own `POST /tokenize` (vLLM's, or this app's), when it has one.

The text is shown with its special and added tokens (`<|im_start|>`, `<think>`, `<tool_call>`, media placeholders)
marked; each token is a chip (its id and piece on hover), a media placeholder's expansion one chip with its count.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine.protocol.errors import ApiError
from playground.page import textmode
from playground.page.chat import ChatHandlers
from playground.page.conversation import Conversation, Turn
from playground.page.i18n import choices, labels, say, t
from playground.page.session import Session

# The labels this module shows, translated in the browser (playground/page/i18n.py `t`).
TEXTS = labels(
    __name__,
    {
        "tab_prompt": ("¶ Prompt", "¶ 提示词"),
        "prompt_src_input": ("the message being typed", "正在输入的消息"),
        "prompt_src_reply": ("the selected reply's request", "所选回复的请求"),
        "prompt_show": ("¶ Show the prompt", "¶ 显示提示词"),
    },
)

SOURCES = {"input": "prompt_src_input", "reply": "prompt_src_reply"}
MAX_CHIPS = 3000
FIELDS = ("model", "messages", "chat_template", "chat_template_kwargs", "tools", "tool_choice")

EMPTY = ("Type a message (or send one) to see its prompt.", "输入（或发送）一条消息即可查看它的提示词。")
NO_REPLY = (
    "No reply yet: send a message, or pick “the message being typed”.",
    "还没有回复：请先发送一条消息，或选择“正在输入的消息”。",
)
REFUSED = ("⚠️ Refused: {error}", "⚠️ 被拒绝：{error}")
NOT_AVAILABLE = (
    "The prompt is not available from this backend (it has no POST /tokenize).",
    "此后端不提供提示词（它没有 POST /tokenize）。",
)
NO_TEXT = ("This backend answers the tokens only, not the rendered text.", "此后端只返回 token，不返回渲染后的文本。")
OF_INPUT = (
    "The prompt of the message being typed, as Send would send it",
    "正在输入的消息的提示词（与点击发送时一致）",
)
OF_REPLY = ("The prompt of the selected reply's request", "所选回复的请求的提示词")
COUNTS = (
    "{count} tokens · {special} special · {media} media · {chars} characters · limit {limit} (context {context})",
    "{count} 个 token · 特殊 {special} 个 · 媒体 {media} 个 · {chars} 个字符 · 上限 {limit}（上下文 {context}）",
)
TOO_LONG = ("⚠️ Longer than the prompt limit: chat would refuse this request.", "⚠️ 超过提示词上限：对话会拒绝此请求。")
TEXT_HEAD = ("Rendered prompt", "渲染后的提示词")
TOKENS_HEAD = ("Tokens (hover for id and piece)", "token（悬停查看 id 与片段）")
MORE = ("… and {n} more tokens", "……还有 {n} 个 token")


@dataclass
class PromptTab:
    source: gr.Radio
    show: gr.Button
    view: gr.HTML

    def wire(
        self,
        h: ChatHandlers,
        box: gr.Textbox,
        pending: gr.State,
        common: list[Any],
        knobs: dict[str, Any],
        tab: Any = None,
    ) -> None:
        """`common`: [conv, system, tools code, tool choice, session], as playground/page/ui.py passes the chat's."""
        handlers = PromptHandlers(h)
        triggers = [self.show.click, self.source.change] + ([tab.select] if tab is not None else [])
        gr.on(
            triggers,
            handlers.show,
            [self.source, box, pending, *common],
            self.view,
            inputs_kwargs=knobs,
            api_name=False,
            show_progress="hidden",
            trigger_mode="always_last",
        )


def prompt_tab() -> PromptTab:
    source = gr.Radio(choices(SOURCES), value="input", show_label=False, elem_id="pg-prompt-source")
    show = gr.Button(t("prompt_show"), size="sm", elem_id="pg-prompt-show")
    view = gr.HTML("", elem_id="pg-prompt")
    return PromptTab(source, show, view)


class PromptHandlers:
    def __init__(self, h: ChatHandlers) -> None:
        self.h = h

    async def show(
        self,
        source: str,
        message: str,
        pending: list[dict[str, Any]] | None,
        conv: Conversation,
        system: str,
        tools_text: str,
        tool_choice: str | None,
        session: Session,
        **knobs: Any,
    ) -> str:
        lang = session.lang
        if source == "reply":
            turn = conv.selected_reply()
            if turn is None or turn.request is None:
                return note(say(NO_REPLY, lang))
            body: dict[str, Any] | None = turn.request
        else:
            body, problem = self.input_body(message, pending, conv, system, tools_text, tool_choice, session, knobs)
            if body is None:
                return note(say(REFUSED, lang, error=problem) if problem else say(EMPTY, lang))
        assert body is not None
        try:
            answer = await self.tokenize(tokenize_body(body), session)
        except ApiError as exc:
            return note(say(REFUSED, lang, error=exc.message))
        if answer is None:
            return note(say(NOT_AVAILABLE, lang))
        return render(answer, lang, say(OF_REPLY if source == "reply" else OF_INPUT, lang))

    def input_body(
        self,
        message: str,
        pending: list[dict[str, Any]] | None,
        conv: Conversation,
        system: str,
        tools_text: str,
        tool_choice: str | None,
        session: Session,
        knobs: dict[str, Any],
    ) -> tuple[dict[str, Any] | None, str | None]:
        """The body Send would send for the message being typed (with its attachments): (body, None), (None, why
        it would be refused), or (None, None) when there is nothing to send. With `knobs["mode"]` Text, the
        /v1/completions body of the box's raw text (playground/textmode.py), as Send's text mode builds it."""
        knobs = dict(knobs)
        if knobs.pop("mode", None) == textmode.TEXT:
            return self.h.build_text(message, knobs, session) if message else (None, None)
        user = Turn("user", message or "", parts=[a["part"] for a in pending or []])
        content = user.content_value()
        messages = conv.messages() + ([{"role": "user", "content": content}] if content else [])
        if not messages:
            return None, None
        return self.h.build(messages, system, tools_text, tool_choice, knobs, session)

    async def tokenize(self, body: dict[str, Any], session: Session) -> dict[str, Any] | None:
        """The /tokenize answer with details, from the session's backend; None: the backend has no /tokenize."""
        return await self.h.backend(session).tokenize(body)


def tokenize_body(chat_body: dict[str, Any]) -> dict[str, Any]:
    """The /tokenize form of a request: a chat request's chat form (what renders its prompt), a text completion's
    prompt form (its raw prompt, no template), and the details the view shows."""
    if textmode.is_text(chat_body):
        return {
            "model": chat_body["model"],
            "prompt": chat_body["prompt"],
            "return_token_strs": True,
            "return_details": True,
        }
    out = {k: chat_body[k] for k in FIELDS if chat_body.get(k) is not None}
    return {**out, "return_token_strs": True, "return_details": True}


def note(text: str) -> str:
    return f'<div class="pg-prompt-note">{html.escape(text)}</div>'


def _visible(piece: str) -> str:
    return piece.replace("\n", "↵").replace("\t", "⇥").replace(" ", "·") or "∅"


def _marked_text(text: str, marked: set[str], media: dict[str, int]) -> str:
    """The prompt text, escaped, with each special piece (and media placeholder) wrapped in a mark."""
    pieces = sorted({p for p in marked | set(media) if p}, key=len, reverse=True)
    if not pieces:
        return html.escape(text)
    out, at = [], 0
    for m in re.finditer("|".join(map(re.escape, pieces)), text):
        out.append(html.escape(text[at : m.start()]))
        piece = m.group(0)
        if piece in media:
            out.append(f'<mark class="pg-prompt-media">{html.escape(piece)}</mark>')
        else:
            out.append(f'<mark class="pg-prompt-special">{html.escape(piece)}</mark>')
        at = m.end()
    out.append(html.escape(text[at:]))
    return "".join(out)


def _chip(token: int, piece: str, special: bool, extra: str = "", count: int = 1) -> str:
    cls = "pg-ptok" + (" pg-ptok-special" if special else "") + (" pg-ptok-media" if count > 1 else "")
    title = f"id {token} · {piece!r}" + extra
    label = html.escape(_visible(piece)) + (f" ×{count}" if count > 1 else "")
    return f'<code class="{cls}" data-id="{token}" title="{html.escape(title)}">{label}</code>'


def render(answer: dict[str, Any], lang: str, heading: str) -> str:
    """The view of one /tokenize answer: counts, the marked text, the token chips."""
    ids: list[int] = answer.get("tokens") or []
    d = answer.get("details") or {}
    pieces: list[str] = d.get("pieces") or answer.get("token_strs") or [str(i) for i in ids]
    special: list[bool] = d.get("special") or [False] * len(ids)
    spans = {s["start"]: s for s in d.get("media") or []}
    context = answer.get("max_model_len", 0)
    limit = d.get("prompt_limit", context)
    counts = say(
        COUNTS,
        lang,
        count=len(ids),
        special=sum(special),
        media=d.get("media_tokens", 0),
        chars=d.get("characters", "–"),
        limit=limit,
        context=context,
    )
    parts = [
        f'<div class="pg-prompt-head">{html.escape(heading)}</div>',
        f'<div class="pg-prompt-counts" data-count="{len(ids)}">{html.escape(counts)}</div>',
    ]
    if limit and len(ids) > limit:
        parts.append(note(say(TOO_LONG, lang)))
    parts.append(f'<div class="pg-prompt-sub">{html.escape(say(TEXT_HEAD, lang))}</div>')
    if "text" in d:
        marked = {p for p, s in zip(pieces, special) if s}
        media = {s["piece"]: s["count"] for s in spans.values()}
        parts.append(f'<pre class="pg-prompt-text">{_marked_text(d["text"], marked, media)}</pre>')
    else:
        parts.append(note(say(NO_TEXT, lang)))
    chips, i, shown = [], 0, 0
    while i < len(ids) and shown < MAX_CHIPS:
        span = spans.get(i)
        if span is not None:
            where = f" · {span['type']} · messages[{span['message']}].content[{span['part']}] · {span['count']}"
            chips.append(_chip(ids[i], pieces[i], special[i], where, span["count"]))
            i += span["count"]
        else:
            chips.append(_chip(ids[i], pieces[i], special[i]))
            i += 1
        shown += 1
    parts.append(f'<div class="pg-prompt-sub">{html.escape(say(TOKENS_HEAD, lang))}</div>')
    parts.append(f'<div class="pg-prompt-toks">{"".join(chips)}</div>')
    if i < len(ids):
        parts.append(note(say(MORE, lang, n=len(ids) - i)))
    return f'<div class="pg-prompt">{"".join(parts)}</div>'
