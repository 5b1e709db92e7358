"""An incremental scanner for the top level of one JSON object, fed text as it is generated.

It does not build values: it finds the top-level keys and the raw text of each value, so a streaming parser can
learn a tool call's `name` as soon as its string closes and pass on the `arguments` text exactly as the model
writes it. Whether the whole object is valid JSON is decided later by `json.loads`; on anything the scanner
does not expect it stops (`failed`), which only means nothing more is streamed.
"""

from __future__ import annotations

import json

_WS = " \t\n\r"


class ObjectScanner:
    def __init__(self) -> None:
        self.text = ""
        self.pos = 0  # characters of `text` consumed
        self.state = "start"
        self.key: str | None = None  # the key whose value is being read
        self.values: dict[str, str] = {}  # raw JSON text of each completed top-level value
        self.value_start = 0
        self._kind = ""  # of the value being read: "string", "container" or "scalar"
        self._mark = 0  # where the key being read starts
        self._depth = 0
        self._in_string = False
        self._escape = False

    @property
    def failed(self) -> bool:
        return self.state == "failed"

    @property
    def done(self) -> bool:
        return self.state == "done"

    def partial(self, key: str) -> str | None:
        """The raw text read so far of `key`'s value while it is still being read, else None."""
        if self.state == "in_value" and self.key == key:
            return self.text[self.value_start : self.pos]
        return None

    def feed(self, text: str) -> None:
        self.text += text
        text, i = self.text, self.pos
        while i < len(text) and self.state not in ("done", "failed"):
            i = self._step(text, i)
        self.pos = i

    def _step(self, text: str, i: int) -> int:
        c, state = text[i], self.state
        if state == "in_key":
            if self._string_char(c):
                key = self._decode(text[self._mark : i + 1])
                self.key = key if isinstance(key, str) else None
                self.state = "colon" if isinstance(key, str) else "failed"
        elif state == "in_value":
            if self._kind == "scalar" and (c in _WS or c in ",}"):
                self._close_value(i)
                return i  # the delimiter belongs to the object, not to the value
            if self._string_char(c) if self._kind == "string" else self._container_char(c):
                self._close_value(i + 1)
        elif c in _WS:
            pass
        elif state == "start":
            self.state = "first_key" if c == "{" else "failed"
        elif state in ("first_key", "key"):
            if c == '"':
                self._mark, self.state, self._escape = i, "in_key", False
            else:
                self.state = "done" if c == "}" and state == "first_key" else "failed"
        elif state == "colon":
            self.state = "value" if c == ":" else "failed"
        elif state == "value":
            self.value_start, self.state = i, "in_value"
            self._kind = "string" if c == '"' else "container" if c in "{[" else "scalar"
            self._depth, self._in_string, self._escape = 1, False, False
        elif state == "after_value":
            self.state = "key" if c == "," else "done" if c == "}" else "failed"
        return i + 1

    def _string_char(self, c: str) -> bool:
        """Advance over one character inside a string; True when it is the closing quote."""
        if self._escape:
            self._escape = False
        elif c == "\\":
            self._escape = True
        elif c == '"':
            return True
        return False

    def _container_char(self, c: str) -> bool:
        """Advance over one character inside an object or array value; True when it closes the value."""
        if self._in_string:
            self._in_string = not self._string_char(c)
        elif c == '"':
            self._in_string = True
        elif c in "{[":
            self._depth += 1
        elif c in "}]":
            self._depth -= 1
            return self._depth == 0
        return False

    def _close_value(self, end: int) -> None:
        assert self.key is not None
        self.values.setdefault(self.key, self.text[self.value_start : end])  # like a stream, the first one counts
        self.state = "after_value"

    @staticmethod
    def _decode(raw: str) -> object:
        try:
            return json.loads(raw)
        except ValueError:
            return None
