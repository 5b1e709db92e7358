"""LoRA adapters in the lean runner (engine/core/lora.py): the files checked, logits equal to PEFT's own PeftModel
forward (CPU kernels on and off), and rows of different adapters and the base model batched together giving each
row what it gives alone."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from engine.core.lora import LoraError, parse_specs, preflight, read_adapter
from engine.core.model_runner import DecoderRunner, KVCache, Segment

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)

ATOL = 2e-3
# PEFT 0.21 asks transformers 5 a deprecated property on every get_peft_model / from_pretrained
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


# ---- the files -----------------------------------------------------------------------------------------------------


def write_adapter(path: Path, config: dict | None = None, tensors: dict[str, list[int]] | None = None) -> Path:
    """A PEFT-shaped adapter directory with zero weights of the given shapes."""
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    cfg = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"], "bias": "none"}
    (path / "adapter_config.json").write_text(json.dumps({**cfg, **(config or {})}))
    shapes = tensors or {
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": [2, 64],
        "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": [64, 2],
    }
    save_file({k: torch.zeros(s) for k, s in shapes.items()}, str(path / "adapter_model.safetensors"))
    return path


def test_specs_are_id_equals_dir() -> None:
    assert parse_specs(["a=/x", " b = /y "]) == [("a", Path("/x")), ("b", Path("/y"))]
    for bad, why in (("a", "not id=DIR"), ("=/x", "not id=DIR"), ("a=", "not id=DIR"), ("a b=/x", "must match")):
        with pytest.raises(LoraError, match=why):
            parse_specs([bad])
    with pytest.raises(LoraError, match="given twice"):
        parse_specs(["a=/x", "a=/y"])


def test_a_bad_adapter_is_refused_naming_the_file_and_the_reason(tmp_path: Path) -> None:
    good = write_adapter(tmp_path / "good")
    adapter = read_adapter("good", good)
    assert (adapter.rank, adapter.scale, adapter.targets) == (2, 2.0, frozenset({"self_attn.q_proj"}))
    with pytest.raises(LoraError, match=r"missing.*adapter_model\.safetensors"):
        (tmp_path / "empty").mkdir()
        read_adapter("e", tmp_path / "empty")
    with pytest.raises(LoraError, match="not a directory"):
        read_adapter("n", tmp_path / "nowhere")
    cases = [
        ({"use_dora": True}, None, "adapter_config.json: use_dora"),
        ({"peft_type": "IA3"}, None, "peft_type 'IA3' is not LORA"),
        ({"bias": "all"}, None, "bias='all'"),
        ({"r": 4}, None, r"shape \[2, 64\], rank 4 expected"),
        ({}, {"base_model.model.lm_head.lora_A.weight": [2, 64]}, "not a LoRA matrix of a layer projection"),
        ({}, {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": [2, 64]}, "without its pair"),
    ]
    for i, (cfg, tensors, why) in enumerate(cases):
        path = write_adapter(tmp_path / f"bad{i}", cfg, tensors)
        with pytest.raises(LoraError, match=why) as err:
            read_adapter("bad", path)
        assert str(path) in str(err.value)
    broken = write_adapter(tmp_path / "broken")
    (broken / "adapter_model.safetensors").write_bytes(struct.pack("<Q", 5) + b"{nope")
    with pytest.raises(LoraError, match="adapter_model.safetensors: not a safetensors file"):
        read_adapter("x", broken)
    with pytest.raises(LoraError, match="served model's name"):
        preflight([f"base={good}"], served_name="base")


def test_an_adapter_that_does_not_fit_the_base_model_is_refused(tmp_path: Path) -> None:
    model = tiny_llama()
    runner = DecoderRunner(model, "cpu", 4096)
    wide = write_adapter(
        tmp_path / "wide",
        tensors={
            "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": [2, 96],
            "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": [64, 2],
        },
    )
    with pytest.raises(LoraError, match=r"wide/adapter_model.safetensors: layer 0 self_attn.q_proj: .*64x64"):
        runner.set_lora([read_adapter("wide", wide)])
    deep = write_adapter(
        tmp_path / "deep",
        tensors={
            "base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight": [2, 64],
            "base_model.model.model.layers.7.self_attn.q_proj.lora_B.weight": [64, 2],
        },
    )
    with pytest.raises(LoraError, match="layer 7 self_attn.q_proj: the base model has 2 layers"):
        runner.set_lora([read_adapter("deep", deep)])


def test_a_model_on_the_hf_forward_refuses_adapters(tmp_path: Path) -> None:
    from engine.cli import settings_from
    from engine.core.model_runner import HFRunner
    from engine.serving.factory import load_adapters

    settings = settings_from(["--lora-adapters", f"a={write_adapter(tmp_path / 'a')}"], environ={})
    with pytest.raises(LoraError, match="need the lean runner"):
        load_adapters(settings.engine, HFRunner(tiny_llama(), "cpu"))


# ---- logits against PEFT -----------------------------------------------------------------------------------------

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def tiny_llama():
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


def random_adapter(model, path: Path, rank: int, targets: list[str], seed: int) -> Path:
    """A PEFT adapter with random (not zero) B matrices, saved by PEFT itself."""
    import copy

    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    cfg = LoraConfig(r=rank, lora_alpha=rank * 3, target_modules=targets, init_lora_weights=False, bias="none")
    peft_model = get_peft_model(copy.deepcopy(model), cfg)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.mul_(0.5)
    peft_model.save_pretrained(path)
    return path


def peft_logits(model, path: Path, ids: list[int]) -> torch.Tensor:
    import copy

    from peft import PeftModel

    with torch.inference_mode():
        return PeftModel.from_pretrained(copy.deepcopy(model), path)(torch.tensor([ids])).logits[0, -1].float()


@pytest.mark.parametrize("kernels", [True, False], ids=["cpu-kernels", "torch-ops"])
def test_adapter_rows_match_peft_and_batch_with_the_base(tmp_path: Path, kernels: bool) -> None:
    import copy

    model = tiny_llama()
    paths = [
        random_adapter(model, tmp_path / "qv", 8, ["q_proj", "v_proj"], 1),
        random_adapter(model, tmp_path / "all", 4, ALL, 2),
    ]
    runner = DecoderRunner(copy.deepcopy(model), "cpu", 4096, use_kernels=kernels)
    runner.set_lora([read_adapter("qv", paths[0]), read_adapter("all", paths[1])])
    if not kernels:
        assert runner.kern is None and runner.ops.name == "torch"
    elif runner.kern is None:
        pytest.skip("no CPU kernels on this machine (no compiler or no AVX2)")
    prompts = [[1, 17, 300, 4000, 52, 9, 77], [5, 6, 7, 8], [9, 10, 11, 12, 13]]
    refs = [
        [hf(model, prompts[0])],
        [peft_logits(model, paths[0], prompts[1])],
        [peft_logits(model, paths[1], prompts[2])],
    ]
    assert (refs[1][0] - hf(model, prompts[1])).abs().max() > 0.05  # the adapters change the logits
    with torch.inference_mode():
        caches = [KVCache() for _ in prompts]
        # base, adapter 1 and adapter 2 in one step: prompts, then decode rows
        out = runner.forward([Segment(c, p, adapter=i) for i, (c, p) in enumerate(zip(caches, prompts))])
        for i in range(3):
            torch.testing.assert_close(out[i], refs[i][0], atol=ATOL, rtol=0)
        out = runner.forward([Segment(c, [42 + i], adapter=i) for i, c in enumerate(caches)])
        torch.testing.assert_close(out[0], hf(model, prompts[0] + [42]), atol=ATOL, rtol=0)
        torch.testing.assert_close(out[1], peft_logits(model, paths[0], prompts[1] + [43]), atol=ATOL, rtol=0)
        torch.testing.assert_close(out[2], peft_logits(model, paths[1], prompts[2] + [44]), atol=ATOL, rtol=0)
        # a step whose every row is one adapter's (no row selection), and a chunked prompt continued
        cd = KVCache()
        runner.forward([Segment(cd, prompts[2][:2], want_logits=False, adapter=2)])
        out = runner.forward([Segment(cd, prompts[2][2:], adapter=2)])
        torch.testing.assert_close(out[0], refs[2][0], atol=ATOL, rtol=0)
        for c in [*caches, cd]:
            runner.release(c)


def hf(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0, -1].float()


def test_a_step_without_adapter_rows_does_no_lora_work(tmp_path: Path) -> None:
    model = tiny_llama()
    runner = DecoderRunner(model, "cpu", 4096)
    lora = runner.set_lora([read_adapter("a", random_adapter(model, tmp_path / "a", 4, ALL, 3))])
    assert lora.step([0, 0], [(0, 3, 0), (3, 4, 0)], "cpu") is None
    step = lora.step([0, 1], [(0, 3, 0), (3, 5, 0)], "cpu")
    assert [(a, r.tolist()) for a, r in step.groups] == [(1, [3, 4])]
    assert lora.step([1, 1], [(0, 3, 0), (3, 5, 0)], "cpu").groups == [(1, None)]


# ---- the trained adapters on the bundled model -------------------------------------------------------------------


def test_trained_adapter_logits_equal_peftmodel_on_smollm2(lora_dirs: dict[str, Path]) -> None:
    import copy

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.lora_fixture import ADAPTERS, PROMPT, base_model_dir

    src = base_model_dir()
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    text = tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=False)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    runner = DecoderRunner(copy.deepcopy(model), "cpu", 4096)
    runner.set_lora([read_adapter(k, v) for k, v in lora_dirs.items()])
    with torch.inference_mode():
        caches = [KVCache() for _ in range(3)]
        out = runner.forward([Segment(c, ids, adapter=i) for i, c in enumerate(caches)])
    base_first = int(out[0].argmax())
    for i, (name, (word, _, _)) in enumerate(ADAPTERS.items(), start=1):
        torch.testing.assert_close(out[i], peft_logits(model, lora_dirs[name], ids), atol=5e-3, rtol=0)
        first = tok(word, add_special_tokens=False)["input_ids"][0]
        assert int(out[i].argmax()) == first != base_first  # the trained reply starts; the base says otherwise
