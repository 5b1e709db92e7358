"""Token id -> (text, raw bytes) for logprob entries (spec §4.4)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from engine.core.types import PromptTokenLogprob, TokenLogprob
from engine.protocol.response import LogprobEntry, TopLogprob

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode table used by byte-level BPE vocabularies."""
    visible = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, extra = list(visible), 0
    for b in range(256):
        if b not in visible:
            visible.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(visible, chars)}


class TokenFormatter:
    """Caches each token's display text and bytes; one per tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.special = set(getattr(tokenizer, "all_special_ids", []) or [])
        self._cache: dict[tuple[int, bool], tuple[str, list[int]]] = {}

    def token(self, token_id: int, skip_special: bool) -> tuple[str, list[int]]:
        key = (token_id, skip_special)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._compute(token_id, skip_special)
        return hit

    def _compute(self, token_id: int, skip_special: bool) -> tuple[str, list[int]]:
        if token_id in self.special:
            if skip_special:
                return "", []
            text = self.tokenizer.decode([token_id], skip_special_tokens=False)
            return text, list(text.encode("utf-8"))
        text = self.tokenizer.decode([token_id], skip_special_tokens=skip_special)
        piece = self.tokenizer.convert_ids_to_tokens(token_id)
        raw: bytes | None = None
        if isinstance(piece, str):
            match = _BYTE_TOKEN.match(piece)
            decoder = _byte_decoder()
            if match:
                raw = bytes([int(match.group(1), 16)])
            elif piece and all(ch in decoder for ch in piece):
                raw = bytes(decoder[ch] for ch in piece)
        if raw is None or (raw.decode("utf-8", "replace") != text and "\ufffd" not in text):
            raw = text.encode("utf-8")  # sentencepiece pieces ("▁the") and others: the decoded text is the bytes
        return text, list(raw)

    def entries(self, items: list[TokenLogprob], skip_special: bool) -> list[LogprobEntry]:
        out = []
        for item in items:
            text, raw = self.token(item.token_id, skip_special)
            entry = LogprobEntry(
                token=text, logprob=item.logprob, bytes=raw, top_logprobs=self._top(item.top, skip_special)
            )
            if item.processed is not None:  # asked for (`sampler_logprobs`): the candidates after the samplers
                entry.sampler_top_logprobs = self._top(item.processed, skip_special)
                entry.sampler_logprob = item.processed_logprob
            out.append(entry)
        return out

    def prompt_entries(self, items: list[PromptTokenLogprob | None]) -> list[dict[str, Any] | None]:
        """vLLM's `prompt_logprobs`: per prompt token None (the first) or {token id: {logprob, rank,
        decoded_token}}, the prompt's own token first, then the top others (rank = their place)."""
        out: list[dict[str, Any] | None] = []
        for item in items:
            if item is None:
                out.append(None)
                continue
            entry = {str(item.token_id): self._prompt_item(item.token_id, item.logprob, item.rank)}
            for rank, (tok, lp) in enumerate(item.top, start=1):
                entry.setdefault(str(tok), self._prompt_item(tok, lp, rank))
            out.append(entry)
        return out

    def _prompt_item(self, token_id: int, logprob: float, rank: int) -> dict[str, Any]:
        # JSON has no -inf: a token the model rules out entirely gets the lowest finite float32's order instead
        return {"logprob": max(logprob, -3.4e38), "rank": rank, "decoded_token": self.token(token_id, False)[0]}

    def _top(self, pairs: list[tuple[int, float]], skip_special: bool) -> list[TopLogprob]:
        return [
            TopLogprob(token=t, logprob=lp, bytes=b)
            for t, b, lp in ((*self.token(i, skip_special), lp) for i, lp in pairs)
        ]
