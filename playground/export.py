"""A conversation with its settings as one JSON document: exported to a file, imported back, and kept in the
browser's storage so a page reload does not lose the chat. The history is stored as /v1 `messages`, so an
exported file is also a ready request body's core; attachments are the content parts that were sent."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.protocol.response import FunctionCall, ToolCallItem
from playground.attachments import how_sent, source_of
from playground.controls import BY_NAME
from playground.conversation import Conversation, Turn
from playground.reply import ChoiceView, ReplyView

FORMAT = "llm-playground/conversation@1"


@dataclass
class Snapshot:
    conv: Conversation
    system: str = ""
    tools: str = ""
    tool_choice: str = "auto"
    settings: dict[str, Any] = field(default_factory=dict)  # knob name -> control value


def dump(s: Snapshot, media_budget: int | None = None) -> dict[str, Any]:
    """The document. Attachments travel as the content parts that were sent, with their summary lines,
    transcripts and what the model took of them (`taken`: tokens, frames) under `media`; with `media_budget` (characters, for the browser's storage) the newest inline
    media that fit are kept and older ones become a text note, so the history stays a valid request."""
    messages = s.conv.messages(with_reasoning=True)
    users = [t for t in s.conv.turns if t.role == "user"]
    user_at = [i for i, m in enumerate(messages) if m["role"] == "user"]
    media = [{"message": i, "attachments": t.attachments, "transcripts": {str(j): v for j, v in t.transcripts.items()},
              **({"taken": {str(j): r for j, r in t.media.items()}} if t.media else {})}
             for i, t in zip(user_at, users) if t.parts]  # fmt: skip
    if media_budget is not None:
        messages = _within(messages, media_budget)
    return {"format": FORMAT, "system": s.system, "tools": s.tools, "tool_choice": s.tool_choice,
            "settings": {k: v for k, v in s.settings.items() if k in BY_NAME}, "messages": messages,
            **({"media": media} if media else {})}  # fmt: skip


def _within(messages: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in reversed(messages):
        if isinstance(m.get("content"), list):
            parts = []
            for p in m["content"]:
                size = len(source_of(p)) if p.get("type") != "text" else 0
                if size > budget:
                    p = {"type": "text", "text": f"[{p.get('type')} left out: too large to keep in the browser]"}
                else:
                    budget -= size
                parts.append(p)
            m = {**m, "content": parts}
        out.append(m)
    return out[::-1]


def load(data: Any) -> Snapshot:
    """An exported document -> a Snapshot. Raises ValueError with a message a user can act on."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a playground conversation (expected format {FORMAT!r})")
    turns = [_turn(i, m) for i, m in enumerate(data.get("messages") or [])]
    _attach_notes(turns, data.get("media"))
    names = {c.id: c.function.name for t in turns if t.reply is not None for c in t.reply.first.tool_calls}
    for t in turns:
        if t.role == "tool":
            t.tool_name = names.get(t.tool_call_id)
    settings = {k: v for k, v in (data.get("settings") or {}).items() if k in BY_NAME}
    return Snapshot(Conversation(turns), str(data.get("system") or ""), str(data.get("tools") or ""),
                    str(data.get("tool_choice") or "auto"), settings)  # fmt: skip


def _turn(i: int, m: Any) -> Turn:
    role = m.get("role") if isinstance(m, dict) else None
    if role == "user" and isinstance(m.get("content"), list):
        parts = [p for p in m["content"] if isinstance(p, dict) and p.get("type") != "text"]
        text = "".join(
            str(p.get("text") or "") for p in m["content"] if isinstance(p, dict) and p.get("type") == "text"
        )
        return Turn("user", text, parts=parts, attachments=[f"{p.get('type')} · sent as {how_sent(p)}" for p in parts])
    if role == "user":
        return Turn("user", str(m.get("content") or ""))
    if role == "tool":
        return Turn("tool", str(m.get("content") or ""), tool_call_id=m.get("tool_call_id"))
    if role == "assistant":
        calls = [
            ToolCallItem(index=j, id=c.get("id"), type="function",
                         function=FunctionCall(name=c["function"].get("name"), arguments=c["function"].get("arguments")))
            for j, c in enumerate(m.get("tool_calls") or [])
        ]  # fmt: skip
        choice = ChoiceView(0, content=str(m.get("content") or ""), reasoning=str(m.get("reasoning_content") or ""),
                            tool_calls=calls, finish_reason="tool_calls" if calls else "stop", answer_at=0)  # fmt: skip
        return Turn("assistant", reply=ReplyView(choices={0: choice}, done=True))
    raise ValueError(f"messages[{i}] has no role user, assistant or tool")


def _attach_notes(turns: list[Turn], media: Any) -> None:
    """The summary lines, transcripts and media reports saved beside the messages, back on their user turns."""
    for item in media if isinstance(media, list) else []:
        i = item.get("message") if isinstance(item, dict) else None
        if not isinstance(i, int) or not 0 <= i < len(turns) or turns[i].role != "user":
            continue
        notes = [str(a) for a in item.get("attachments") or []]
        if len(notes) == len(turns[i].parts):
            turns[i].attachments = notes
        for j, text in (item.get("transcripts") or {}).items():
            if str(j).isdigit():
                turns[i].transcripts[int(j)] = str(text)
        for j, report in (item.get("taken") or {}).items():
            if str(j).isdigit() and isinstance(report, dict):
                turns[i].media[int(j)] = report


def write(doc: dict[str, Any], folder: Path) -> str:
    """The document as a file the page's download button serves."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "conversation.json"
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
    return str(path)
