"""Speculative decoding by prompt lookup (engine/core/speculative.py): the draft finder, verification (greedy and
rejection sampling), the KV rollback, and greedy output token for token identical on the real model."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from engine.core.engine import Engine, EngineLimits
from engine.core.kv import PAGE, KVCache
from engine.core.sampler import Row
from engine.core.sequence import Sequence
from engine.core.speculative import NgramIndex, decide, verify
from engine.core.types import EngineRequest, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=8)


def index(tokens: list[int], ngram_min: int = 1) -> NgramIndex:
    idx = NgramIndex(ngram_min=ngram_min)
    idx.extend(tokens)
    return idx


def test_draft_is_what_followed_the_latest_earlier_occurrence() -> None:
    # suffix (1, 2, 3) occurred at 0..2 (followed by 9, 9) and later at 5..7 (followed by 4, 5): the latest wins
    assert index([1, 2, 3, 9, 9, 1, 2, 3, 4, 5, 7, 1, 2, 3]).propose(2) == [4, 5]
    assert index([1, 2, 3, 9, 9, 1, 2, 3, 4, 5, 7, 1, 2, 3]).propose(8) == [4, 5, 7, 1, 2, 3]


def test_longer_suffixes_are_preferred_and_the_suffix_never_matches_itself() -> None:
    # "3" alone last occurred before 8; the 2-gram (2, 3) occurred before 6: the longer match decides
    assert index([2, 3, 6, 0, 3, 8, 2, 3]).propose(1) == [6]
    assert index([5, 6, 7]).propose(4) == []  # nothing repeats
    assert index([4, 4]).propose(3) == [4]  # the earlier 4 is followed by the last one
    assert index([1, 2, 7, 2], ngram_min=2).propose(3) == []  # a lone "2" is below the shortest n-gram


def test_sync_catches_up_with_prompt_and_output_incrementally() -> None:
    idx, prompt, out = NgramIndex(), [10, 11, 12, 13], []
    idx.sync(prompt, out)
    for tok in [14, 10, 11]:
        out.append(tok)
        idx.sync(prompt, out)
    assert idx.tokens == prompt + out
    assert idx.propose(3) == [12, 13, 14]


def test_backoff_skips_steps_after_misses_and_a_hit_resets_it() -> None:
    idx = NgramIndex()
    idx.verified(0, 3)
    assert idx.skip == 2
    idx.verified(0, 3)
    assert idx.skip == 4
    idx.verified(3, 3)
    assert idx.misses == 0


def test_draft_length_grows_after_full_acceptance_and_shrinks_after_a_rejection(service) -> None:
    """transformers' heuristic schedule, within the request's k: +2 when every draft was accepted, -1 (not below
    1) when one was not; draft_for applies it."""
    from engine.core.speculative import draft_for

    s = Sequence(0, GREEDY, service.tokenizer, KVCache(), 0.0)
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3]
    assert draft_for(s, prompt, 6, 100, 64) == [4, 5, 6, 7, 8, 9]  # first draft: k
    s.ngram.verified(2, 6)
    assert s.ngram.length == 5 and draft_for(s, prompt, 6, 100, 64) == [4, 5, 6, 7, 8]
    s.ngram.verified(5, 5)
    assert s.ngram.length == 7 and len(draft_for(s, prompt, 6, 100, 64)) == 6  # capped at k
    for _ in range(8):
        s.ngram.verified(1, 6)
    assert s.ngram.length == 1


def test_a_one_token_match_drafts_at_most_unigram_drafts() -> None:
    from engine.core.speculative import UNIGRAM_DRAFTS

    assert index([7, 1, 2, 3, 4, 5, 9, 7]).propose(5) == [1, 2, 3, 4, 5][:UNIGRAM_DRAFTS]
    assert index([6, 7, 1, 2, 3, 4, 5, 6, 7]).propose(5) == [1, 2, 3, 4, 5]  # a 2-gram match: all k


def row(params: SamplingParams, seed: int = 0, output: list[int] | None = None) -> Row:
    g = torch.Generator()
    g.manual_seed(seed)
    return Row(params, g, [], output if output is not None else [])


def test_greedy_decide_accepts_only_the_argmax() -> None:
    logits = torch.tensor([0.0, 3.0, 1.0, 2.0])
    assert decide(logits.clone(), row(GREEDY), 1) == (1, None, True)
    assert decide(logits.clone(), row(GREEDY), 3) == (1, None, False)
    # the samplers apply as in normal decoding: a repetition penalty moves the argmax
    pen = SamplingParams(temperature=0, repetition_penalty=2.0)
    assert decide(logits.clone(), row(pen, output=[1]), 3)[:2] == (3, None)


def test_rejection_sampling_keeps_the_distribution() -> None:
    """Accept the draft with p(draft), else draw from p without it: the token's distribution is p exactly. 40,000
    draws from a fixed seed: every frequency within 0.01 of p (its standard error is at most 0.0025)."""
    logits = torch.tensor([1.0, 0.2, -0.5, 1.5, 0.0])
    p = logits.softmax(-1)
    params = SamplingParams(temperature=1.0)
    n = 40_000
    for draft in (0, 2):  # a likely and an unlikely draft
        r = row(params, seed=1234 + draft)
        counts = torch.zeros(5)
        accepted = 0
        for _ in range(n):
            token, _, ok = decide(logits.clone(), r, draft)
            counts[token] += 1
            accepted += ok
        assert torch.allclose(counts / n, p, atol=0.01), (draft, counts / n, p)
        assert abs(accepted / n - float(p[draft])) < 0.01  # accepted with probability p(draft)


def test_rejection_sampling_is_reproducible_from_the_seed() -> None:
    logits = torch.tensor([1.0, 0.2, -0.5, 1.5, 0.0])
    params = SamplingParams(temperature=0.8, top_k=4)
    a, b = row(params, seed=7), row(params, seed=7)
    seq_a = [decide(logits.clone(), a, i % 5)[0] for i in range(200)]
    seq_b = [decide(logits.clone(), b, i % 5)[0] for i in range(200)]
    assert seq_a == seq_b
    # index 2 has the lowest logit: it never comes out of the top-4 distribution, even when it is the draft
    assert 2 not in seq_a


def sequence(service: Any, params: SamplingParams, fed: int) -> Sequence:
    s = Sequence(0, params, service.tokenizer, KVCache(length=fed), 0.0)
    s.output_ids = [5]
    return s


def stats() -> dict[str, Any]:
    return {"batch_size": 1, "step_start": 1.0, "step_end": 2.0, "eos_ids": frozenset({0})}


def logits_for(picks: list[int], vocab: int = 64) -> torch.Tensor:
    out = torch.zeros(len(picks), vocab)
    for i, t in enumerate(picks):
        out[i, t] = 10.0
    return out


def test_verify_rolls_the_cache_back_to_the_accepted_prefix(service) -> None:
    # cache held 100 tokens; the step fed the last token and drafts [7, 8, 9]: KV now 104 long
    s = sequence(service, SamplingParams(temperature=0, max_tokens=50), 104)
    accepted = verify(
        logits_for([7, 8, 20, 30]), [7, 8, 9], s, lambda: Row(s.params, torch.Generator(), [], s.output_ids), stats()
    )
    assert accepted == 2 and s.output_ids == [5, 7, 8, 20]
    assert s.cache.length == 103  # the last token and 7, 8 keep their KV; 20 is the next step's input
    assert s.pending.accepted == [0, 1] and s.pending.drafted == 3
    # one entry per token; the second and later tokens of the step waited 0 in the queue
    assert s.pending.batch_sizes == [1, 1, 1] and s.pending.queue_waits_us == [1_000_000, 0, 0]
    assert s.pending.token_times == [2.0, 2.0, 2.0]


def test_verify_takes_the_bonus_token_after_all_drafts(service) -> None:
    s = sequence(service, SamplingParams(temperature=0, max_tokens=50), 103)
    assert (
        verify(logits_for([7, 8, 9]), [7, 8], s, lambda: Row(s.params, torch.Generator(), [], s.output_ids), stats())
        == 2
    )
    assert s.output_ids == [5, 7, 8, 9] and s.cache.length == 103


def test_verify_breaks_ties_as_plain_decoding_does(service) -> None:
    """Greedy rows take every row's argmax in one pass: a tie goes to the lower id, as sample_rows gives it."""
    from engine.core.sampler import sample_rows

    tied = torch.zeros(3, 64)
    tied[:, 9] = tied[:, 4] = 5.0
    s = sequence(service, SamplingParams(temperature=0, max_tokens=50), 103)
    plain = sample_rows(tied[:1], [Row(s.params, torch.Generator(), [], s.output_ids)])[0][0]
    assert plain == 4
    assert verify(tied, [4, 9], s, lambda: Row(s.params, torch.Generator(), [], s.output_ids), stats()) == 1
    assert s.output_ids == [5, 4, 4]


def test_verify_stops_at_the_token_that_finishes(service) -> None:
    # EOS (id 0) accepted as a draft ends the step there; so does max_tokens
    s = sequence(service, SamplingParams(temperature=0, max_tokens=50), 104)
    verify(logits_for([7, 0, 9, 9]), [7, 0, 9], s, lambda: Row(s.params, torch.Generator(), [], s.output_ids), stats())
    assert s.output_ids == [5, 7, 0] and s.finished and s.cache.length == 102
    s = sequence(service, SamplingParams(temperature=0, max_tokens=3), 104)
    verify(logits_for([7, 8, 9, 9]), [7, 8, 9], s, lambda: Row(s.params, torch.Generator(), [], s.output_ids), stats())
    assert s.output_ids == [5, 7, 8] and s.finish_reason == "length"


# ---- the real model, through an engine with and without speculation ----


class Collector:
    def __init__(self) -> None:
        self.deltas: list[Any] = []
        self.done = threading.Event()

    def __call__(self, item: Any) -> None:
        if item is None:
            self.done.set()
        elif isinstance(item, list):
            self.deltas.extend(item)

    def tokens(self) -> list[int]:
        return [t for d in self.deltas for t in d.token_ids]


@pytest.fixture
def spec_engine(service):
    core = service.engine
    lim = EngineLimits(max_model_len=8192, step_log=0, speculative_ngram=4)
    e = Engine(
        core.runner.sibling(lim.kv_cache_tokens + PAGE * (lim.max_num_seqs + 1)), core.tokenizer, set(core.eos_ids), lim
    )
    e.start()
    yield e
    e.shutdown()


CODE = "def area(width, height):\n    result = width * height\n    return result\n"
REPEATING = f"Rename `result` to `value` in this code and return the whole code:\n\n{CODE}"


def ids(service, text: str) -> list[int]:
    return service.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)[
        "input_ids"
    ]


def generate(e: Engine, prompt: list[int], params: SamplingParams) -> Collector:
    c = Collector()
    e.submit(EngineRequest(f"r{id(c)}", prompt, params), c)
    assert c.done.wait(300)
    return c


def test_greedy_is_token_for_token_identical_and_drafts_are_accepted(service, spec_engine) -> None:
    prompt = ids(service, REPEATING)
    off = generate(spec_engine, prompt, SamplingParams(temperature=0, max_tokens=40, speculative=0))
    on = generate(spec_engine, prompt, SamplingParams(temperature=0, max_tokens=40))  # the engine's default: 4
    assert on.tokens() == off.tokens()
    assert not any(d.drafted for d in off.deltas) and not any(d.speculative for d in off.deltas)
    drafted, accepted = sum(d.drafted for d in on.deltas), sum(len(d.accepted) for d in on.deltas)
    assert accepted > 0 and drafted >= accepted
    on_stats = [(len(d.token_ids), len(d.batch_sizes), len(d.queue_waits_us), len(d.token_times)) for d in on.deltas]
    assert all(len({*s}) == 1 for s in on_stats)  # one stats entry per token, in every delta
    assert len({t for d in on.deltas for t in d.token_times}) < len(on.tokens())  # several tokens in one step


def test_rows_with_and_without_drafts_share_a_step(service, spec_engine) -> None:
    a, b = Collector(), Collector()
    pa, pb = ids(service, REPEATING), ids(service, "Name a colour.")
    ref_a = generate(spec_engine, pa, SamplingParams(temperature=0, max_tokens=32, speculative=0)).tokens()
    ref_b = generate(spec_engine, pb, SamplingParams(temperature=0, max_tokens=32, speculative=0)).tokens()
    spec_engine.submit(EngineRequest("a", pa, SamplingParams(temperature=0, max_tokens=32, speculative=4)), a)
    spec_engine.submit(EngineRequest("b", pb, SamplingParams(temperature=0, max_tokens=32, speculative=0)), b)
    assert a.done.wait(300) and b.done.wait(300)
    assert a.tokens() == ref_a and b.tokens() == ref_b
    assert 2 in [x for d in a.deltas for x in d.batch_sizes]  # they ran together
    assert sum(len(d.accepted) for d in a.deltas) > 0


def test_a_seed_reproduces_a_sampled_reply_with_speculation(service, spec_engine) -> None:
    prompt = ids(service, REPEATING)
    params = SamplingParams(temperature=0.7, seed=11, max_tokens=32, speculative=4)
    first, second = generate(spec_engine, prompt, params), generate(spec_engine, prompt, params)
    assert first.tokens() == second.tokens()
    assert sum(d.drafted for d in first.deltas) > 0


# ---- the runner: a drafted segment's rows attend as decode rows ----


def tiny_llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=5000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("kv", ["fp32", "bf16"])
@pytest.mark.parametrize("kernels", [True, False], ids=["cpu-kernels", "torch-ops"])
def test_drafted_rows_give_the_logits_of_feeding_the_tokens_one_by_one(kernels: bool, kv: str) -> None:
    """A drafted segment (the last token and its drafts, a row per token) runs in the step's one decode-attention
    call, each row against the positions up to its own: its rows equal feeding the tokens one step at a time. Two
    drafted segments of different lengths share the step with a decode row and a prompt; the drafts cross a page
    boundary; a rollback (the cache cut back to an accepted prefix) leaves the rejected positions unread. On float32
    and on bf16 KV pages (--kv-cache-dtype) alike."""
    from engine.core.model_runner import DecoderRunner, Segment

    runner = DecoderRunner(tiny_llama(), "cpu", kv_tokens=2048, use_kernels=kernels, kv_cache_dtype=kv)
    if kernels and runner.kern is None:
        pytest.skip("no CPU kernels here (no g++ or no AVX2)")
    assert runner.ops.name == ("cpu" if kernels else "torch")
    assert runner.pool.k.dtype == (torch.bfloat16 if kv == "bf16" else torch.float32)
    prompt = [int(t) for t in torch.randint(3, 5000, (2 * PAGE - 3,), generator=torch.Generator().manual_seed(1))]
    fed_a, fed_b = [11, 12, 13, 14, 15, 16], [21, 22, 23]  # the last token and 5 drafts; and 2 drafts

    def one_by_one(tokens: list[int]) -> torch.Tensor:
        cache = KVCache()
        runner.forward([Segment(cache, prompt)])
        rows = torch.cat([runner.forward([Segment(cache, [t])]) for t in tokens])
        runner.release(cache)
        return rows

    with torch.inference_mode():
        want_a, want_b = one_by_one(fed_a), one_by_one(fed_b[:1] + [31, 32, 33])
        want_c = one_by_one([41])
        a, b, c = KVCache(), KVCache(), KVCache()
        runner.forward([Segment(a, prompt), Segment(b, prompt[:-4]), Segment(c, prompt)])
        runner.forward([Segment(b, prompt[-4:], want_logits=False)])
        fresh = KVCache()
        got = runner.forward(
            [
                Segment(c, [41]),
                Segment(a, fed_a, all_logits=True),
                Segment(fresh, prompt[:5]),
                Segment(b, fed_b, all_logits=True),
            ]
        )
        assert got.shape == (1 + len(fed_a) + 1 + len(fed_b), 5000)
        torch.testing.assert_close(got[0:1], want_c, atol=1e-4, rtol=0)
        torch.testing.assert_close(got[1:7], want_a, atol=1e-4, rtol=0)
        assert got[1:7].argmax(-1).tolist() == want_a.argmax(-1).tolist()
        torch.testing.assert_close(got[8:9], want_b[:1], atol=1e-4, rtol=0)
        # b accepted no draft: its cache keeps the last token only, and the next step feeds other tokens
        b.length = len(prompt) + 1
        got = runner.forward([Segment(b, [31, 32, 33], all_logits=True)])
        torch.testing.assert_close(got, want_b[1:], atol=1e-4, rtol=0)
        for cache in (a, b, c, fresh):
            runner.release(cache)


def test_drafts_fill_a_step_only_up_to_step_rows(service) -> None:
    """Drafts ride along only while the step is small: decode rows and drafts together stay within STEP_ROWS, so
    a full batch drafts nothing; replies stay what they are without speculation. The runner is the real one; its
    forward is wrapped only to count each step's rows."""
    from engine.core.speculative import STEP_ROWS

    core = service.engine
    lim = EngineLimits(max_model_len=8192, step_log=0, speculative_ngram=8)
    runner = core.runner.sibling(lim.kv_cache_tokens + PAGE * (lim.max_num_seqs + 1))
    steps: list[tuple[int, int, bool]] = []  # (segments, rows, whether every segment decodes)
    forward = runner.forward

    def counted(segments: list[Any]) -> torch.Tensor:
        decoding = all(s.cache.length > 0 and (len(s.token_ids) == 1 or s.all_logits) for s in segments)
        steps.append((len(segments), sum(len(s.token_ids) for s in segments), decoding))
        return forward(segments)

    runner.forward = counted  # type: ignore[method-assign]
    e = Engine(runner, core.tokenizer, set(core.eos_ids), lim)
    e.start()
    try:
        prompt = ids(service, REPEATING)
        ref = generate(e, prompt, SamplingParams(temperature=0, max_tokens=24, speculative=0)).tokens()
        for n in (3, STEP_ROWS + 1):
            steps.clear()
            cs = [Collector() for _ in range(n)]
            for i, c in enumerate(cs):
                e.submit(EngineRequest(f"n{n}-{i}", prompt, SamplingParams(temperature=0, max_tokens=24)), c)
            assert all(c.done.wait(300) for c in cs)
            assert all(c.tokens() == ref for c in cs)
            decode_steps = [(segs, rows) for segs, rows, decoding in steps if decoding]
            assert all(rows <= max(STEP_ROWS, segs) for segs, rows in decode_steps)
            if n == 3:  # a small batch drafts
                assert any(rows > segs for segs, rows in decode_steps)
            else:  # a full one does not
                full = [(segs, rows) for segs, rows in decode_steps if segs >= STEP_ROWS]
                assert full and all(rows == segs for segs, rows in full)
    finally:
        e.shutdown()
