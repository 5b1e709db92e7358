"""Incremental detokenisation with stop strings, on the real SmolLM2 tokenizer."""

from __future__ import annotations

import pytest

from engine.core.detokenizer import IncrementalDetokenizer

TEXT = "The capital of France is Paris. Émile visited 北京 yesterday!"


@pytest.fixture(scope="module")
def tok(service):
    return service.tokenizer


def feed(tok, text: str, stops=(), include=False) -> tuple[list[str], IncrementalDetokenizer]:
    d = IncrementalDetokenizer(tok, True, tuple(stops), include)
    pieces = []
    for t in tok(text, add_special_tokens=False)["input_ids"]:
        pieces.append(d.add(t))
        if d.matched_stop:
            break
    pieces.append(d.flush())
    return pieces, d


def test_concatenated_deltas_equal_full_decode(tok) -> None:
    pieces, _ = feed(tok, TEXT)
    assert "".join(pieces) == TEXT
    assert all("\ufffd" not in p for p in pieces)  # multi-byte characters are held until complete


def test_stop_string_spanning_tokens_is_cut_and_never_leaks(tok) -> None:
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    # Pick a stop string that starts inside one token and ends inside the next.
    first = tok.decode(ids[:3])
    stop = first[-2:] + tok.decode(ids[3:4])[:2]
    pieces, d = feed(tok, TEXT, [stop])
    assert d.matched_stop == stop
    assert "".join(pieces) == TEXT[: TEXT.index(stop)]
    pieces, _ = feed(tok, TEXT, [stop], include=True)
    assert "".join(pieces) == TEXT[: TEXT.index(stop) + len(stop)]


def test_partial_stop_is_held_then_released_when_it_diverges(tok) -> None:
    d = IncrementalDetokenizer(tok, True, ("Paris!",), False)
    released, held_seen = "", False
    for t in tok(TEXT, add_special_tokens=False)["input_ids"]:
        released += d.add(t)
        if d.text.endswith("Paris"):  # could still become the stop string: must not be out yet
            held_seen = True
            assert not released.endswith("Paris")
    released += d.flush()
    assert held_seen and d.matched_stop is None
    assert released == TEXT


def test_earliest_of_several_stops_wins(tok) -> None:
    pieces, d = feed(tok, TEXT, ["visited", "capital"])
    assert d.matched_stop == "capital"
    assert "".join(pieces) == "The "
