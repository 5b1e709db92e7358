"""Hermes-format tool calls (Qwen2.5, Qwen3, QwQ): `<tool_call>{"name": ..., "arguments": ...}</tool_call>`.

Non-stream (spec §8.2) is one regex pass at the end. Streaming (§8.5) walks the text as it comes: content is
released except for a tail that could still be the start of `<tool_call>`; inside a block the top level of the
JSON is scanned so the name goes out as soon as its string closes and the arguments text follows as written.
"""

from __future__ import annotations

import json
import re

from engine.parsers.events import IdFactory, ParsedDelta, ToolCallEvent
from engine.parsers.json_scan import ObjectScanner

START, END = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
_BODY = re.compile(r"\s*(\{.*\})\s*", re.DOTALL)  # _BLOCK's body, for one block already cut at its closing tag
_EMPTY_OBJECT = re.compile(r"\{\s*\}")
_OPEN_OBJECT = re.compile(r"\{\s*")


def _no_constants(name: str) -> None:
    raise ValueError(f"{name} is not JSON")  # json.loads would accept NaN / Infinity, which no client can parse


def _loads(text: str) -> object:
    try:
        return json.loads(text, parse_constant=_no_constants)
    except (ValueError, RecursionError):
        return None


def call_of(block_json: str) -> tuple[str, str] | None:
    """(name, arguments JSON text) of a block's captured JSON, or None when it is not a valid call (§8.2 step 2)."""
    obj = _loads(block_json)
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    arguments = obj.get("arguments")
    if isinstance(arguments, str):
        return obj["name"], arguments
    if isinstance(arguments, dict):
        return obj["name"], json.dumps(arguments, ensure_ascii=False)
    return None


def parse_hermes(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The non-stream algorithm of §8.2: (content, [(name, arguments)]); no calls leaves the text unchanged."""
    calls = [call_of(captured) for captured in _BLOCK.findall(text)]
    if not calls or any(call is None for call in calls):
        return text, []
    return text[: text.index(START)], calls  # type: ignore[return-value]


def _held(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag` (it may still become the tag)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class HermesParser:
    # Streaming modes: "text" before the first block (content flows), "block" inside one, "between" after a valid
    # block (text is dropped, only further blocks count), "plain" after a malformed first block that had sent
    # nothing (everything is content, as in the non-stream result), "dead" after a malformed block whose events
    # were already sent (nothing more; `called` is False so the choice finishes with stop/length).
    def __init__(self, *, streaming: bool, id_factory: IdFactory) -> None:
        self.streaming = streaming
        self._new_id = id_factory
        self._mode = "text"
        self._pending = ""  # text received but not yet handed out or scanned
        self._scanner = ObjectScanner()
        self._index = -1  # index of the last call that has sent events
        self._named = False  # whether the current block's name event went out
        self._args_sent = 0  # characters of the current block's raw arguments text sent
        self._valid = 0
        self._called = False

    @property
    def called(self) -> bool:
        return self._called if not self.streaming else self._valid > 0 and self._mode != "dead"

    def feed(self, text: str) -> ParsedDelta:
        self._pending += text
        return self._advance() if self.streaming else ParsedDelta()

    def finish(self) -> ParsedDelta:
        if not self.streaming:
            content, calls = parse_hermes(self._pending)
            self._pending, self._called = "", bool(calls)
            events = (ToolCallEvent(i, self._new_id(), name, args) for i, (name, args) in enumerate(calls))
            return ParsedDelta(content, tuple(events))
        delta = self._advance()
        content, rest, self._pending = delta.content, self._pending, ""
        if self._mode in ("text", "plain"):
            content += rest
        elif self._mode == "block":  # cut off (max_tokens, stop): not a call (§8.2 step 5)
            if self._named:
                self._mode = "dead"  # its name is out already: a client must not take it for a finished call
            elif self._index < 0:
                content += START + self._scanner.text + rest  # nothing was a call: all of it is plain content
        return ParsedDelta(content, delta.tool_calls)

    def _advance(self) -> ParsedDelta:
        content: list[str] = []
        events: list[ToolCallEvent] = []
        while self._pending:
            if self._mode in ("plain", "dead"):
                if self._mode == "plain":
                    content.append(self._pending)
                self._pending = ""
            elif self._mode in ("text", "between"):
                at = self._pending.find(START)
                cut = len(self._pending) - _held(self._pending, START) if at < 0 else at
                if self._mode == "text":
                    content.append(self._pending[:cut])
                if at < 0:
                    self._pending = self._pending[cut:]
                    break
                self._pending = self._pending[at + len(START) :]
                self._mode, self._scanner, self._named, self._args_sent = "block", ObjectScanner(), False, 0
            else:
                at = self._pending.find(END)
                cut = len(self._pending) - _held(self._pending, END) if at < 0 else at
                self._scanner.feed(self._pending[:cut])
                events += self._stream_block()
                if at < 0:
                    self._pending = self._pending[cut:]
                    break
                self._pending = self._pending[at + len(END) :]
                events += self._close_block(content)
        return ParsedDelta("".join(content), tuple(events))

    def _stream_block(self) -> list[ToolCallEvent]:
        events, scanner = [], self._scanner
        if not self._named and isinstance(name := _loads(scanner.values.get("name", "null")), str):
            events.append(self._name_event(name))
        if not self._named:
            return events  # arguments written before the name wait for it
        raw = scanner.values.get("arguments")
        complete = raw is not None
        raw = raw if complete else scanner.partial("arguments")
        if raw is None or not raw.startswith("{"):
            return events  # a string (or invalid) value is sent whole when the block closes
        if _EMPTY_OBJECT.fullmatch(raw) and complete and not self._args_sent:
            piece = "{}"  # §8.5: an empty object is sent as "{}" whatever its whitespace
        elif not complete and _OPEN_OBJECT.fullmatch(raw):
            return events  # could still be an empty object
        else:
            piece = raw[self._args_sent :]
        self._args_sent = len(raw)
        if piece:
            events.append(ToolCallEvent(self._index, arguments=piece))
        return events

    def _name_event(self, name: str) -> ToolCallEvent:
        self._index += 1
        self._named = True
        return ToolCallEvent(self._index, id=self._new_id(), name=name)

    def _close_block(self, content: list[str]) -> list[ToolCallEvent]:
        body = _BODY.fullmatch(self._scanner.text)
        call = call_of(body.group(1)) if body else None
        if call is None:
            if self._index < 0:  # nothing sent yet: like the non-stream result, the text stays content
                content.append(START + self._scanner.text + END)
                self._mode = "plain"
            else:
                self._mode = "dead"
            return []
        events = [] if self._named else [self._name_event(call[0])]
        events += self._stream_block()  # arguments the scanner held back for a name that came after them
        if not self._args_sent:  # a string value (passed through unchanged), or text the scanner could not follow
            events.append(ToolCallEvent(self._index, arguments=call[1]))
        self._valid += 1
        self._mode = "between"
        return events
