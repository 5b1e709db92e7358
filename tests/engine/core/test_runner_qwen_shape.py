"""The lean runner against the HF forward on logits at the Qwen2.5-0.5B shape of bench/qwen_shape.py.

The model comes from the bench script's own builder (one definition for both) at the real width: hidden 896,
intermediate 4864, 14 query heads over 2 KV heads (head_dim 64), q/k/v biases (random, non-zero), tied
embeddings, RMSNorm eps 1e-6, RoPE theta 1e6. Only the depth (2 layers instead of 24) and the vocabulary (4,096
rows instead of 151,936) are cut, to keep the test to seconds; nothing is written to the cache. Its weights are
drawn in bf16 and loaded as float32, as a bf16 checkpoint is, so with the CPU kernels the runner keeps the
matrices in bf16 and the reference is the float32 HF forward on the same values.
"""

from __future__ import annotations

import copy

import pytest
import torch

from bench.qwen_shape import build_model, qwen_config
from engine.core.model_runner import DecoderRunner, make_runner
from tests.engine.core.test_model_runner import check_runner

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)

CUT = {"num_hidden_layers": 2, "vocab_size": 4096}
# The tokenizer's bos/eos ids (151643, 151645) lie past the cut vocabulary: unset them (transformers warns).
NO_TOKEN_IDS = {"bos_token_id": None, "eos_token_id": None}


@pytest.fixture(scope="module")
def model():
    """The float32 HF reference; each runner gets its own deep copy (a runner rebinds weights in place)."""
    return build_model(qwen_config(**CUT, **NO_TOKEN_IDS)).float()


def test_shape_is_qwen2_5_0_5b_but_for_depth_and_vocabulary(model) -> None:
    full, cut = qwen_config().to_dict(), model.config.to_dict()
    differs = {k for k in full.keys() | cut.keys() if full.get(k) != cut.get(k)}
    assert differs <= {*CUT, *NO_TOKEN_IDS, "layer_types", "dtype"}, differs  # dtype: float32 after .float()
    assert (full["hidden_size"], full["intermediate_size"], full["num_hidden_layers"]) == (896, 4864, 24)
    assert (full["num_attention_heads"], full["num_key_value_heads"], full["vocab_size"]) == (14, 2, 151936)
    assert full["tie_word_embeddings"] and full["rope_parameters"]["rope_theta"] == 1e6
    attn = model.model.layers[0].self_attn
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
        assert proj.bias is not None and proj.bias.abs().min() > 0
    assert model.lm_head.weight is model.model.embed_tokens.weight
    for p in model.parameters():
        assert p.dtype == torch.float32 and torch.equal(p.to(torch.bfloat16).float(), p)


def test_lean_runner_matches_hf_at_qwen_shape(model) -> None:
    runner = make_runner(copy.deepcopy(model), "cpu")
    assert isinstance(runner, DecoderRunner)
    if runner.kern is not None:  # bf16-stored matrices, float32 math
        assert runner.weights_dtype == torch.bfloat16
    check_runner(runner, model)


def test_lean_runner_torch_path_matches_hf_at_qwen_shape(model) -> None:
    """Without the CPU kernels the runner's torch ops do it all (weights stay float32)."""
    runner = DecoderRunner(copy.deepcopy(model), "cpu", use_kernels=False)
    assert runner.kern is None and runner.ops.name == "torch"
    check_runner(runner, model)
