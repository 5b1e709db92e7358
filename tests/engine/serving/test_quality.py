"""The quality meter (engine/serving/quality.py) and the precision entries of the model pool (issue 32 item 5): the
bundled SmolLM2 served at its own Q4_1 blocks, measured against its dequantized float32 copy (the session's
`service`, `--quantization none`) through the real engines, checked against a KL computed here from the two
runners' own logits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from engine import model_registry as registry
from engine.serving import quality


@pytest.fixture(scope="module")
def q4_service(settings: Any) -> Any:
    from app import build_service
    from engine import models

    if models.gguf_source(settings.model, models.cache_root(settings.cache_dir)) is None:
        pytest.skip("the bundled GGUF is not on disk")
    svc = build_service(settings.replace(quantization="auto", served_model_name="SmolLM2-135M-Instruct@auto"))
    if svc.engine.runner.quantization == "none":
        svc.engine.shutdown()
        pytest.skip("no CPU kernels here: the GGUF's blocks are served dequantized")
    yield svc
    svc.engine.shutdown()


def _ids(svc: Any, text: str) -> list[int]:
    tok = svc.tokenizer
    rendered = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
    return list(tok(rendered, add_special_tokens=False)["input_ids"])


def test_the_meter_is_the_kl_of_the_two_models_logits(service: Any, q4_service: Any) -> None:
    from tests.engine.core.test_quantization import teacher_forced

    prompt = _ids(q4_service, "Name three colours of the rainbow.")
    reply = [int(t) for t in q4_service.tokenizer("Red, orange and yellow are three of them.")["input_ids"]][:8]
    got = asyncio.run(quality.compare(q4_service, service, prompt, reply))
    assert (got.precision, got.reference_precision, got.full_precision) == ("Q4_1", "fp32", False)
    assert len(got.tokens) == got.total == len(reply)
    ref = teacher_forced(service.engine.runner, prompt, reply)
    mine = teacher_forced(q4_service.engine.runner, prompt, reply)
    kl = (ref.exp() * (ref - mine)).sum(-1)
    assert kl.max() > 0  # quantization does cost something
    # The meter reads the engine's paged forward, this the runner's one-shot one: on a cold CI run (kernels and
    # calibration chosen afresh) they differed by up to 2.2e-4 nats per token, so the bound is absolute.
    torch.testing.assert_close(torch.tensor([t.kl for t in got.tokens]), kl, rtol=0.02, atol=1e-3)
    assert [t.top for t in got.tokens] == mine.argmax(-1).tolist()
    assert [t.reference_top for t in got.tokens] == ref.argmax(-1).tolist()
    assert got.summary().startswith("top-1 agreement ") and got.summary().endswith("against fp32")
    # a full-precision model is said to be one, not measured at zero
    same = asyncio.run(quality.compare(service, service, prompt, reply))
    assert same.full_precision and not same.tokens and "full precision" in same.summary()


def test_bad_token_ids_are_a_clear_4xx(q4_service: Any, service: Any) -> None:
    from engine.protocol.errors import RequestValidationError

    for prompt, reply in (([1, 2], []), ([1], [10**9]), ([1] * 9000, [2])):
        with pytest.raises(RequestValidationError):
            asyncio.run(quality.compare(q4_service, service, prompt, reply))


@pytest.mark.unit
def test_precision_entries_are_parsed_from_models_values() -> None:
    assert registry.split_precision("SmolLM2-135M-Instruct@int4") == ("", "int4")
    assert registry.split_precision("@bf16") == ("", "bf16")
    assert registry.split_precision("gemma-3-270m@none") == ("gemma-3-270m", "none")
    assert registry.split_precision("/models/x@y") == ("/models/x@y", "")  # not a precision: the path as written
    base = registry.describe_static("", "SmolLM2-135M-Instruct", {"model_type": "llama"}, 10, 0)
    v = registry.variant(base, "int8")
    assert (v.id, v.source, v.precision, v.describe()["precision"]) == (
        "SmolLM2-135M-Instruct@int8",
        "",
        "int8",
        "int8",
    )
    assert quality.reference_id("SmolLM2-135M-Instruct@int4") == quality.reference_id("SmolLM2-135M-Instruct")
    assert quality.reference_id("x@int4") == "x@fp32"


@pytest.mark.unit
def test_the_kl_heatmap_colours_by_kl_and_outlines_a_differing_top1() -> None:
    from playground.page import heatmap

    assert [heatmap.kl_bucket(k) for k in (0.0, 1e-4, 0.05, 5.0)] == [9, 8, 3, 0]
    token = {"kl": 0.05, "differs": True, "piece": "Red", "reference_piece": "Blue", "logprob": -0.1}
    report = {"summary": "top-1 agreement 50.0% · mean KL 0.025 against fp32", "reference_precision": "fp32"}
    page = heatmap.quality_html(report | {"tokens": [token | {"reference_logprob": -2.0}]})
    assert "pg-p3" in page and heatmap.DIFFERS_STYLE in page and '"q":[[0.05,true,"Blue",-2.0]]' in page
    assert "top-1 agreement 50.0%" in page
    assert "pg-heatmap" not in heatmap.quality_html(report | {"tokens": []})  # a summary alone, no empty heatmap
