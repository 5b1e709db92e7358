"""The conversation as the API sees it (turns -> `messages`) and as the chat shows it (turns -> Chatbot messages).

One list of turns, the path shown, is the source of truth. The Chatbot shows several messages per reply (thinking,
answer, tool calls, statistics), so `display` also returns which turn each shown message came from, for edit /
retry / select.

Versions: an edit or a regenerate does not throw the old turns away. The turns from that position on (the "tail")
become one version of a `Fork` at that position and the new turns another; "‹ 1/2 ›" on the turn moves between
them. Every tail's first turn points to the same Fork; the tails not shown are kept in it, each with its own
forks further down, so a version brings back everything that followed it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from html import escape
from typing import Any

from playground.client import stats
from playground.client.render import message_of
from playground.client.reply import ChoiceView, ReplyView
from playground.client.tools_panel import check_arguments
from playground.page import heatmap, textmode
from playground.page.attachments import chat_preview, media_line
from playground.page.i18n import say
from playground.page.progress import progress_html


@dataclass(eq=False)
class Fork:
    """The versions of the turns from one position on: the shown one lives in `Conversation.turns` (its slot here
    is None), the others here. `kinds` says how each version came to be: "original", "edit", "regenerate" (a
    branch from an alternative token would be one more kind)."""

    tails: list[list[Turn] | None] = field(default_factory=lambda: [None])
    kinds: list[str] = field(default_factory=lambda: ["original"])
    active: int = 0

    def __len__(self) -> int:
        return len(self.tails)


@dataclass(eq=False)
class Turn:
    role: str  # user | assistant | tool
    content: str = ""  # user / tool text (an assistant's text lives in its reply)
    reply: ReplyView | None = None  # assistant: everything the stream said
    request: dict[str, Any] | None = None  # assistant: the exact body that produced it
    tool_call_id: str | None = None  # tool
    tool_name: str | None = None  # tool: for display only
    shown: list[dict[str, Any]] | None = None  # its Chatbot messages once final, so long chats re-render only the tail
    parts: list[dict[str, Any]] = field(default_factory=list)  # user: media content parts, sent before the text
    attachments: list[str] = field(default_factory=list)  # user: one summary line per part (attachments.summary)
    previews: list[str] = field(default_factory=list)  # user: per part, its upload's file route or ""
    transcripts: dict[int, str] = field(default_factory=dict)  # user: content index -> the server's transcript
    media: dict[int, dict[str, Any]] = field(default_factory=dict)  # user: content index -> what the model took
    fork: Fork | None = None  # the versions of the turns from this one on, when there are any

    def content_value(self) -> str | list[dict[str, Any]]:
        """A user turn's `content`: its text, or its media parts followed by the text (if any) as a text part."""
        if not self.parts:
            return self.content
        return [*self.parts, *([{"type": "text", "text": self.content}] if self.content else [])]


@dataclass
class Conversation:
    turns: list[Turn] = field(default_factory=list)
    selected: int | None = None  # the reply whose request the Request tab shows (the newest, or the one clicked)
    adopting: tuple[int, Fork] | None = field(default=None, repr=False)  # a branch waiting for its first turn
    lang: str = "en"  # the language the chat is shown in: the session's (playground/page/i18n.py `lang_of`)

    def selected_reply(self) -> Turn | None:
        """The reply the Request tab shows: the one clicked, else the newest one with a request."""
        if self.selected is not None and 0 <= self.selected < len(self.turns):
            turn = self.turns[self.selected]
            if turn.request is not None:
                return turn
        return next((t for t in reversed(self.turns) if t.request is not None), None)

    def messages(self, with_reasoning: bool = False, upto: int | None = None) -> list[dict[str, Any]]:
        """The history as /v1 `messages`. Empty assistant replies (stopped at once, failed) are left out, since
        the API rejects an assistant message with neither content nor tool calls. Reasoning is not sent back to
        the model (chat templates drop it anyway) but is kept in an exported conversation."""
        out: list[dict[str, Any]] = []
        for t in self.turns[:upto]:
            if t.role == "user":
                out.append({"role": "user", "content": t.content_value()})
            elif t.role == "tool":
                out.append({"role": "tool", "tool_call_id": t.tool_call_id, "content": t.content})
            elif t.reply is not None:
                msg = message_of(t.reply.first)
                if with_reasoning and t.reply.first.reasoning:
                    msg["reasoning_content"] = t.reply.first.reasoning
                if msg["content"] or msg.get("tool_calls"):
                    out.append(msg)
        return out

    def pending_calls(self) -> list[tuple[str, str]]:
        """(call id, tool name) of the last reply's tool calls that have no tool result yet."""
        answered: set[str] = set()
        for t in reversed(self.turns):
            if t.role == "tool" and t.tool_call_id:
                answered.add(t.tool_call_id)
            elif t.role == "assistant":
                if t.reply is None or not t.reply.done:
                    return []
                calls = message_of(t.reply.first).get("tool_calls") or []
                return [(c["id"], c["function"]["name"]) for c in calls if c["id"] not in answered]
            else:
                return []
        return []

    def branch(self, at: int, kind: str) -> Fork:
        """A new version from position `at` on: the turns from there become the fork's current version and leave
        the shown path, which ends before `at`; the caller appends the new version's turns, the first of which
        gets `.fork` (see `adopt`)."""
        current = self.turns[at].fork if at < len(self.turns) else None
        fork = current if current is not None else Fork()
        if at < len(self.turns):
            fork.tails[fork.active] = self.turns[at:]
            self.turns[at].fork = fork
            del self.turns[at:]
        fork.tails.append(None)
        fork.kinds.append(kind)
        fork.active = len(fork.tails) - 1
        self.adopting = (at, fork)
        return fork

    def adopt(self, turn: Turn) -> None:
        """Append `turn`; the first turn appended at a branch's position joins that branch's fork."""
        if self.adopting is not None and self.adopting[0] == len(self.turns):
            turn.fork = self.adopting[1]
            self.adopting = None
        self.turns.append(turn)

    def switch(self, at: int, step: int) -> bool:
        """Show the version `step` away (-1 the previous one, +1 the next) of the fork at position `at`; False
        when there is no such version."""
        fork = self.turns[at].fork if 0 <= at < len(self.turns) else None
        if fork is None:
            return False
        k = fork.active + step
        if not 0 <= k < len(fork.tails) or fork.tails[k] is None:
            return False
        fork.tails[fork.active] = self.turns[at:]
        self.turns[at:] = fork.tails[k] or []
        fork.tails[k], fork.active = None, k
        self.selected = self.reply_at_or_after(at)
        return True

    def reply_at_or_after(self, at: int) -> int | None:
        return next((i for i in range(max(at, 0), len(self.turns)) if self.turns[i].role == "assistant"), None)

    def regenerate_at(self) -> int | None:
        """Regenerate: the position of the trailing reply (the reply after the last user or tool turn)."""
        at = len(self.turns)
        while at > 0 and self.turns[at - 1].role == "assistant":
            at -= 1
        return at if at < len(self.turns) else None

    def forget_after(self, at: int) -> None:
        """Undo: the shown turns from `at` on leave for good. When they were one version of several, the version
        before them (else the next) is shown instead, so no other version is lost; the selection follows."""
        fork = self.turns[at].fork if at < len(self.turns) else None
        del self.turns[at:]
        self.adopting = None
        if fork is not None and len(fork) > 1:
            gone = fork.active
            del fork.tails[gone], fork.kinds[gone]
            k = max(0, gone - 1)
            self.turns[at:] = fork.tails[k] or []
            fork.tails[k], fork.active = None, k
            if len(fork) == 1:  # one version left: no "‹ 1/1 ›"
                self.turns[at].fork = None
        if self.selected is not None and self.selected >= at:
            self.selected = None

    def last_reply(self) -> Turn | None:
        return next((t for t in reversed(self.turns) if t.role == "assistant"), None)

    def add_transcripts(self, body: dict[str, Any], transcription: list[dict[str, Any]] | None) -> None:
        """Put the server's transcripts (`[{message, part, text}]`, message indices into `body`) on the user
        turns they belong to."""
        for turn, part, item in self._user_parts(body, transcription):
            turn.transcripts[part] = str(item.get("text", ""))

    def add_media(self, body: dict[str, Any], media: list[dict[str, Any]] | None) -> None:
        """Put the response's media report (`[{message, part, type, tokens, frames_sampled, duration}]`) on the
        user turns whose parts the model took."""
        for turn, part, item in self._user_parts(body, media):
            turn.media[part] = {k: v for k, v in item.items() if k not in ("message", "part")}

    def _user_parts(self, body: dict[str, Any], items: list[dict[str, Any]] | None) -> list[tuple[Turn, int, dict]]:
        """(user turn, content index, item) per item: the k-th user message of the body is the k-th user turn."""
        messages = body.get("messages") or []
        users = [t for t in self.turns if t.role == "user"]
        out = []
        for item in items or []:
            i = item.get("message")
            if not isinstance(i, int) or not 0 <= i < len(messages):
                continue
            k = sum(1 for m in messages[:i] if m.get("role") == "user")
            if k < len(users):
                users[k].shown = None  # re-rendered with the news
                out.append((users[k], int(item.get("part", 0)), item))
        return out


THINKING = ("∴ Thinking", "∴ 思考中")
THOUGHT = ("∴ Thought", "∴ 思考过程")
TOKENS = ("{n} tokens", "{n} 个 token")
EXHAUSTED = (
    "\n\n> ⚠️ The reasoning used up all {n} tokens of max_tokens and the answer is empty. Raise max_tokens, "
    "set a thinking_budget, or turn thinking off.",
    "\n\n> ⚠️ 思考用完了 max_tokens 的全部 {n} 个 token，回答为空。请调大 max_tokens、设置 thinking_budget，"
    "或关闭思考。",
)
STOPPED = ("\n\n*⏹ stopped*", "\n\n*⏹ 已停止*")
ARGS_OK = ("✓ arguments match the tool's schema", "✓ 参数符合工具的 schema")
TRANSCRIBED = ("♪ Transcribed by the server", "♪ 服务器转写")
NO_SPEECH = ("(no speech)", "（没有语音）")
TAKEN = ("◉ Taken by the model", "◉ 模型接收的内容")
PROMPT_TOKENS = ("{n} prompt tokens", "{n} 个提示 token")
RESULT_OF = ("↩ result of {name}", "↩ {name} 的结果")
BRANCHED = ("↳ branched at token {at}: {was!r} → {now!r}", "↳ 从第 {at} 个 token 分支：{was!r} → {now!r}")
PREVIOUS, NEXT = ("previous version", "上一个版本"), ("next version", "下一个版本")


def _thinking_message(c: ChoiceView, lang: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "title": say(THINKING if c.thinking else THOUGHT, lang),
        "status": "pending" if c.thinking else "done",
    }
    if c.token_ids:  # a reply imported from a file of the messages only has no token counts
        meta["log"] = say(TOKENS, lang, n=c.reasoning_tokens)
    end = c.answer_at if c.answer_at else len(c.times_ms)
    if end and c.times_ms:
        meta["duration"] = round(c.times_ms[min(end, len(c.times_ms)) - 1] / 1000, 2)
    return {"role": "assistant", "content": c.reasoning, "metadata": meta}


def _answer_text(reply: ReplyView, c: ChoiceView, lang: str) -> str:
    text = c.content
    if c.reasoning_exhausted:
        text += say(EXHAUSTED, lang, n=len(c.times_ms))
    if reply.stopped:
        text += say(STOPPED, lang)
    if reply.error:
        text += f"\n\n> ⚠️ {reply.error}"
    return text.strip()


def _call_message(call: Any, tools: list[dict[str, Any]] | None, done: bool, lang: str) -> dict[str, Any]:
    args = call.function.arguments or ""
    try:
        pretty = json.dumps(json.loads(args), indent=2, ensure_ascii=False)
    except ValueError:
        pretty = args
    body = f"```json\n{pretty}\n```"
    meta = {"title": f"⚒ {call.function.name or '…'}", "log": call.id or "", "status": "pending"}
    if done:  # left open (no status) so the arguments show without a click
        del meta["status"]
        problems = check_arguments(tools, call.function.name, args, lang)
        body += "\n" + ("⚠️ " + "; ".join(problems) if problems else say(ARGS_OK, lang))
    return {"role": "assistant", "content": body, "metadata": meta}


def reply_messages(turn: Turn, lang: str = "en", at: int | None = None) -> list[dict[str, Any]]:
    """The chat messages of one reply; `at`: its position in the conversation, for the heatmap's branch buttons."""
    reply = turn.reply or ReplyView()
    c = reply.first
    out = []
    if c.reasoning:
        out.append(_thinking_message(c, lang))
    text = _answer_text(reply, c, lang)
    if textmode.is_text(turn.request):  # the prompt with its continuation highlighted, as raw text
        extra = _answer_text(ReplyView(stopped=reply.stopped, error=reply.error), ChoiceView(0), lang)
        prompt = str((turn.request or {}).get("prompt") or "")
        out.append({"role": "assistant", "content": textmode.continuation_html(prompt, c.content, extra)})
    elif text or not (c.reasoning or c.tool_calls):
        out.append({"role": "assistant", "content": text or progress_html(reply, lang) or "…"})
    tools = (turn.request or {}).get("tools")
    out += [_call_message(call, tools, reply.done, lang) for call in c.tool_calls]
    if c.times_ms:  # a reply imported from a file of the messages only has no numbers to show
        s = reply.stats()
        meta = {"title": "▥ " + stats.summary(s, lang), "status": "done"}
        out.append({"role": "assistant", "content": stats.markdown(s, lang), "metadata": meta})
    branchable = turn.request and not textmode.is_text(turn.request)  # playground/client/branch.py continues a chat
    out += heatmap.chat_messages(c, lang, done=reply.done, turn=at if branchable else None)
    return out


def user_messages(t: Turn, lang: str = "en") -> list[dict[str, Any]]:
    """A user turn: one line per attachment, its text, then what the server transcribed from its audio and what
    the model itself took of its media (tokens, frames)."""
    out: list[dict[str, Any]] = []
    for j, line in enumerate(t.attachments):
        shown = chat_preview(t.parts[j], t.previews[j] if j < len(t.previews) else "", lang) if j < len(t.parts) else ""
        out.append({"role": "user", "content": "⊕ " + line + (f"\n\n{shown}" if shown else "")})
    if t.content or not out:
        out.append({"role": "user", "content": t.content})
    for j, text in sorted(t.transcripts.items()):
        meta = {"title": say(TRANSCRIBED, lang), "log": f"content[{j}]"}  # no status: shown open
        out.append({"role": "user", "content": text or say(NO_SPEECH, lang), "metadata": meta})
    if t.media:
        lines = [media_line(report, lang) for _, report in sorted(t.media.items())]
        tokens = sum(int(r.get("tokens") or 0) for r in t.media.values())
        meta = {"title": say(TAKEN, lang), "log": say(PROMPT_TOKENS, lang, n=f"{tokens:,}")}
        out.append({"role": "user", "content": "  \n".join(lines), "metadata": meta})
    return out


def _turn_messages(t: Turn, lang: str, at: int | None = None) -> list[dict[str, Any]]:
    if t.role == "user":
        return user_messages(t, lang)
    if t.role == "tool":
        meta = {"title": say(RESULT_OF, lang, name=t.tool_name or "tool"), "log": t.tool_call_id or ""}
        return [{"role": "user", "content": f"```json\n{t.content}\n```", "metadata": meta}]
    return reply_messages(t, lang, at)


VERSIONS_LINK = re.compile(r"\n*<span class=\"pg-versions\".*?</span>", re.S)


def _versions_html(at: int, fork: Fork, lang: str, branched: dict[str, Any] | None = None) -> str:
    """ "‹ 2/3 ›" under a turn with versions: links the page's script (playground/page/static/chat.js) turns into a
    step; a branch's version also says where it branched and what it took instead."""
    k, n = fork.active, len(fork)
    prev = f'<a href="#pg-ver-{at}-prev" title="{say(PREVIOUS, lang)}">‹</a>' if k > 0 else "<b>‹</b>"
    nxt = f'<a href="#pg-ver-{at}-next" title="{say(NEXT, lang)}">›</a>' if k < n - 1 else "<b>›</b>"
    note = ""
    if branched is not None and fork.kinds[k] == "branch":
        note = " · " + escape(say(BRANCHED, lang, at=branched["at"] + 1, was=branched["was"], now=branched["now"]))
    return f'\n\n<span class="pg-versions" data-turn="{at}">{prev} {k + 1}/{n} {nxt}{note}</span>'


def _marked(msgs: list[dict[str, Any]], extra: str) -> list[dict[str, Any]]:
    """A copy of a turn's messages with `extra` (HTML) after its main message's text: the first plain one."""
    at = next((j for j, m in enumerate(msgs) if not m.get("metadata") and isinstance(m.get("content"), str)), 0)
    if not msgs or not isinstance(msgs[at].get("content"), str):
        return msgs
    return [*msgs[:at], {**msgs[at], "content": msgs[at]["content"] + extra}, *msgs[at + 1 :]]


def strip_marks(text: str) -> str:
    """A message's text without the versions mark `display` adds (an edit's value)."""
    return VERSIONS_LINK.sub("", text)


def display(conv: Conversation) -> tuple[list[dict[str, Any]], list[int]]:
    """Chatbot messages, and for each the index of the turn it shows. A turn with versions carries "‹ k/n ›"."""
    shown: list[dict[str, Any]] = []
    owner: list[int] = []
    for i, t in enumerate(conv.turns):
        msgs = t.shown if t.shown is not None else _turn_messages(t, conv.lang, i)
        if t.role != "assistant" or (t.reply is not None and t.reply.done):
            t.shown = msgs
        if t.fork is not None and len(t.fork) > 1:
            msgs = _marked(msgs, _versions_html(i, t.fork, conv.lang, t.reply.branched if t.reply else None))
        shown += msgs
        owner += [i] * len(msgs)
    return shown, owner
