"""Turns and replies as JSON and back, with every number a reply showed when it was new: its per-token times,
token ids, batch sizes and queue waits, log-probabilities, usage, the exact request and the raw chunks, and the
versions of each turn (playground/page/conversation.py `Fork`). An exported file and the browser's storage keep a
conversation this way, so a reloaded or imported reply shows its statistics, timeline, tokens and request again.

`lean` leaves out what is large and only shown on demand (the raw chunks, the alternatives of each token) for the
browser's storage when the conversation outgrows its budget; the statistics and the timeline always stay.
"""

from __future__ import annotations

from typing import Any

from engine.protocol.response import LogprobEntry, ToolCallItem, Usage
from playground.client.reply import ChoiceView, ReplyView
from playground.page.conversation import Fork, Turn

# ChoiceView's plain fields, kept as they are (lists of numbers, strings, flags).
CHOICE_FIELDS = (
    "content",
    "reasoning",
    "token_ids",
    "times_ms",
    "batch_sizes",
    "queue_waits_us",
    "prepare_ms",
    "finish_reason",
    "answer_at",
    "reasoning_part",
    "engine_timeline",
    "xray_id",
)
REPLY_FIELDS = ("error", "stopped", "done", "transcription", "media", "backend", "id", "branched", "prompt_logprobs")


def _usage(u: Usage | None) -> dict[str, Any] | None:
    # which fields the backend sent is itself a fact the page shows ("not provided"): kept under "sent"
    return {**u.model_dump(), "sent": sorted(u.model_fields_set)} if u is not None else None


def _usage_of(d: Any) -> Usage | None:
    if not isinstance(d, dict):
        return None
    sent = {str(k) for k in d.get("sent") or [] if k in Usage.model_fields}
    values = Usage.model_validate({k: v for k, v in d.items() if k != "sent"})
    return Usage.model_construct(_fields_set=sent, **dict(values))


def steps_doc(steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A reply's x-ray steps as columns and rows (the keys once, not once a token): a fifth of the size."""
    if not steps:
        return None
    keys = list(steps[0])
    return {"keys": keys, "rows": [[s.get(k) for k in keys] for s in steps]}


def steps_of(d: Any) -> list[dict[str, Any]]:
    if not isinstance(d, dict) or not isinstance(d.get("keys"), list) or not isinstance(d.get("rows"), list):
        return []
    keys = [str(k) for k in d["keys"]]
    return [dict(zip(keys, row)) for row in d["rows"] if isinstance(row, list) and len(row) == len(keys)]


def choice_doc(c: ChoiceView, lean: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {"index": c.index, **{k: getattr(c, k) for k in CHOICE_FIELDS}}
    if c.steps:  # the scheduler x-ray (playground/page/tabs/xray.py): kept in lean documents too
        doc["steps"] = steps_doc(c.steps)
    doc["tool_calls"] = [call.model_dump(exclude_none=True) for call in c.tool_calls]
    doc["usage"] = _usage(c.usage)
    if c.logprobs:
        keep = {"top_logprobs", "bytes", "sampler_top_logprobs"} if lean else set()
        doc["logprobs"] = [e.model_dump(exclude=keep) for e in c.logprobs]
    return doc


def choice_of(d: dict[str, Any]) -> ChoiceView:
    c = ChoiceView(int(d.get("index") or 0))
    for k in CHOICE_FIELDS:
        if k in d and d[k] is not None:
            setattr(c, k, d[k])
    c.tool_calls = [ToolCallItem.model_validate(x) for x in d.get("tool_calls") or []]
    c.steps = steps_of(d.get("steps"))
    c.logprobs = [LogprobEntry.model_validate({"bytes": [], **x}) for x in d.get("logprobs") or []]
    c.usage = _usage_of(d.get("usage"))
    return c


def reply_doc(r: ReplyView, lean: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {k: getattr(r, k) for k in REPLY_FIELDS}
    doc["choices"] = [choice_doc(c, lean) for _, c in sorted(r.choices.items())]
    doc["usage"] = _usage(r.usage)
    if not lean:
        doc["raw"] = list(r.raw)
    return doc


def reply_of(d: dict[str, Any]) -> ReplyView:
    r = ReplyView()
    for k in REPLY_FIELDS:
        if k in d and d[k] is not None:
            setattr(r, k, d[k])
    for c in d.get("choices") or []:
        view = choice_of(c)
        r.choices[view.index] = view
    r.usage = _usage_of(d.get("usage"))
    r.raw.extend(str(x) for x in d.get("raw") or [])
    r.done = True  # a kept reply is over, whatever it was doing when it was saved
    return r


TURN_FIELDS = ("role", "content", "request", "tool_call_id", "tool_name", "parts", "attachments", "previews")


def turn_doc(t: Turn, lean: bool = False, with_fork: bool = True) -> dict[str, Any]:
    """One turn; with its fork's other versions (each a list of turns) when it is the shown version's first."""
    doc: dict[str, Any] = {k: getattr(t, k) for k in TURN_FIELDS if getattr(t, k) not in (None, "", [], {})}
    if t.reply is not None:
        doc["reply"] = reply_doc(t.reply, lean)
    if t.transcripts:
        doc["transcripts"] = {str(j): v for j, v in t.transcripts.items()}
    if t.media:
        doc["taken"] = {str(j): v for j, v in t.media.items()}
    if with_fork and t.fork is not None and len(t.fork) > 1:
        doc["versions"] = {
            "active": t.fork.active,
            "kinds": t.fork.kinds,
            "others": {str(k): tail_doc(tail, lean) for k, tail in enumerate(t.fork.tails) if tail is not None},
        }
    return doc


def tail_doc(turns: list[Turn], lean: bool = False) -> list[dict[str, Any]]:
    """A version's turns: its first turn's fork is the one being written, so only the later turns bring theirs."""
    return [turn_doc(t, lean, with_fork=j > 0) for j, t in enumerate(turns)]


def turn_of(d: dict[str, Any]) -> Turn:
    role = d.get("role")
    if role not in ("user", "assistant", "tool"):
        raise ValueError(f"a turn has no role user, assistant or tool (got {role!r})")
    t = Turn(str(role), str(d.get("content") or ""))
    t.request = d.get("request") if isinstance(d.get("request"), dict) else None
    t.tool_call_id, t.tool_name = d.get("tool_call_id"), d.get("tool_name")
    t.parts = [p for p in d.get("parts") or [] if isinstance(p, dict)]
    t.attachments = [str(a) for a in d.get("attachments") or []]
    t.previews = [str(p) for p in d.get("previews") or []]
    t.transcripts = {int(j): str(v) for j, v in (d.get("transcripts") or {}).items() if str(j).isdigit()}
    t.media = {int(j): v for j, v in (d.get("taken") or {}).items() if str(j).isdigit() and isinstance(v, dict)}
    if isinstance(d.get("reply"), dict):
        t.reply = reply_of(d["reply"])
    elif role == "assistant":
        t.reply = ReplyView(done=True)
    return t


def turns_of(docs: Any) -> list[Turn]:
    """A list of turn documents back into turns, with their versions (nested as they were written)."""
    if not isinstance(docs, list):
        raise ValueError("`turns` is not a list")
    turns = []
    for d in docs:
        if not isinstance(d, dict):
            raise ValueError("a turn is not an object")
        t = turn_of(d)
        turns.append(t)
        versions = d.get("versions")
        if isinstance(versions, dict) and isinstance(versions.get("others"), dict):
            t.fork = _fork_of(versions, t)
    return turns


def _fork_of(versions: dict[str, Any], shown: Turn) -> Fork | None:
    others = {int(k): turns_of(v) for k, v in versions["others"].items() if str(k).isdigit() and v}
    active = versions.get("active")
    n = len(others) + 1
    if (
        not isinstance(active, int)
        or not 0 <= active < n
        or active in others
        or set(others) | {active} != set(range(n))
    ):
        return None  # an inconsistent record: the shown version alone
    kinds = versions.get("kinds")
    fork = Fork(
        tails=[others.get(k) for k in range(n)],
        active=active,
        kinds=[str(x) for x in kinds] if isinstance(kinds, list) and len(kinds) == n else ["?"] * n,
    )
    for tail in others.values():
        tail[0].fork = fork
    shown.fork = fork
    return fork
