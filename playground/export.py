"""A conversation with its settings as one JSON document: exported to a file, imported back, and kept in the
browser's storage so a page reload does not lose the chat. The history is stored as /v1 `messages`, so an
exported file is also a ready request body's core."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.openai.response import FunctionCall, ToolCallItem
from playground.controls import BY_NAME
from playground.conversation import Conversation, Turn
from playground.render import ChoiceView, ReplyView

FORMAT = "llm-playground/conversation@1"


@dataclass
class Snapshot:
    conv: Conversation
    system: str = ""
    tools: str = ""
    tool_choice: str = "auto"
    settings: dict[str, Any] = field(default_factory=dict)  # knob name -> control value


def dump(s: Snapshot) -> dict[str, Any]:
    return {"format": FORMAT, "system": s.system, "tools": s.tools, "tool_choice": s.tool_choice,
            "settings": {k: v for k, v in s.settings.items() if k in BY_NAME},
            "messages": s.conv.messages(with_reasoning=True)}  # fmt: skip


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
    names = {c.id: c.function.name for t in turns if t.reply is not None for c in t.reply.first.tool_calls}
    for t in turns:
        if t.role == "tool":
            t.tool_name = names.get(t.tool_call_id)
    settings = {k: v for k, v in (data.get("settings") or {}).items() if k in BY_NAME}
    return Snapshot(Conversation(turns), str(data.get("system") or ""), str(data.get("tools") or ""),
                    str(data.get("tool_choice") or "auto"), settings)  # fmt: skip


def _turn(i: int, m: Any) -> Turn:
    role = m.get("role") if isinstance(m, dict) else None
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


def write(doc: dict[str, Any], folder: Path) -> str:
    """The document as a file the page's download button serves."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "conversation.json"
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
    return str(path)
