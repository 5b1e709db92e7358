"""The lean ragged-batch forward must match the HF forward on logits (not on text)."""

from __future__ import annotations

import copy

import torch

from engine.core.model_runner import DecoderRunner, HFRunner, KVCache, Segment, make_runner

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


def test_lean_runner_matches_hf_on_smollm2(service) -> None:
    runner = service.engine.runner
    assert isinstance(runner, DecoderRunner)
    if runner.kern is not None:  # bf16-stored matrices, float32 math: the reference is the float32 HF forward
        assert runner.weights_dtype == torch.bfloat16
    check_runner(runner, copy.deepcopy(runner.model).float())


def tiny(config_cls, model_cls, **kw):
    torch.manual_seed(0)
    cfg = config_cls(vocab_size=5000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, **kw)  # fmt: skip
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
    assert runner.kern is None and not runner.fused
    check_runner(runner, model)
