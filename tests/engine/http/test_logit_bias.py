"""`logit_bias` (OpenAI's semantics, issue 33 item 2) through the real server on the bundled model: a token id -> a
bias in [-100, 100] added to the logits before every sampler and the constraint masks, greedy requests included;
the same greedy tokens with speculative drafting on and off; n > 1, streams and beam search; the after-samplers
view shows the biased distribution; and the validation errors."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api_helpers import assert_422, entries, ok, text_of, user
from tests.conftest import MODEL, chat, sse_events

CAPITAL = [user("What is the capital of France?")]


def token_id(http: httpx.Client, text: str) -> int:
    """The one token id of `text` in the served model's vocabulary."""
    ids = ok(http.post("/tokenize", json={"prompt": text, "add_special_tokens": False}))["tokens"]
    assert len(ids) == 1, ids
    return ids[0]


@pytest.fixture(scope="module")
def banana(live: Any) -> tuple[int, str]:
    with live.client() as http:
        return token_id(http, " banana"), " banana"


def test_a_huge_positive_bias_makes_a_greedy_reply_that_token_repeated(http: httpx.Client, banana) -> None:
    tid, text = banana
    plain = text_of(ok(chat(http, messages=CAPITAL, temperature=0, max_tokens=5)))
    assert "banana" not in plain
    body = ok(chat(http, messages=CAPITAL, temperature=0, max_tokens=5, logit_bias={str(tid): 100}, logprobs=True))
    assert text_of(body) == text * 5
    assert [e["token"] for e in entries(body)] == [text] * 5
    assert body["choices"][0]["finish_reason"] == "length"


def test_a_negative_bias_bans_the_greedy_choice(http: httpx.Client) -> None:
    plain = ok(chat(http, messages=CAPITAL, temperature=0, max_tokens=8, logprobs=True))
    first = entries(plain)[0]["token"]
    first_id = token_id(http, first)
    biased = ok(
        chat(http, messages=CAPITAL, temperature=0, max_tokens=8, logprobs=True, logit_bias={str(first_id): -100})
    )
    assert all(e["token"] != first for e in entries(biased))
    assert text_of(biased) != text_of(plain)


def test_sampled_n2_and_stream_follow_the_bias(http: httpx.Client, banana) -> None:
    tid, text = banana
    bias = {str(tid): 100.0}
    body = ok(chat(http, messages=CAPITAL, temperature=1.0, seed=5, n=2, max_tokens=4, logit_bias=bias))
    assert [c["message"]["content"] for c in body["choices"]] == [text * 4, text * 4]
    r = chat(http, messages=CAPITAL, temperature=0, max_tokens=4, logit_bias=bias, stream=True)
    assert r.status_code == 200, r.text
    parts = [c["choices"][0]["delta"].get("content") or "" for c in sse_events(r.text)[:-1] if c["choices"]]
    assert "".join(parts) == text * 4


def test_beam_search_ranks_the_biased_scores(http: httpx.Client, banana) -> None:
    tid, text = banana
    body = ok(
        chat(http, messages=CAPITAL, use_beam_search=True, n=2, temperature=0, max_tokens=3, logit_bias={str(tid): 100})
    )
    assert text_of(body) == text * 3


def test_greedy_biased_tokens_are_the_same_with_drafting_on_and_off(http: httpx.Client) -> None:
    """Drafts come from the prompt's n-grams, which the bias may forbid: verification applies the bias too."""
    code = "def area(width, height):\n    result = width * height\n    return result\n"
    messages = [user(f"Rename `result` to `value` in this code and return the whole code:\n\n{code}")]
    greedy = {"messages": messages, "temperature": 0, "max_tokens": 40, "logprobs": True}
    plain = ok(chat(http, speculative=False, **greedy))
    tokens = [e["token"] for e in entries(plain)]
    banned = next(t for t in tokens[4:] if t.strip() and tokens.count(t) > 1)  # one the drafts would propose
    bias = {str(token_id(http, banned)): -100}
    off = ok(chat(http, speculative=False, logit_bias=bias, **greedy))
    on = ok(chat(http, speculative=True, logit_bias=bias, **greedy))
    assert banned not in [e["token"] for e in entries(off)]
    assert [e["token"] for e in entries(on)] == [e["token"] for e in entries(off)]
    assert on["usage"]["speculative"]["drafted"] > 0  # drafting did run on the biased request


def test_the_after_samplers_view_shows_the_bias(http: httpx.Client, banana) -> None:
    tid, text = banana
    body = ok(
        chat(
            http,
            messages=CAPITAL,
            temperature=0,
            max_tokens=2,
            logprobs=True,
            top_logprobs=3,
            sampler_logprobs=True,
            logit_bias={str(tid): 100},
        )
    )
    first = entries(body)[0]
    assert first["token"] == text
    assert all(t["token"] != text for t in first["top_logprobs"])  # the model alone does not rank it
    assert first["sampler_top_logprobs"][0]["token"] == text and first["sampler_logprob"] > -0.01


def test_the_openai_sdk_sends_logit_bias(oai, banana) -> None:
    tid, text = banana
    r = oai.chat.completions.create(
        model=MODEL, messages=CAPITAL, temperature=0, max_tokens=3, logit_bias={str(tid): 100}
    )
    assert r.choices[0].message.content == text * 3


@pytest.mark.parametrize(
    ("bias", "fragments"),
    [
        ({"abc": 5}, ["logit_bias", "'abc'", "token ids"]),
        ({"1.5": 5}, ["logit_bias", "'1.5'"]),
        ({"-3": 5}, ["logit_bias", "'-3'"]),
        ({"7": 100.5}, ["logit_bias.7", "[-100, 100]", "100.5"]),
        ({"7": -101}, ["logit_bias.7", "[-100, 100]"]),
        ({"7": "big"}, ["logit_bias.7", "must be a number"]),
        ({"7": True}, ["logit_bias.7", "must be a number"]),
        ({"999999999": 1}, ["logit_bias", "999999999", "outside the model's vocabulary"]),
        ([1, 2], ["logit_bias", "must be an object"]),
    ],
)
def test_bad_logit_bias_is_a_clear_422(http: httpx.Client, bias: Any, fragments: list[str]) -> None:
    assert_422(chat(http, max_tokens=2, logit_bias=bias), *fragments)


def test_the_sdk_gets_the_422_too(oai) -> None:
    import openai

    with pytest.raises(openai.UnprocessableEntityError) as caught:
        oai.chat.completions.create(model=MODEL, messages=CAPITAL, max_tokens=2, logit_bias={"49999999": 3})
    assert "outside the model's vocabulary" in caught.value.response.text


# ---- the samplers' order, without weights ------------------------------------------------------------------------
def row(**params: Any) -> Any:
    import torch

    from engine.core.sampler import Row
    from engine.core.types import SamplingParams

    return Row(SamplingParams(**params), torch.Generator().manual_seed(0), [1, 2], [])


def test_the_bias_comes_before_the_mask_and_the_penalties() -> None:
    import torch

    from engine.core.sampler import plain_greedy, processed_logits

    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    r = row(temperature=0.0, logit_bias=((3, 100.0),), repetition_penalty=2.0)
    assert not plain_greedy(r)  # a biased greedy row never takes the batch's shared argmax
    out, highest = processed_logits(logits.clone(), r)
    assert highest and int(out.argmax()) == 3 and out[3] == 100.0  # token 3 is unseen: no penalty
    r.mask = torch.tensor([True, True, True, False])
    out, _ = processed_logits(logits.clone(), r)
    assert out[3] == float("-inf") and int(out.argmax()) == 0  # the constraint still wins over a bias
    r = row(temperature=0.0, logit_bias=((1, 100.0),), repetition_penalty=2.0)
    out, _ = processed_logits(logits.clone(), r)
    assert out[1] == 51.0  # (2 + 100) / 2: the penalty sees the biased logit
