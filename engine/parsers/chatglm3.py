"""ChatGLM3 tool calls (spec §8.6): segments after `<|assistant|>`, each a function name line and a fenced
`tool_call(key=value, ...)`. The format only shows itself whole, so streaming is pseudo-streaming: everything is
buffered and handed out at the end as either the calls or the content.
"""

from __future__ import annotations

import ast
import json
import re

from engine.parsers.events import IdFactory, ParsedDelta, ToolCallEvent

SEGMENT = "<|assistant|>"
_NAME = re.compile(r"[^\s`]+")
_FENCED = re.compile(r"```[\w+-]*[ \t]*\n(.*?)\n?[ \t]*```", re.DOTALL)
_JSON_SCALARS = (str, int, float, bool, type(None))


def _jsonable(value: object) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_jsonable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _jsonable(v) for k, v in value.items())
    return isinstance(value, _JSON_SCALARS) and value == value and value not in (float("inf"), float("-inf"))


def _segment_call(segment: str) -> tuple[str, str] | None:
    """(name, arguments JSON) when the segment is a name line plus a fenced `tool_call(...)`, else None."""
    first, _, rest = segment.strip("\n").partition("\n")
    name = first.strip()
    fenced = _FENCED.fullmatch(rest.strip())
    if not _NAME.fullmatch(name) or not fenced:
        return None
    try:
        tree = ast.parse(fenced.group(1).strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    call = tree.body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "tool_call"):
        return None
    if call.args or any(kw.arg is None for kw in call.keywords):  # positional or **kwargs: not keyword literals
        return None
    arguments = {}
    for kw in call.keywords:
        try:
            arguments[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    if not _jsonable(arguments):
        return None
    return name, json.dumps(arguments, ensure_ascii=False)


def parse_chatglm3(text: str) -> list[tuple[str, str]]:
    """The calls of a ChatGLM3 answer, in order, up to the first segment that is not a call."""
    segments = text.split(SEGMENT)
    if not segments[0].strip():
        segments = segments[1:]  # the answer began with the marker itself
    calls = []
    for segment in segments:
        call = _segment_call(segment)
        if call is None:
            break
        calls.append(call)
    return calls


class ChatGLM3Parser:
    def __init__(self, *, streaming: bool, id_factory: IdFactory) -> None:
        self.streaming = streaming  # either way the output is buffered and emitted at the end
        self._new_id = id_factory
        self._text = ""
        self._called = False

    @property
    def called(self) -> bool:
        return self._called

    def feed(self, text: str) -> ParsedDelta:
        self._text += text
        return ParsedDelta()

    def finish(self) -> ParsedDelta:
        calls, text, self._text = parse_chatglm3(self._text), self._text, ""
        self._called = bool(calls)
        if not calls:
            return ParsedDelta(text)
        return ParsedDelta("", tuple(ToolCallEvent(i, self._new_id(), n, a) for i, (n, a) in enumerate(calls)))
