"""Gemma 3 on the lean runner (engine/core/gemma.py) must match the HF forward on logits: a tiny random Gemma 3
with mixed layer types and a sliding window that the prompts cross, with the CPU kernels and with the torch ops."""

from __future__ import annotations

import copy

import pytest
import torch

from engine.core.kv import PAGE
from engine.core.model_runner import DecoderRunner, KVCache, Segment, make_runner

ATOL = 2e-3
# Against HF's float32 forward with bf16 KV pages (--kv-cache-dtype bf16): keys and values rounded to 8 bits of
# mantissa moved these tiny models' logits (about +-0.7) by up to 2.8e-3.
KV_ATOL = {"fp32": ATOL, "bf16": 1e-2}
WINDOW = 21  # not a multiple of PAGE: windows start inside a page


def tiny_gemma(bf16_weights: bool = False, **kw):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(
        vocab_size=3000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"],
        query_pre_attn_scalar=24,
        final_logit_softcapping=3.0,
        rope_local_base_freq=100.0,
        rope_theta=10000.0,
        **kw,
    )
    model = Gemma3ForCausalLM(cfg).eval()
    with torch.no_grad():  # HF initialises the (1 + w) norms to zero: give them something to fold
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0, 0.3)
        if bf16_weights:  # matrices bf16 can hold exactly: the runner keeps them in bf16 (the linear_bf16 kernel)
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).float())
    return model


def hf_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0, -1].float()


def ids(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, 3000, (n,), generator=g).tolist()


def check_gemma(runner, model) -> None:
    a, b, c = ids(50, 1), ids(9, 2), ids(37, 3)  # a and c cross the window; b stays inside it
    close = torch.testing.assert_close
    with torch.inference_mode():
        ca, cb = KVCache(), KVCache()
        # A prompt chunk (no logits) beside another sequence's whole prompt, then the rest of the chunked prompt
        # (its queries' windows start in the first chunk's pages).
        out = runner.forward([Segment(ca, a[:30], want_logits=False), Segment(cb, b)])
        close(out[0], hf_logits(model, b), atol=ATOL, rtol=0)
        out = runner.forward([Segment(ca, a[30:])])
        close(out[0], hf_logits(model, a), atol=ATOL, rtol=0)
        # Ragged decode: lengths 50 and 9 in one step, one past the window, one within it; then several steps so
        # the long one's window start moves across a page boundary.
        sa, sb = list(a), list(b)
        for t in range(12):
            sa.append(100 + t)
            sb.append(200 + t)
            out = runner.forward([Segment(ca, [sa[-1]]), Segment(cb, [sb[-1]])])
            if t % 4 == 3 or t < 2:
                close(out[0], hf_logits(model, sa), atol=ATOL, rtol=0)
                close(out[1], hf_logits(model, sb), atol=ATOL, rtol=0)
        # A whole prompt beside a decode row in one step, and a fork continuing apart from its parent.
        cc = KVCache()
        sb.append(7)
        out = runner.forward([Segment(cb, [7]), Segment(cc, c)])
        close(out[0], hf_logits(model, sb), atol=ATOL, rtol=0)
        close(out[1], hf_logits(model, c), atol=ATOL, rtol=0)
        twin = runner.fork(ca)
        out = runner.forward([Segment(twin, [5]), Segment(ca, [6]), Segment(cc, [8])])
        close(out[0], hf_logits(model, sa + [5]), atol=ATOL, rtol=0)
        close(out[1], hf_logits(model, sa + [6]), atol=ATOL, rtol=0)
        close(out[2], hf_logits(model, c + [8]), atol=ATOL, rtol=0)
        # Every token's logits of a multi-token chunk (the speculative path's all_logits).
        cd = KVCache()
        runner.forward([Segment(cd, c[:20], want_logits=False)])
        out = runner.forward([Segment(cd, c[20:], all_logits=True)])
        for j in range(20, len(c)):
            close(out[j - 20], hf_logits(model, c[: j + 1]), atol=ATOL, rtol=0)
        for cache in (ca, cb, cc, twin, cd):
            runner.release(cache)


def test_make_runner_takes_gemma3_on_the_lean_runner() -> None:
    model = tiny_gemma()
    runner = make_runner(model, "cpu")
    assert isinstance(runner, DecoderRunner) and runner.gemma is not None
    assert runner.gemma.sliding == [True, False, True, True] and runner.gemma.window == WINDOW
    assert runner.gemma.q_scale is not None  # query_pre_attn_scalar 24 against head_dim 16


def test_gemma3_lean_runner_matches_hf_with_the_cpu_kernels() -> None:
    model = tiny_gemma()
    runner = make_runner(model, "cpu")
    if runner.kern is None:
        pytest.skip("no CPU kernels on this machine")
    assert runner.ops.name == "cpu"
    check_gemma(runner, model)


def test_gemma3_lean_runner_matches_hf_with_bf16_stored_matrices() -> None:
    model = tiny_gemma(bf16_weights=True)
    reference = copy.deepcopy(model)  # the runner rebinds the HF modules' matrices to its bf16 copies
    runner = make_runner(model, "cpu")
    if runner.kern is None:
        pytest.skip("no CPU kernels on this machine")
    assert runner.weights_dtype == torch.bfloat16
    check_gemma(runner, reference)


def test_gemma3_lean_runner_matches_hf_with_the_torch_ops() -> None:
    model = tiny_gemma()
    runner = DecoderRunner(model, "cpu", use_kernels=False)
    assert runner.kern is None and runner.ops.name == "torch"
    check_gemma(runner, model)


def test_gemma3_without_softcap_and_with_the_default_scale() -> None:
    """query_pre_attn_scalar equal to head_dim (as in the 270M): no rescaling of q; no final softcap."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(1)
    cfg = Gemma3TextConfig(
        vocab_size=3000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=PAGE + 3,
        layer_types=["sliding_attention", "full_attention"],
        query_pre_attn_scalar=16,
        final_logit_softcapping=None,
    )
    model = Gemma3ForCausalLM(cfg).eval()
    runner = make_runner(model, "cpu")
    assert isinstance(runner, DecoderRunner) and runner.gemma is not None
    assert runner.gemma.q_scale is None and runner.gemma.softcap is None
    check_gemma(runner, model)


def test_sliding_layers_hold_and_read_only_the_pages_of_their_window() -> None:
    """An 80-token prompt keeps its five window pages until its next step (the prefix cache copies them first).
    Its first decode step, at position 80 with a 21-token window, sees 60..80, and the query at 64 a cached chain
    would give (WindowPages.drop) 44..64: the sliding layers' pool holds pages 2..5 of the sequence after it, pages
    0 and 1 went back, while the full layers keep all six. The next decode row (position 81) reads the window's
    three pages from position 48, its window starting 13 positions into the first; a prompt chunk's table starts at
    the page of its first query's window."""
    model = tiny_gemma()
    runner = make_runner(model, "cpu")
    assert isinstance(runner, DecoderRunner) and runner.gemma is not None and runner.window is not None
    free = runner.window.pool.free_pages
    cache = KVCache()
    with torch.inference_mode():
        runner.forward([Segment(cache, ids(80, 4))])
        assert runner.window.held(cache) == 5 and runner.window.pool.free_pages == free - 5
        runner.forward([Segment(cache, [9])])
    assert len(cache.pages) == 6 and cache.window[:2] == [0, 0] and all(cache.window[2:6])
    assert runner.window.held(cache) == 4 and runner.window.pool.free_pages == free - 4
    segs = [Segment(cache, [10])]
    win = runner.gemma.window_view(runner, segs, [(0, 1, 81)], []).rows
    assert win is not None and win.starts is not None
    assert win.table.tolist() == [cache.window[3:6]] and win.lens.tolist() == [82 - 48]
    assert win.starts.tolist() == [61 - 48]
    chunk = runner.gemma.window_view(runner, [Segment(cache, [9, 10])], [(0, 2, 80)], [0])
    index, first = chunk.chunks[0]
    assert first == 48 and torch.equal(torch.arange(64)[index], torch.tensor(cache.window[3:6]))
    runner.release(cache)
    assert runner.window.pool.free_pages == free and cache.window == []


@pytest.mark.parametrize("kv", ["fp32", "bf16"])
@pytest.mark.parametrize("kernels", [True, False], ids=["cpu-kernels", "torch-ops"])
def test_a_long_decode_keeps_its_window_pages_bounded_and_matches_hf(kernels: bool, kv: str) -> None:
    """200 tokens through a 21-token window, fed one step at a time: the sliding layers' pool never holds more
    than the window's pages, the page kept for the prefix cache and the one being written, and the logits stay
    HF's all the way, on float32 and on bf16 KV pages."""
    model = tiny_gemma()
    runner = DecoderRunner(model, "cpu", kv_tokens=1024, use_kernels=kernels, kv_cache_dtype=kv)
    if kernels and runner.kern is None:
        pytest.skip("no CPU kernels here (no g++ or no AVX2)")
    assert runner.window is not None and runner.window.pool.k.dtype == runner.pool.k.dtype == runner.kv_dtype
    seq = ids(200, 8)
    most = 0
    with torch.inference_mode():
        cache = KVCache()
        runner.forward([Segment(cache, seq[:5])])
        for n in range(5, len(seq)):
            out = runner.forward([Segment(cache, [seq[n]])])
            most = max(most, runner.window.held(cache))
            if n % 50 == 0 or n == len(seq) - 1:
                torch.testing.assert_close(out[0], hf_logits(model, seq[: n + 1]), atol=KV_ATOL[kv], rtol=0)
    assert most <= -(-WINDOW // PAGE) + 2 and len(cache.pages) == -(-200 // PAGE)
    runner.release(cache)


def test_a_rolled_back_draft_keeps_the_window_its_next_step_reads() -> None:
    """A drafted step past the window whose drafts are rejected (verify sets the cache length back to one past
    its first row): the pages dropped after it are only those no later query can see, so the next step, from
    the rolled-back length, matches HF."""
    model = tiny_gemma()
    runner = make_runner(model, "cpu")
    prompt, drafted = ids(40, 9), ids(12, 10)  # 12 rows: a window-and-a-half past the first one
    with torch.inference_mode():
        cache = KVCache()
        runner.forward([Segment(cache, prompt)])
        runner.forward([Segment(cache, drafted, all_logits=True)])
        cache.length = len(prompt) + 1  # every draft rejected: only the first input's KV stays
        out = runner.forward([Segment(cache, [77])])
    torch.testing.assert_close(out[0], hf_logits(model, [*prompt, drafted[0], 77]), atol=ATOL, rtol=0)
    runner.release(cache)


def test_the_window_pool_is_sized_to_what_the_engine_holds_at_once() -> None:
    """With the engine's limits (4 sequences, 64 tokens a step) the sliding layers' pool holds far fewer pages
    than the main one's 4096 tokens; without them, as many."""
    sized = make_runner(tiny_gemma(), "cpu", 4096, seqs=4, step_tokens=64)
    plain = make_runner(tiny_gemma(), "cpu", 4096)
    assert isinstance(sized, DecoderRunner) and isinstance(plain, DecoderRunner)
    assert sized.window is not None and plain.window is not None
    assert sized.window.pool.total_pages == -(-(2 * 4 * (WINDOW + 6 * PAGE) + 64) // PAGE)
    assert plain.window.pool.total_pages == plain.pool.total_pages == 4096 // PAGE
    assert sized.k.shape[0] == 1 and sized.window.pool.k.shape[0] == 3  # one full layer, three sliding ones


@pytest.mark.parametrize("kv", ["fp32", "bf16"])
def test_the_prefix_cache_loads_a_gemma_chain_only_with_its_window(kv: str) -> None:
    """Blocks stored after the window moved on (a reply decoded past it) keep their full layers' pages only. A
    conversation that goes on (the same tokens and more) loads the whole chain, its last blocks carrying the
    window; a prompt that shares only an early part, whose window pages were gone when stored, loads nothing; both
    answer as HF (on float32 and on bf16 KV pages)."""
    from engine.core.prefix_cache import PrefixCache

    model = tiny_gemma()
    runner = make_runner(model, "cpu", kv_cache_dtype=kv)
    cache_store = PrefixCache(4096)
    first = ids(70, 11)  # 4 whole blocks; the window of position 70 starts in block 3
    with torch.inference_mode():
        c = KVCache()
        runner.forward([Segment(c, first[:40])])
        for t in first[40:]:  # decoded one by one, as a reply is
            runner.forward([Segment(c, [t])])
        cache_store.store(first, c, runner.pages)
        runner.release(c)
        go_on = [*first, 5, 6, 7]
        chain = cache_store.match(go_on, pages=runner.pages)
        assert len(chain) == 4
        d = KVCache()
        runner.reserve(d, len(go_on))
        d.length = cache_store.load(chain, d, runner.pages)
        assert d.length == 64 and runner.window is not None and runner.window.held(d) == 2  # blocks 2 and 3
        out = runner.forward([Segment(d, go_on[64:])])
        torch.testing.assert_close(out[0], hf_logits(model, go_on), atol=KV_ATOL[kv], rtol=0)
        runner.release(d)
        early = [*first[:40], 9, 9, 9]  # blocks 0 and 1 match, but their window pages were dropped
        assert cache_store.match(early, pages=runner.pages) == []
        assert len(cache_store.match(early)) == 2  # without the runner's pages: what the keys alone match
        e = KVCache()
        runner.forward([Segment(e, first[:40])])  # that prefix again, its window pages all held
        cache_store.store(first[:40], e, runner.pages)
        runner.release(e)
        assert len(cache_store.match(early, pages=runner.pages)) == 2  # the fuller blocks replaced the partial ones


@pytest.mark.parametrize("kv", ["fp32", "bf16"])
@pytest.mark.parametrize("kernels", [True, False], ids=["cpu-kernels", "torch-ops"])
def test_gemma3_drafted_rows_across_the_window_equal_one_by_one(kernels: bool, kv: str) -> None:
    """Speculative drafts on Gemma 3: a drafted segment's rows (one decode row per token, the sliding layers' tables
    cut at each row's own window) beside a plain decode row equal feeding the tokens one step at a time, with the
    drafts crossing the 21-token window and a page boundary."""
    model = tiny_gemma()
    runner = DecoderRunner(model, "cpu", kv_tokens=2048, use_kernels=kernels, kv_cache_dtype=kv)
    if kernels and runner.kern is None:
        pytest.skip("no CPU kernels here (no g++ or no AVX2)")
    prompt, drafted, other = ids(2 * PAGE - 3, 5), ids(6, 6), ids(30, 7)  # drafts at 2 * PAGE - 3.., past the window

    with torch.inference_mode():
        cache = KVCache()
        runner.forward([Segment(cache, prompt)])
        want = torch.cat([runner.forward([Segment(cache, [t])]) for t in drafted])
        runner.release(cache)
        a, b = KVCache(), KVCache()
        runner.forward([Segment(a, prompt), Segment(b, other)])
        got = runner.forward([Segment(b, [7]), Segment(a, drafted, all_logits=True)])
        torch.testing.assert_close(got[1:], want, atol=ATOL, rtol=0)
        torch.testing.assert_close(got[:1], hf_logits(model, [*other, 7])[None], atol=KV_ATOL[kv], rtol=0)
        for c in (a, b):
            runner.release(c)


def test_the_roofline_counts_the_sliding_layers_up_to_their_window() -> None:
    """Keys and values of a position: 4 layers x 2 x 2 kv heads x 16 x 4 bytes, 3 layers of them sliding; a step
    over a 100-token context reads the sliding layers' 21-token window only."""
    from engine.core import roofline

    runner = make_runner(tiny_gemma(), "cpu")
    per_layer = 2 * 2 * 16 * 4
    assert roofline.kv_bytes_per_token(runner) == 4 * per_layer
    assert roofline.window_bytes_per_token(runner) == (WINDOW, 3 * per_layer)
    roof = roofline.Roofline(1e9, 0, 4 * per_layer, WINDOW, 3 * per_layer)
    assert roof.kv_bytes([100]) == 100 * per_layer + WINDOW * 3 * per_layer
