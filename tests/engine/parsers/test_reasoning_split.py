"""The token-level reasoning split of spec §7.2-§7.6, on a real tokenizer, one token at a time.

SmolLM2 has no think tags, so two of its special tokens stand in for <think> and </think>: the split works on
ids, whatever text the tags have. The same split with a real Qwen3 reasoning model is tested end to end in
test_api_reasoning.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.core.model_runner import KVCache
from engine.core.sequence import Sequence
from engine.core.types import SamplingParams

EOS = 2


@pytest.fixture(scope="module")
def tok(service) -> Any:
    return service.tokenizer


@pytest.fixture(scope="module")
def tags(tok) -> tuple[int, int]:
    start, end = tok.convert_tokens_to_ids("<|im_start|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    assert EOS not in (start, end) and start != end
    return start, end


def run(tok, params: SamplingParams, ids: list[int]) -> tuple[Sequence, str, str]:
    seq = Sequence(0, params, tok, KVCache(), 0.0)
    reasoning = content = ""
    for t in ids:
        if seq.forced:
            t = seq.forced.pop(0)
        seq.append(t, 0.0, None, batch_size=1, step_start=0.0, step_end=0.0, eos_ids=frozenset({EOS}))
        d = seq.take_delta()
        reasoning, content = reasoning + d.reasoning_text, content + d.text
        if seq.finished:
            break
    return seq, reasoning, content


def ids(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def test_tags_split_reasoning_from_content(tok, tags) -> None:
    s, e = tags
    g = [s, *ids(tok, "Two plus two is four."), e, *ids(tok, "The answer is 4."), EOS]
    seq, reasoning, content = run(tok, SamplingParams(max_tokens=100, think_ids=tags), g)
    assert (reasoning, content) == ("Two plus two is four.", "The answer is 4.")
    assert seq.reasoning_tokens == g.index(e)  # the leading <think> counts (§7.5)
    assert seq.finish_reason == "stop"


def test_opening_tag_is_optional(tok, tags) -> None:
    s, e = tags
    g = [*ids(tok, "Thinking."), e, *ids(tok, "Done."), EOS]
    seq, reasoning, content = run(tok, SamplingParams(max_tokens=100, think_ids=tags), g)
    assert (reasoning, content, seq.reasoning_tokens) == ("Thinking.", "Done.", g.index(e))


def test_without_a_closing_tag_everything_is_reasoning(tok, tags) -> None:
    s, _ = tags
    g = [s, *ids(tok, "Still thinking about it"), EOS]
    seq, reasoning, content = run(tok, SamplingParams(max_tokens=100, think_ids=tags), g)
    assert (reasoning, content) == ("Still thinking about it", "")
    assert seq.reasoning_tokens == len(g) - 1  # the EOS is not part of G

    seq, reasoning, content = run(tok, SamplingParams(max_tokens=4, think_ids=tags), g)
    assert seq.finish_reason == "length" and seq.reasoning_tokens == 4 and content == ""


def test_later_tags_stay_in_content_as_text(tok, tags) -> None:
    s, e = tags
    g = [s, *ids(tok, "a"), e, *ids(tok, "b"), s, e, EOS]
    params = SamplingParams(max_tokens=100, think_ids=tags, skip_special_tokens=False)
    _, reasoning, content = run(tok, params, g)
    assert reasoning == "a" and content == "b<|im_start|><|endoftext|>"


def test_stop_string_inside_reasoning_is_kept_there(tok, tags) -> None:
    s, e = tags
    g = [s, *ids(tok, "Let me check the rules here. More."), e, *ids(tok, "Answer."), EOS]
    params = SamplingParams(max_tokens=100, think_ids=tags, stop=("rules",), include_stop_str_in_output=False)
    seq, reasoning, content = run(tok, params, g)
    assert (reasoning, content) == ("Let me check the rules", "")
    assert (seq.finish_reason, seq.stop_reason) == ("stop", "rules")


def test_stop_string_in_content_follows_include_stop(tok, tags) -> None:
    s, e = tags
    g = [s, *ids(tok, "Think."), e, *ids(tok, "One, two, three."), EOS]
    for include, expected in ((False, "One, "), (True, "One, two")):
        params = SamplingParams(max_tokens=100, think_ids=tags, stop=("two",), include_stop_str_in_output=include)
        _, reasoning, content = run(tok, params, g)
        assert (reasoning, content) == ("Think.", expected)


def test_thinking_budget_forces_the_early_stop_text(tok, tags) -> None:
    s, e = tags
    stop_text = ids(tok, " Time is up.")
    params = SamplingParams(max_tokens=100, think_ids=tags, thinking_budget=3, think_stop_ids=(*stop_text, e))
    g = [s, *ids(tok, "one two three four five six seven eight nine ten")[:2]]
    g += [0] * (len(stop_text) + 1) + ids(tok, "Answer.") + [EOS]  # 0s: whatever the model samples is replaced
    seq, reasoning, content = run(tok, params, g)
    assert reasoning == tok.decode(g[1:3]) + " Time is up."
    assert content == "Answer."
    assert seq.reasoning_tokens == 3 + len(stop_text)


def test_split_off_passes_tags_through(tok, tags) -> None:
    s, e = tags
    g = [s, *ids(tok, "x"), e, *ids(tok, "y"), EOS]
    seq, reasoning, content = run(tok, SamplingParams(max_tokens=100, skip_special_tokens=False), g)
    assert reasoning == "" and content == "<|im_start|>x<|endoftext|>y" and seq.reasoning_tokens is None
