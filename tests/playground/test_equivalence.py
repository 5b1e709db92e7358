"""Cross-backend equivalence (issue 21, point 3): the embedded engine against itself reached by URL is "identical"
(prompt token ids through both /tokenize paths, reply tokens and their logprobs), and a side whose settings differ
is found to diverge at the first token where the replies part (a check that cannot always say identical)."""

from __future__ import annotations

from typing import Any

import pytest

from playground.client import equivalence
from playground.client.backend import LocalBackend
from playground.client.remote import RemoteBackend

PROMPTS = [
    "Name three colours.",
    [{"role": "system", "content": "Answer in one short sentence."}, {"role": "user", "content": "What is rain?"}],
    "Count from one to five in words.",
    "Write the word 'hello' in French.",
]


@pytest.fixture(scope="module")
def sides(service: Any, live: Any) -> tuple[LocalBackend, RemoteBackend]:
    return LocalBackend(service), RemoteBackend(live.url + "/v1")


def test_the_engine_against_itself_by_url_is_identical(sides: Any) -> None:
    here, there = sides
    verdicts = equivalence.run_sync(equivalence.acompare_set(here, there, PROMPTS, max_tokens=12))
    for v in verdicts:
        assert v.verdict == "identical", v.row()
        assert v.a.prompt_ids and v.a.prompt_ids == v.b.prompt_ids  # /tokenize in-process and over HTTP
        assert v.a.prompt_tokens == v.b.prompt_tokens == len(v.a.prompt_ids)
        assert v.a.tokens and v.a.tokens == v.b.tokens and v.a.text == v.b.text
        assert v.max_logprob_diff is not None and v.max_logprob_diff < 1e-3
    s = equivalence.summary(verdicts)
    assert s["prompts"] == len(PROMPTS) and s["identical"] == len(PROMPTS)


def test_a_side_with_other_settings_diverges_where_its_reply_parts(sides: Any) -> None:
    here, there = sides
    prompt = "Count from one to ten in words, separated by commas."
    v = equivalence.compare(here, there, prompt, max_tokens=16, b_params={"repetition_penalty": 1.8})
    assert v.verdict.startswith("diverges at "), v.row()
    at = v.diverge_at
    assert at is not None and v.verdict == f"diverges at {at}"
    assert v.a.token_bytes[:at] == v.b.token_bytes[:at] and v.a.token_bytes[at] != v.b.token_bytes[at]
    assert len(v.logprob_diffs) <= at
    row = v.row()
    assert row["token_a"] == v.a.tokens[at] and row["token_b"] == v.b.tokens[at]


def test_a_different_prompt_is_caught_before_the_replies() -> None:
    a = equivalence.SideReport("a", [1, 2, 3, 4], 4, ["x"], [b"x"], [-0.1], "x", "stop")
    b = equivalence.SideReport("b", [1, 2, 9, 4], 4, ["x"], [b"x"], [-0.1], "x", "stop")
    assert equivalence.judge(a, b).verdict == "prompts differ at 2"
    c = equivalence.SideReport("c", None, 5, ["x"], [b"x"], [-0.1], "x", "stop")  # no /tokenize: counts only
    assert equivalence.judge(a, c).verdict == "prompts differ at 4"
    d = equivalence.SideReport("d", [1, 2, 3, 4], 4, ["he", "llo"], [b"he", b"llo"], [-1, -1], "hello", "length")
    e = equivalence.SideReport("e", [1, 2, 3, 4], 4, ["hel", "lo"], [b"hel", b"lo"], [-1, -1], "hello", "length")
    assert equivalence.judge(d, e).verdict == "same text, different tokens"
    # The end: a skipped special token is "" here and "<|im_end|>" in vLLM; both stopped there, so both ended.
    f = equivalence.SideReport("f", [1], 1, ["a", ""], [b"a", b""], [-1, -1], "a", "stop")
    g = equivalence.SideReport("g", [1], 1, ["a", "<|im_end|>"], [b"a", b"<|im_end|>"], [-1, -1], "a", "stop")
    assert equivalence.judge(f, g).verdict == "identical"
    h = equivalence.SideReport("h", [1], 1, ["a", "b"], [b"a", b"b"], [-1, -1], "ab", "length")
    assert equivalence.judge(f, h).verdict == "diverges at 1"
    assert equivalence.first_difference([1, 2], [1, 2, 3]) == 2 and equivalence.first_difference([1], [1]) is None


def test_a_refused_side_is_an_error_not_a_verdict(sides: Any) -> None:
    here, there = sides
    v = equivalence.compare(here, there, "hi", max_tokens=4, b_params={"top_k": -5})
    assert v.verdict == "error" and "top_k" in (v.b.error or "")
