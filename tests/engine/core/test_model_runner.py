"""The lean ragged-batch forward must match the HF forward on logits (not on text)."""

from __future__ import annotations

import copy

import pytest
import torch

from engine.core.model_runner import DecoderRunner, HFRunner, KVCache, Segment, make_runner

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)

ATOL = 2e-3


def hf_last_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0, -1].float()


def check_runner(runner, model) -> None:
    a, b = [1, 17, 300, 4000, 52, 9, 77], [5, 6, 7, 8]
    with torch.inference_mode():
        ca, cb = KVCache(), KVCache()
        # A prompt chunk (no logits wanted) packed beside another sequence's whole prompt.
        out = runner.forward([Segment(ca, a[:3], want_logits=False), Segment(cb, b)])
        assert out.shape[0] == 1
        torch.testing.assert_close(out[0], hf_last_logits(model, b), atol=ATOL, rtol=0)
        # The rest of the chunked prompt attends to the cached first chunk.
        out = runner.forward([Segment(ca, a[3:])])
        torch.testing.assert_close(out[0], hf_last_logits(model, a), atol=ATOL, rtol=0)
        # One decode token each, ragged lengths in one batch.
        out = runner.forward([Segment(ca, [42]), Segment(cb, [43])])
        torch.testing.assert_close(out[0], hf_last_logits(model, a + [42]), atol=ATOL, rtol=0)
        torch.testing.assert_close(out[1], hf_last_logits(model, b + [43]), atol=ATOL, rtol=0)
        # A prompt arriving beside a decode row: one step mixes both.
        cc = KVCache()
        out = runner.forward([Segment(cb, [44]), Segment(cc, a)])
        torch.testing.assert_close(out[0], hf_last_logits(model, b + [43, 44]), atol=ATOL, rtol=0)
        torch.testing.assert_close(out[1], hf_last_logits(model, a), atol=ATOL, rtol=0)
        runner.release(cc)
        # A fork continues independently of its parent.
        twin = runner.fork(ca)
        out = runner.forward([Segment(twin, [7]), Segment(ca, [8])])
        torch.testing.assert_close(out[0], hf_last_logits(model, a + [42, 7]), atol=ATOL, rtol=0)
        torch.testing.assert_close(out[1], hf_last_logits(model, a + [42, 8]), atol=ATOL, rtol=0)
        for cache in (ca, cb, twin):  # the runner may be the shared service's: leave its pool as it was
            runner.release(cache)


def test_lean_runner_matches_hf_on_smollm2(service) -> None:
    runner = service.engine.runner
    assert isinstance(runner, DecoderRunner)
    if runner.kern is not None:  # bf16-stored matrices, float32 math: the reference is the float32 HF forward
        assert runner.weights_dtype == torch.bfloat16
    check_runner(runner, copy.deepcopy(runner.model).float())


def tiny(config_cls, model_cls, **kw):
    torch.manual_seed(0)
    cfg = config_cls(
        vocab_size=5000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        **kw,
    )
    return model_cls(cfg).eval()


def test_lean_runner_matches_hf_on_qwen3_with_qk_norm() -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    model = tiny(Qwen3Config, Qwen3ForCausalLM, head_dim=16)
    runner = make_runner(model, "cpu")
    assert isinstance(runner, DecoderRunner)
    check_runner(runner, model)


def test_hf_runner_matches_hf_forward() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    model = tiny(LlamaConfig, LlamaForCausalLM)
    check_runner(HFRunner(model, "cpu"), model)


def test_lean_runner_matches_hf_on_a_float32_checkpoint() -> None:
    """Weights that bf16 cannot hold exactly stay float32 (the BLAS path) beside the fused kernels' steps."""
    from transformers import LlamaConfig, LlamaForCausalLM

    model = tiny(LlamaConfig, LlamaForCausalLM)
    runner = make_runner(model, "cpu")
    assert isinstance(runner, DecoderRunner)
    assert runner.weights_dtype == torch.float32
    check_runner(runner, model)


def test_lean_runner_torch_path_matches_hf() -> None:
    """Without the CPU kernels (no g++, another CPU, PLAYGROUND_CPU_KERNELS=0) the runner's torch ops do it all."""
    from transformers import LlamaConfig, LlamaForCausalLM

    model = tiny(LlamaConfig, LlamaForCausalLM)
    runner = DecoderRunner(model, "cpu", use_kernels=False)
    assert runner.kern is None and runner.ops.name == "torch"
    check_runner(runner, model)


def test_lean_runner_in_bf16_keeps_float32_activations_and_rounds_only_long_inputs() -> None:
    """`--dtype bf16` on a CPU with the kernels: bf16 matrices as loaded, float32 activations, KV and fused steps;
    a projection of BF16_MATMUL_ROWS rows or more rounds its input to bf16 for torch's bf16 matmul."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from engine.core.projection import BF16_MATMUL_ROWS

    model = tiny(Qwen2Config, Qwen2ForCausalLM).to(torch.bfloat16)  # q/k/v biases: added in float32
    for layer in model.model.layers:
        torch.nn.init.normal_(layer.self_attn.k_proj.bias, std=0.5)
    reference = copy.deepcopy(model).float()
    runner = make_runner(model, "cpu")
    if runner.kern is None:
        pytest.skip("no CPU kernels here: bf16 runs torch's bf16 ops")
    assert runner.bf16_matmul and runner.ops.name == "cpu"
    assert runner.dtype == torch.float32 and runner.k.dtype == torch.float32
    assert runner.weights_dtype == torch.bfloat16
    projections = [p for layer in runner.proj for p in layer] + [runner.lm_head]
    assert runner.bf16_rows and all(2 <= p.bf16_from <= 25 for p in projections)  # calibrated at load
    if torch.backends.mkldnn.is_available():  # packed once for oneDNN, not repacked per call
        assert all(p.packed is not None for p in projections)
    for p in projections:  # where this CPU's calibration put the crossing is its own business: fix it here
        p.bf16_from = BF16_MATMUL_ROWS
    check_runner(runner, reference)  # every step below the threshold: float32 math on the bf16 weights
    prompt = list(range(3, 3 + 3 * BF16_MATMUL_ROWS))
    cache = KVCache()
    with torch.inference_mode():
        got = runner.forward([Segment(cache, prompt)])[0]
        runner.release(cache)
    want = hf_last_logits(reference, prompt)
    err, scale = float((got - want).abs().max()), float(want.abs().max())
    assert 0 < err < 0.03 * scale, (err, scale)  # bf16 inputs: 8 significant bits, float32 sums


GREEDY_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three primary colours.",
    "Explain what a CPU cache is in one sentence.",
]


def greedy(runner, prompts: list[list[int]], steps: int) -> list[list[int]]:
    """Greedy continuations of every prompt, decoded together in one ragged batch."""
    caches = [KVCache() for _ in prompts]
    with torch.inference_mode():
        logits = runner.forward([Segment(c, p) for c, p in zip(caches, prompts)])
        out = [[int(row.argmax())] for row in logits]
        for _ in range(steps - 1):
            logits = runner.forward([Segment(c, [o[-1]]) for c, o in zip(caches, out)])
            for o, row in zip(out, logits):
                o.append(int(row.argmax()))
    for c in caches:
        runner.release(c)
    return out


def test_greedy_tokens_are_the_same_with_and_without_the_kernels(service) -> None:
    """The kernels change speed, not answers: SmolLM2, greedy, a fixed prompt set, token for token, the kernels'
    batch (bf16-stored weights, float32 math) against the torch path on float32 weights, one prompt at a time."""
    runner = service.engine.runner
    if runner.kern is None:
        pytest.skip("no CPU kernels here: the service already runs the torch path")
    tok = service.engine.tokenizer
    texts = [
        tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in GREEDY_PROMPTS
    ]
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    plain = DecoderRunner(copy.deepcopy(runner.model).float(), "cpu", kv_tokens=4096, use_kernels=False)
    together = greedy(runner, prompts, 24)
    alone = [greedy(plain, [p], 24)[0] for p in prompts]
    assert together == alone


def test_both_runners_implement_the_runner_protocol() -> None:
    """Engine is typed against runner.Runner. Only DecoderRunner has pages for the prefix cache to copy: its pool,
    in pages of kv.PAGE tokens, which is the prefix cache's block too."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.core.kv import PAGE, PagePool
    from engine.core.prefix_cache import BLOCK
    from engine.core.runner import Runner

    model = tiny(LlamaConfig, LlamaForCausalLM)
    lean, hf = make_runner(copy.deepcopy(model), "cpu"), HFRunner(model, "cpu")
    assert isinstance(lean, Runner) and isinstance(hf, Runner)
    assert isinstance(lean.pages, PagePool) and hf.pages is None
    assert lean.k.shape[2] == PAGE == BLOCK
