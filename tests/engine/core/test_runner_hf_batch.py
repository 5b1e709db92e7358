"""HFRunner's batched decode (one padded cohort cache) gives the logits of each sequence run alone.

A scripted schedule drives the runner as the engine does: ragged prompts (one in two chunks), sequences joining
the decode batch mid-way, leaving it (finished, aborted: released), forks continuing beside their parent and a
member that skips a step. Every logits row is checked against the HF forward over the sequence's whole history and
against the one-by-one runner (`batched=False`); the cohort's rows are checked to be the step's decode rows, so a
runner that silently ran them one by one fails too. Llama's shape (forced onto HFRunner), Phi-3 (a sliding window
shorter than the sequences) and GLM-4 (partial rotary, its own norms). Then the engine on the batched runner
(n, best_of, beams, an abort, preemption) against the engine on the one-by-one runner, token for token.
"""

from __future__ import annotations

import time

import pytest
import torch

from engine.core.hf_runner import Cohort, HFRunner
from engine.core.kv import KVCache
from engine.core.model_runner import make_runner
from engine.core.runner import Segment
from tests.family_fixture import tiny_model

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)

ATOL = 1e-4
FAMILIES = {"llama": {}, "phi3": {"sliding_window": 8}, "glm4": {}}


def hf_last(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0, -1].float()


class Script:
    """Sequences by name, each a cache per runner and its token history."""

    def __init__(self, model, runners: list[HFRunner]) -> None:
        self.model, self.runners = model, runners
        self.caches: dict[str, list[KVCache]] = {}
        self.tokens: dict[str, list[int]] = {}

    def step(self, work: dict[str, list[int]], want: set[str] | None = None) -> None:
        """One forward of these segments on every runner; the logits of those in `want` (default all) checked."""
        for name, ids in work.items():
            self.caches.setdefault(name, [KVCache() for _ in self.runners])
            self.tokens.setdefault(name, []).extend(ids)
        want = set(work) if want is None else want
        outs = []
        for k, runner in enumerate(self.runners):
            segs = [Segment(self.caches[n][k], ids, want_logits=n in want) for n, ids in work.items()]
            with torch.inference_mode():
                outs.append(runner.forward(segs))
        names = [n for n in work if n in want]
        for row, name in enumerate(names):
            ref = hf_last(self.model, self.tokens[name])
            for out in outs:
                torch.testing.assert_close(out[row], ref, atol=ATOL, rtol=0)
        batched = self.runners[0]
        decoding = [n for n, ids in work.items() if len(ids) == 1 and len(self.tokens[n]) > 1]
        if len(decoding) > 1:  # the step's decode rows ran as one batch, in one cohort
            assert batched.cohort is not None and len(batched.cohort.members) == len(decoding)
            assert all(isinstance(self.caches[n][0].hf, Cohort) for n in decoding)

    def fork(self, parent: str, child: str) -> None:
        self.caches[child] = [r.fork(c) for r, c in zip(self.runners, self.caches[parent])]
        self.tokens[child] = list(self.tokens[parent])

    def release(self, name: str) -> None:
        for r, c in zip(self.runners, self.caches.pop(name)):
            r.release(c)
        del self.tokens[name]


@pytest.mark.parametrize("family", FAMILIES)
def test_batched_decode_matches_each_sequence_alone(family: str) -> None:
    model = tiny_model(family, **FAMILIES[family])
    batched, alone = HFRunner(model, "cpu"), HFRunner(model, "cpu", batched=False)
    assert batched.batched and not alone.batched
    s = Script(model, [batched, alone])
    s.step({"a": [1, 17, 300, 40, 52, 9, 77], "b": [5, 6, 7]})  # two prompts, ragged
    s.step({"a": [11], "b": [12], "c": [3, 4, 5, 6]}, want={"a", "b"})  # c's first chunk beside two decodes
    s.step({"a": [13], "b": [14], "c": [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]})  # c's prompt ends
    for t in range(3):  # c joins a cohort two tokens behind... and longer than both
        s.step({"a": [20 + t], "b": [30 + t], "c": [40 + t]})
    s.fork("a", "a2")  # n > 1: a copy of a's row continues beside it
    s.step({"a": [50], "a2": [51], "b": [52], "c": [53]})
    s.release("c")  # the longest leaves: the cohort's columns are trimmed to the others
    s.step({"a": [54], "a2": [55], "b": [56]})
    s.step({"a": [57], "b": [58]})  # a2 skips a step (it leaves the cohort) ...
    s.step({"a": [59], "a2": [60], "b": [61], "d": [9] * 3})  # ... and joins again, beside a new prompt
    s.release("a")
    for t in range(6):  # past Phi-3's window of 8 for every row
        s.step({"a2": [70 + t], "b": [80 + t], "d": [90 + t]})
    s.fork("d", "d2")  # a fork of a member whose tokens are all inside the window slots
    s.step({"d": [100], "d2": [101], "b": [102]})
    for name in list(s.caches):
        s.release(name)
    assert batched.cohort is None  # the last release drops the cohort


@pytest.mark.parametrize("family", ["phi3", "glm4"])
def test_make_runner_gives_these_families_the_batched_hf_runner(family: str) -> None:
    runner = make_runner(tiny_model(family), "cpu")
    assert isinstance(runner, HFRunner) and runner.batched


def test_a_failed_batched_step_drops_the_cohort_and_the_runner_keeps_serving() -> None:
    model = tiny_model("llama")
    runner = HFRunner(model, "cpu")
    a, b = KVCache(), KVCache()
    with torch.inference_mode():
        runner.forward([Segment(a, [1, 2, 3]), Segment(b, [4, 5])])
        runner.forward([Segment(a, [6]), Segment(b, [7])])
        with pytest.raises(IndexError):  # a token outside the vocabulary: the embedding raises mid-step
            runner.forward([Segment(a, [8]), Segment(b, [10_000])])
        assert runner.cohort is None and a.hf is None and b.hf is None
        for cache in (a, b):  # what the engine does with the step's requests: ends them
            runner.release(cache)
        c, d = KVCache(), KVCache()
        runner.forward([Segment(c, [1, 2, 3]), Segment(d, [4, 5, 6, 7])])
        out = runner.forward([Segment(c, [9]), Segment(d, [9])])
    torch.testing.assert_close(out[0], hf_last(model, [1, 2, 3, 9]), atol=ATOL, rtol=0)
    torch.testing.assert_close(out[1], hf_last(model, [4, 5, 6, 7, 9]), atol=ATOL, rtol=0)


def test_a_sibling_runner_has_a_cohort_of_its_own() -> None:
    runner = HFRunner(tiny_model("llama"), "cpu")
    other = runner.sibling(1024)
    a, b = KVCache(), KVCache()
    with torch.inference_mode():
        for r, c in ((runner, a), (other, b)):
            r.forward([Segment(c, [1, 2, 3])])
            r.forward([Segment(c, [4])])
    assert runner.cohort is not None and other.cohort is not None and runner.cohort is not other.cohort
    assert runner.model is other.model


# ---- through the engine: the same tokens as one segment at a time --------------------------------------------------


@pytest.fixture(scope="module")
def phi3_parts():
    """The tiny Phi-3 checkpoint of the API tests (SmolLM2's tokenizer), loaded as the app would."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.family_fixture import build_family

    path = build_family("phi3")
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(path)


def run_engine(runner, tok, jobs, kv_tokens: int = 65536, abort: str | None = None):
    """Submit every (id, prompt text, params) at once; {id: (token ids per choice, batch sizes)}."""
    import threading

    from engine.core.engine import Engine, EngineLimits
    from engine.core.types import EngineRequest

    e = Engine(runner, tok, {tok.eos_token_id}, EngineLimits(kv_cache_tokens=kv_tokens, step_log=0))
    out: dict[str, list] = {rid: [] for rid, _, _ in jobs}
    done = {rid: threading.Event() for rid, _, _ in jobs}

    def sink(rid: str, item) -> None:
        if item is None:
            done[rid].set()
        elif isinstance(item, list):
            out[rid].extend(item)

    e.start()
    try:
        for rid, text, params in jobs:
            ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)["input_ids"]
            e.submit(EngineRequest(rid, ids, params), lambda x, rid=rid: sink(rid, x))
        if abort is not None:
            while not out[abort]:
                time.sleep(0.001)
            e.abort(abort)
        assert all(d.wait(120) for d in done.values())
        assert e.load()["kv_tokens_used"] == 0
        result = {}
        for rid, deltas in out.items():
            choices: dict[int, list[int]] = {}
            for d in deltas:
                choices.setdefault(d.index, []).extend(d.token_ids)
            result[rid] = ([choices[i] for i in sorted(choices)], [b for d in deltas for b in d.batch_sizes])
        return result, e.preemptions
    finally:
        e.shutdown()


def test_engine_on_the_batched_runner_gives_the_one_by_one_tokens(phi3_parts) -> None:
    """Ragged prompts, n = 3, best_of, beam search and an abort mid-way, all in flight together; then the same
    under a KV budget that preempts. The batched runner's tokens are the one-by-one runner's."""
    from engine.core.types import SamplingParams

    model, tok = phi3_parts
    jobs = [
        ("greedy", "hi", SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)),
        (
            "long",
            "Tell me about cats, dogs and birds in one sentence each.",
            SamplingParams(temperature=0, max_tokens=60, ignore_eos=True),
        ),
        ("n3", "Name a colour.", SamplingParams(temperature=1.0, seed=3, n=3, max_tokens=20, ignore_eos=True)),
        ("best", "Count.", SamplingParams(temperature=0.8, seed=4, n=1, best_of=3, max_tokens=12)),
        ("beam", "Why?", SamplingParams(temperature=0, n=2, use_beam_search=True, max_tokens=10, ignore_eos=True)),
        ("gone", "A long reply please.", SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)),
    ]
    batched, _ = run_engine(HFRunner(model, "cpu"), tok, jobs, abort="gone")
    alone, _ = run_engine(HFRunner(model, "cpu", batched=False), tok, jobs, abort="gone")
    for rid in ("greedy", "long", "n3", "best", "beam"):
        assert batched[rid][0] == alone[rid][0], rid
    assert len(batched["n3"][0]) == 3 and max(batched["n3"][1]) >= 5  # the step held the other requests' rows too
    assert len(batched["gone"][0][0]) < 200
    # Room for one request to finish and two to start (as test_engine's preemption test): the later ones are
    # preempted, prefill again alone, rejoin the batch and continue with the same tokens.
    texts = ["Name a colour.", "Count to five.", "What is a cat?"]
    params = [
        SamplingParams(temperature=0, max_tokens=150, ignore_eos=True),
        SamplingParams(temperature=0.9, seed=11, max_tokens=150, ignore_eos=True),
        SamplingParams(temperature=0.7, top_k=20, seed=5, max_tokens=150, ignore_eos=True),
    ]
    small = [(f"p{i}", t, p) for i, (t, p) in enumerate(zip(texts, params))]
    longest = max(
        len(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True)["input_ids"])
        for t in texts
    )
    budget = longest + 150 + 2 * (longest + 1 + 128)
    ref, _ = run_engine(HFRunner(model, "cpu", batched=False), tok, small)
    tight, preemptions = run_engine(HFRunner(model, "cpu"), tok, small, kv_tokens=budget)
    assert preemptions > 0
    assert all(tight[rid][0] == ref[rid][0] for rid, _, _ in small)


def test_the_cohort_counts_its_padding() -> None:
    """Rows of 41 and 6 tokens in one cohort hold 35 slots of padding; a 10-token sequence joining would add 31,
    a 50-token one 9 to each live row; a released row's padding goes with it."""
    runner = HFRunner(tiny_model("llama"), "cpu")
    a, b = KVCache(), KVCache()
    with torch.inference_mode():
        runner.forward([Segment(a, list(range(1, 41))), Segment(b, [1, 2, 3, 4, 5])])
        assert runner.padding == 0 and runner.join_padding(10) == 0  # no cohort before a decode step
        runner.forward([Segment(a, [7]), Segment(b, [8])])
    assert runner.padding == 35 and runner.join_padding(10) == 31 and runner.join_padding(50) == 2 * 9
    runner.release(b)
    assert runner.padding == 0
    runner.release(a)
    assert HFRunner(tiny_model("llama"), "cpu", batched=False).join_padding(10) == 0


@pytest.mark.parametrize("room", [False, True], ids=["budget-short-of-the-padding", "room-for-the-padding"])
def test_a_short_request_waits_while_its_padded_row_would_overrun_the_budget(phi3_parts, room: bool) -> None:
    """A short request arriving while a long one decodes would pad its cohort row to the long one's width. With a
    budget that holds both requests' own tokens but not that padding it waits, and never shares a step with the
    long one; with room for the padding too, it joins the long one's steps."""
    import threading

    from engine.core.engine import Engine, EngineLimits
    from engine.core.types import EngineRequest, SamplingParams

    model, tok = phi3_parts

    def prompt(text: str) -> list[int]:
        return tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)["input_ids"]

    long, short = prompt("Tell me about cats, dogs, birds and fish, one sentence each. " * 6), prompt("Hi.")
    runner = HFRunner(model, "cpu")
    pad = len(long) - len(short)
    budget = len(long) + 120 + len(short) + 5 + (pad + 40 if room else pad // 2)  # each holds its final size
    e = Engine(runner, tok, {tok.eos_token_id}, EngineLimits(kv_cache_tokens=budget, step_log=0))
    sizes: dict[str, list[int]] = {"long": [], "short": []}
    done = {rid: threading.Event() for rid in sizes}

    def sink(rid: str, item) -> None:
        if item is None:
            done[rid].set()
        elif isinstance(item, list):
            sizes[rid].extend(b for d in item for b in d.batch_sizes)

    e.start()
    try:
        e.submit(
            EngineRequest("long", long, SamplingParams(temperature=0, max_tokens=120, ignore_eos=True)),
            lambda x: sink("long", x),
        )
        deadline = time.monotonic() + 60
        while len(sizes["long"]) < 2 and time.monotonic() < deadline:  # decoding: its row is the cohort
            time.sleep(0.001)
        e.submit(
            EngineRequest("short", short, SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)),
            lambda x: sink("short", x),
        )
        assert all(d.wait(120) for d in done.values())
    finally:
        e.shutdown()
    assert len(sizes["short"]) == 5 and len(sizes["long"]) == 120
    assert max(sizes["short"]) == (2 if room else 1)
