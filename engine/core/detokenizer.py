"""Incremental detokenisation and stop-string matching for one sequence.

Text is released only when it can no longer change: bytes of an unfinished UTF-8 character wait for the next
token, and a tail that could still grow into a stop string waits until it either completes (the sequence
stops) or diverges. On finish everything left is released, so the concatenation of all deltas equals the
final text of a non-stream response.
"""

from __future__ import annotations

from typing import Any


def _held_tail(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
    best = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:n]):
                best = n
                break
    return best


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Any, skip_special_tokens: bool, stops: tuple[str, ...], include_stop: bool):
        self.tokenizer = tokenizer
        self.skip = skip_special_tokens
        self.stops = stops
        self.include_stop = include_stop
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0
        self.text = ""  # all text decoded so far (before stop truncation)
        self.released = 0  # characters of self.text already handed out
        self.matched_stop: str | None = None
        self._scan_from = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip, clean_up_tokenization_spaces=False)

    def add(self, token_id: int | None) -> str:
        """Feed one token (None = nothing new, e.g. EOS left undecoded); return newly releasable text."""
        if token_id is not None:
            self.ids.append(token_id)
            prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
            full = self._decode(self.ids[self.prefix_offset :])
            if len(full) > len(prefix) and not full.endswith("\ufffd"):
                self.text += full[len(prefix) :]
                self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        if self.stops and self.matched_stop is None:
            hit = self._find_stop()
            if hit is not None:
                pos, stop = hit
                self.matched_stop = stop
                self.text = self.text[: pos + (len(stop) if self.include_stop else 0)]
                return self.flush()
        hold = _held_tail(self.text, self.stops) if self.stops else 0
        return self._release(len(self.text) - hold)

    def _find_stop(self) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for stop in self.stops:
            pos = self.text.find(stop, max(0, self._scan_from - len(stop) + 1))
            if pos != -1 and (best is None or pos < best[0]):
                best = (pos, stop)
        self._scan_from = len(self.text)
        return best

    def _release(self, upto: int) -> str:
        if upto <= self.released:
            return ""
        out = self.text[self.released : upto]
        self.released = upto
        return out

    def flush(self) -> str:
        """Release everything still held (on finish), including an incomplete character as U+FFFD."""
        if self.matched_stop is None and self.read_offset < len(self.ids):
            prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
            full = self._decode(self.ids[self.prefix_offset :])
            self.text += full[len(prefix) :]
            self.prefix_offset = self.read_offset = len(self.ids)
        return self._release(len(self.text))
