"""A conversation with its settings as one JSON document: exported to a file, imported back, and kept in the
browser's storage so a page reload does not lose the chat, nor any number of its replies, nor their versions. A file
also carries the shown path as /v1 `messages`, so it is a ready request body's core; attachments are the content
parts that were sent."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.protocol.response import FunctionCall, ToolCallItem
from playground.client.controls import BY_NAME
from playground.client.reply import ChoiceView, ReplyView
from playground.page import turn_codec
from playground.page.attachments import how_sent, source_of
from playground.page.conversation import Conversation, Turn

FORMAT = "llm-playground/conversation@2"
READS = ("llm-playground/conversation@1", FORMAT)  # @1: the messages only (no numbers, no versions)
BLOB_MIN_CHARS = 1024  # inline media (data URLs, and sources this long) are stored once, under `blobs`


@dataclass
class Snapshot:
    conv: Conversation
    system: str = ""
    tools: str = ""
    tool_choice: str = "auto"
    settings: dict[str, Any] = field(default_factory=dict)  # knob name -> control value


def dump(s: Snapshot, media_budget: int | None = None, lean: bool = False) -> dict[str, Any]:
    """The document: `turns` (every turn with its reply's numbers, its exact request and its versions; see
    playground/page/turn_codec.py), and, for a file, `messages` (the shown path as /v1 messages, a ready request body's
    core, media included) with `media` (their summary lines, transcripts and what the model took).

    A media source is stored once under `blobs` however many turns and requests carry it. With `media_budget`
    (characters, for the browser's storage) only the newest blobs that fit are kept, the others become a text
    note, and `messages` is left out (the turns hold it all); `lean` leaves out the raw chunks and the tokens'
    alternatives."""
    blobs: dict[str, str] = {}
    turns = _shared([turn_codec.turn_doc(t, lean) for t in s.conv.turns], blobs)
    doc: dict[str, Any] = {
        "format": FORMAT,
        "system": s.system,
        "tools": s.tools,
        "tool_choice": s.tool_choice,
        "settings": {k: v for k, v in s.settings.items() if k in BY_NAME},
    }
    if media_budget is None:
        messages = s.conv.messages(with_reasoning=True)
        users = [t for t in s.conv.turns if t.role == "user"]
        user_at = [i for i, m in enumerate(messages) if m["role"] == "user"]
        media = [
            {
                "message": i,
                "attachments": t.attachments,
                "transcripts": {str(j): v for j, v in t.transcripts.items()},
                **({"taken": {str(j): r for j, r in t.media.items()}} if t.media else {}),
            }
            for i, t in zip(user_at, users)
            if t.parts
        ]
        doc |= {"messages": messages, **({"media": media} if media else {})}
    else:
        blobs = _within(blobs, media_budget)
    return doc | {"turns": turns, **({"blobs": blobs} if blobs else {})}


def _shared(obj: Any, blobs: dict[str, str]) -> Any:
    """`obj` with each long media source replaced by "blob:<key>", the source kept once in `blobs`."""
    if isinstance(obj, list):
        return [_shared(x, blobs) for x in obj]
    if not isinstance(obj, dict):
        return obj
    source = source_of(obj) if obj.get("type") not in (None, "text") else ""
    if source.startswith("data:") or len(source) >= BLOB_MIN_CHARS:
        key = hashlib.sha256(source.encode()).hexdigest()[:20]
        blobs.pop(key, None)
        blobs[key] = source  # re-inserted: the order of the blobs is the order of their last use
        return _with_source(obj, f"blob:{key}")
    return {k: _shared(v, blobs) for k, v in obj.items()}


def _with_source(part: dict[str, Any], source: str) -> dict[str, Any]:
    kind = part["type"]
    if kind == "input_audio":
        return {**part, "input_audio": {**(part.get("input_audio") or {}), "data": source}}
    inner = part.get(kind)
    return {**part, kind: {**(inner if isinstance(inner, dict) else {}), "url": source}}


def _within(blobs: dict[str, str], budget: int) -> dict[str, str]:
    """The most recently used blobs whose sizes add up to at most `budget`."""
    kept: dict[str, str] = {}
    for key, source in reversed(blobs.items()):
        if len(source) <= budget:
            kept[key] = source
            budget -= len(source)
    return kept


def _resolved(obj: Any, blobs: dict[str, str]) -> Any:
    """The inverse of `_shared`; a blob that was left out (the browser's budget) becomes a text note."""
    if isinstance(obj, list):
        return [_resolved(x, blobs) for x in obj]
    if not isinstance(obj, dict):
        return obj
    if obj.get("type") not in (None, "text") and (src := source_of(obj)).startswith("blob:"):
        if src[5:] in blobs:
            return _with_source(obj, blobs[src[5:]])
        return {"type": "text", "text": f"[{obj.get('type')} left out: too large to keep in the browser]"}
    return {k: _resolved(v, blobs) for k, v in obj.items()}


def load(data: Any) -> Snapshot:
    """An exported document -> a Snapshot. Raises ValueError with a message a user can act on."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    if not isinstance(data, dict) or data.get("format") not in READS:
        raise ValueError(f"not a playground conversation (expected format {FORMAT!r})")
    if isinstance(data.get("turns"), list):
        stored = data.get("blobs")
        blobs = stored if isinstance(stored, dict) else {}
        turns = turn_codec.turns_of(_resolved(data["turns"], blobs))
    else:
        turns = [_turn(i, m) for i, m in enumerate(data.get("messages") or [])]
        _attach_notes(turns, data.get("media"))
    names = {c.id: c.function.name for t in turns if t.reply is not None for c in t.reply.first.tool_calls}
    for t in turns:
        if t.role == "tool":
            t.tool_name = t.tool_name or names.get(t.tool_call_id)
    settings = {k: v for k, v in (data.get("settings") or {}).items() if k in BY_NAME}
    return Snapshot(
        Conversation(turns),
        str(data.get("system") or ""),
        str(data.get("tools") or ""),
        str(data.get("tool_choice") or "auto"),
        settings,
    )


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
            ToolCallItem(
                index=j,
                id=c.get("id"),
                type="function",
                function=FunctionCall(name=c["function"].get("name"), arguments=c["function"].get("arguments")),
            )
            for j, c in enumerate(m.get("tool_calls") or [])
        ]
        choice = ChoiceView(
            0,
            content=str(m.get("content") or ""),
            reasoning=str(m.get("reasoning_content") or ""),
            tool_calls=calls,
            finish_reason="tool_calls" if calls else "stop",
            answer_at=0,
        )
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
