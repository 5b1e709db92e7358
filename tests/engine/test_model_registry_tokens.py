"""The registry reads a tokenizer.json's added tokens alone (engine/model_registry.py `_added_tokens`) and gets
what decoding the whole file gets, whatever the order of its keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.model_registry import _added_tokens

ADDED = [{"id": 0, "content": "<|im_start|>", "special": True}, {"id": 1, "content": "model", "special": True}]
MODEL = {"type": "BPE", "vocab": {"added_tokens": 5, "a": 0}, "merges": ["a b"]}
# Past the first read (256 KiB) and the next (1 MiB), with characters of two and three bytes to cut at its end.
LONG = [{"id": i, "content": f"<é_{i}_€>", "special": True} for i in range(40_000)]
LONG_MODEL = {"type": "BPE", "vocab": {f"é{i}€": i for i in range(40_000)}, "merges": []}


@pytest.mark.parametrize(
    "layout",
    [
        {"version": "1.0", "added_tokens": ADDED, "model": MODEL},  # as the tokenizers library writes it
        {"version": "1.0", "model": MODEL, "added_tokens": ADDED},  # the vocabulary first: the whole file
        {"added_tokens": ADDED},
        {"model": MODEL},
        {"version": "1.0", "added_tokens": LONG, "model": LONG_MODEL},  # read in steps until the list ends
        {"version": "1.0", "model": LONG_MODEL, "added_tokens": LONG},
        {"version": "1.0", "model": LONG_MODEL},
    ],
)
def test_added_tokens_as_the_whole_file_has_them(tmp_path: Path, layout: dict) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(layout, indent=2))
    assert _added_tokens(path) == layout.get("added_tokens", [])


def test_a_broken_tokenizer_json_has_none(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text('{"added_tokens": [{"id": 0, "content": "<s>"}, ')
    assert _added_tokens(path) == []
    assert _added_tokens(tmp_path / "missing.json") == []
