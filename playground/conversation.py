"""The conversation as the API sees it (turns -> `messages`) and as the chat shows it (turns -> Chatbot messages).

One list of turns is the source of truth. The Chatbot shows several messages per reply (thinking, answer, tool
calls, statistics), so `display` also returns which turn each shown message came from, for edit / retry / select.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from playground import heatmap, stats
from playground.attachments import media_line
from playground.render import message_of
from playground.reply import ChoiceView, ReplyView
from playground.tools_panel import check_arguments


@dataclass
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
    transcripts: dict[int, str] = field(default_factory=dict)  # user: content index -> the server's transcript
    media: dict[int, dict[str, Any]] = field(default_factory=dict)  # user: content index -> what the model took

    def content_value(self) -> str | list[dict[str, Any]]:
        """A user turn's `content`: its text, or its media parts followed by the text (if any) as a text part."""
        if not self.parts:
            return self.content
        return [*self.parts, *([{"type": "text", "text": self.content}] if self.content else [])]


@dataclass
class Conversation:
    turns: list[Turn] = field(default_factory=list)
    selected: int | None = None  # the reply whose request the Request tab shows (the newest, or the one clicked)

    def selected_reply(self) -> Turn | None:
        """The reply the Request tab shows: the one clicked, else the newest one with a request."""
        if self.selected is not None and 0 <= self.selected < len(self.turns):
            turn = self.turns[self.selected]
            if turn.request is not None:
                return turn
        return next((t for t in reversed(self.turns) if t.request is not None), None)

    def messages(self, with_reasoning: bool = False) -> list[dict[str, Any]]:
        """The history as /v1 `messages`. Empty assistant replies (stopped at once, failed) are left out, since
        the API rejects an assistant message with neither content nor tool calls. Reasoning is not sent back to
        the model (chat templates drop it anyway) but is kept in an exported conversation."""
        out: list[dict[str, Any]] = []
        for t in self.turns:
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

    def truncate_before_last_reply(self) -> None:
        """Regenerate: drop the trailing assistant reply (and anything after it)."""
        while self.turns and self.turns[-1].role == "assistant":
            self.turns.pop()

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


def _thinking_message(c: ChoiceView) -> dict[str, Any]:
    meta: dict[str, Any] = {"title": "💭 Thinking" if c.thinking else "💭 Thought",
                            "status": "pending" if c.thinking else "done"}  # fmt: skip
    if c.token_ids:  # an imported reply has no token counts
        meta["log"] = f"{c.reasoning_tokens} tokens"
    end = c.answer_at if c.answer_at else len(c.times_ms)
    if end and c.times_ms:
        meta["duration"] = round(c.times_ms[min(end, len(c.times_ms)) - 1] / 1000, 2)
    return {"role": "assistant", "content": c.reasoning, "metadata": meta}


def _answer_text(reply: ReplyView, c: ChoiceView) -> str:
    text = c.content
    if c.reasoning_exhausted:
        text += (f"\n\n> ⚠️ The reasoning used up all {len(c.times_ms)} tokens of max_tokens and the answer is empty. "
                 "Raise max_tokens, set a thinking_budget, or turn thinking off.")  # fmt: skip
    if reply.stopped:
        text += "\n\n*⏹ stopped*"
    if reply.error:
        text += f"\n\n> ⚠️ {reply.error}"
    return text.strip()


def _call_message(call: Any, tools: list[dict[str, Any]] | None, done: bool) -> dict[str, Any]:
    args = call.function.arguments or ""
    try:
        pretty = json.dumps(json.loads(args), indent=2, ensure_ascii=False)
    except ValueError:
        pretty = args
    body = f"```json\n{pretty}\n```"
    meta = {"title": f"🛠 {call.function.name or '…'}", "log": call.id or "", "status": "pending"}
    if done:  # left open (no status) so the arguments show without a click
        del meta["status"]
        problems = check_arguments(tools, call.function.name, args)
        body += "\n" + ("⚠️ " + "; ".join(problems) if problems else "✓ arguments match the tool's schema")
    return {"role": "assistant", "content": body, "metadata": meta}


def reply_messages(turn: Turn) -> list[dict[str, Any]]:
    reply = turn.reply or ReplyView()
    c = reply.first
    out = []
    if c.reasoning:
        out.append(_thinking_message(c))
    text = _answer_text(reply, c)
    if text or not (c.reasoning or c.tool_calls):
        out.append({"role": "assistant", "content": text or "…"})
    tools = (turn.request or {}).get("tools")
    out += [_call_message(call, tools, reply.done) for call in c.tool_calls]
    if c.times_ms:  # an imported reply has no engine numbers to show
        s = reply.stats()
        meta = {"title": "📊 " + stats.summary(s), "status": "done"}
        out.append({"role": "assistant", "content": stats.markdown(s), "metadata": meta})
    out += heatmap.chat_messages(c)
    return out


def user_messages(t: Turn) -> list[dict[str, Any]]:
    """A user turn: one line per attachment, its text, then what the server transcribed from its audio and what
    the model itself took of its media (tokens, frames)."""
    out = [{"role": "user", "content": "📎 " + line} for line in t.attachments]
    if t.content or not out:
        out.append({"role": "user", "content": t.content})
    for j, text in sorted(t.transcripts.items()):
        meta = {"title": "🎙 Transcribed by the server", "log": f"content[{j}]"}  # no status: shown open
        out.append({"role": "user", "content": text or "(no speech)", "metadata": meta})
    if t.media:
        lines = [media_line(report) for _, report in sorted(t.media.items())]
        tokens = sum(int(r.get("tokens") or 0) for r in t.media.values())
        meta = {"title": "👁 Taken by the model", "log": f"{tokens:,} prompt tokens"}
        out.append({"role": "user", "content": "  \n".join(lines), "metadata": meta})
    return out


def _turn_messages(t: Turn) -> list[dict[str, Any]]:
    if t.role == "user":
        return user_messages(t)
    if t.role == "tool":
        meta = {"title": f"↩ result of {t.tool_name or 'tool'}", "log": t.tool_call_id or ""}
        return [{"role": "user", "content": f"```json\n{t.content}\n```", "metadata": meta}]
    return reply_messages(t)


def display(conv: Conversation) -> tuple[list[dict[str, Any]], list[int]]:
    """Chatbot messages, and for each the index of the turn it shows."""
    shown: list[dict[str, Any]] = []
    owner: list[int] = []
    for i, t in enumerate(conv.turns):
        msgs = t.shown if t.shown is not None else _turn_messages(t)
        if t.role != "assistant" or (t.reply is not None and t.reply.done):
            t.shown = msgs
        shown += msgs
        owner += [i] * len(msgs)
    return shown, owner
