"""Kernel choices kept on disk (engine/core/calibration_cache.py): a kept choice is applied untimed, a changed key
times again, a corrupt or foreign file is logged and replaced (never an error), and a runner built from the cache
serves the same numbers as the one that timed them; and the GGUF tensor index (engine/core/gguf_tensors.py) reads
what gguf.GGUFReader reads."""

from __future__ import annotations

import copy
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from engine.core import calibration_cache, cpu_kernels, gguf_tensors, quant
from engine.core.calibration_cache import CalibrationCache
from engine.core.projection import CALIBRATION_ROWS, Projection, calibrate_bf16


@pytest.fixture(scope="module")
def K() -> cpu_kernels.CpuKernels:
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("no g++ on the path")
    found = cpu_kernels.kernels()
    if found is None:
        pytest.skip("no CPU kernels on this machine")
    return found


class Instant:
    """An "unquantized path" faster than any kernel, and recognisable by its output."""

    def __init__(self, w: torch.Tensor, bias: Any) -> None:
        self.weight, self.packed = w.to(torch.bfloat16), None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.full((x.shape[0], self.weight.shape[0]), 7.0)


def projections(K: Any, n: int = 256, k: int = 512) -> list[quant.QuantProjection]:
    qw = quant.quantize(torch.randn(n, k, generator=torch.Generator().manual_seed(n + k)), 4, 32)
    return [quant.QuantProjection(qw, None, K), quant.QuantProjection(qw, None, K)]


def files(cache: CalibrationCache) -> list[Path]:
    return sorted(cache.folder.glob("*.json"))


def test_a_kept_choice_is_applied_untimed(K, tmp_path: Path) -> None:
    cache = CalibrationCache(tmp_path)
    first = projections(K)
    assert quant.calibrate(first, Instant, repeat=3, cache=cache)  # timed, and kept
    (path,) = files(cache)
    stored = json.loads(path.read_text())
    assert stored["decision"][:2] == list(first[0].kernels_by_rows)
    assert first[0].kernels_by_rows[1] == "fallback"  # the instant reference wins from SPLIT_ROWS
    # the kept choice, whatever it is, is what the next load runs: here one that timing would not pick
    stored["decision"] = ["tile", "tile"]
    path.write_text(json.dumps(stored))
    again = projections(K)
    assert quant.calibrate(again, Instant, repeat=3, cache=cache) == {}  # nothing timed
    assert all(p.kernels_by_rows == ("tile", "tile") and p.fallback is None and p.packed is None for p in again)
    x = torch.randn(quant.SPLIT_ROWS, again[0].qw.k)
    torch.testing.assert_close(again[0](x), again[0].tile(x))
    assert files(cache) == [path]


def test_a_changed_key_times_again(K, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = CalibrationCache(tmp_path)
    assert quant.calibrate(projections(K), Instant, repeat=3, cache=cache)
    assert quant.calibrate(projections(K), Instant, repeat=3, cache=cache) == {}
    # another runner dtype, another matrix shape, no reference path, another torch: each a key of its own
    assert quant.calibrate(projections(K), Instant, repeat=3, cache=cache.within(dtype="torch.bfloat16"))
    assert quant.calibrate(projections(K, 48), Instant, repeat=3, cache=cache)
    assert quant.calibrate(projections(K), None, repeat=3, cache=cache)
    machine = {**calibration_cache.machine(), "torch": "0.0.1"}
    monkeypatch.setattr(calibration_cache, "machine", lambda: machine)
    assert quant.calibrate(projections(K), Instant, repeat=3, cache=cache)
    assert len(files(cache)) == 5


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xffnot json",
        b"[1, 2]",
        b'{"key": {"kind": "quant"}, "decision": ["tile", "tile"]}',  # another key's file at this name
        None,  # the right key with a decision no kernel has: written below
    ],
)
def test_a_corrupt_or_foreign_file_is_ignored(
    K, tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes | None
) -> None:
    cache = CalibrationCache(tmp_path)
    quant.calibrate(projections(K), Instant, repeat=3, cache=cache)
    (path,) = files(cache)
    if content is None:
        stored = json.loads(path.read_text())
        path.write_text(json.dumps({**stored, "decision": ["warp", "tile"]}))
    else:
        path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="engine.core.calibration_cache"):
        assert quant.calibrate(projections(K), Instant, repeat=3, cache=cache)  # timed again, no error
    if content is not None:
        assert "ignored" in caplog.text and str(path) in caplog.text
    assert json.loads(path.read_text())["decision"] != ["warp", "tile"]  # replaced by the new timing
    assert quant.calibrate(projections(K), Instant, repeat=3, cache=cache) == {}


def test_a_cache_that_cannot_be_written_is_logged(K, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / calibration_cache.FOLDER).write_text("a file where the folder goes")
    cache = CalibrationCache(tmp_path)
    ps = projections(K)
    with caplog.at_level(logging.WARNING, logger="engine.core.calibration_cache"):
        assert quant.calibrate(ps, Instant, repeat=3, cache=cache)
    assert "not written" in caplog.text
    assert ps[0].kernels_by_rows[1] == "fallback"  # served as timed


def test_bf16_choices_are_kept(K, tmp_path: Path) -> None:
    cache = CalibrationCache(tmp_path)
    w = torch.randn(64, 128, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    first = [Projection(w, None, K, mixed=True)]
    calibrate_bf16(first, repeat=1, cache=cache)
    (path,) = files(cache)
    assert json.loads(path.read_text())["decision"] == first[0].bf16_from
    stored = json.loads(path.read_text())
    path.write_text(json.dumps({**stored, "decision": CALIBRATION_ROWS[2]}))
    again = [Projection(w, None, K, mixed=True)]
    assert calibrate_bf16(again, repeat=1, cache=cache) == {(64, 128): CALIBRATION_ROWS[2]}
    assert again[0].bf16_from == CALIBRATION_ROWS[2]
    path.write_text(json.dumps({**stored, "decision": 10**6}))  # no row count it times: timed again
    calibrate_bf16([Projection(w, None, K, mixed=True)], repeat=1, cache=cache)
    assert json.loads(path.read_text())["decision"] != 10**6  # a new timing, kept


def test_gguf_tensor_index_reads_what_the_reader_reads(tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"token{i}" for i in range(300)])  # an array of strings to skip
    writer.add_array("test.nested", [[1, 2], [3]])
    writer.add_custom_alignment(64)
    rng = np.random.default_rng(0)
    raw = gguf.quants.quantize(rng.standard_normal((8, 96)).astype(np.float32), gguf.GGMLQuantizationType.Q4_1)
    writer.add_tensor("blk.0.attn_q.weight", raw, raw_dtype=gguf.GGMLQuantizationType.Q4_1)
    writer.add_tensor("norm.weight", rng.standard_normal(96).astype(np.float32))
    writer.add_tensor("embed", rng.standard_normal((5, 96)).astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    ours, theirs = gguf_tensors.tensors(path), gguf.GGUFReader(str(path)).tensors
    assert [t.name for t in ours] == [t.name for t in theirs] == ["blk.0.attn_q.weight", "norm.weight", "embed"]
    for a, b in zip(ours, theirs):
        assert a.tensor_type == b.tensor_type and list(a.shape) == list(b.shape)
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape and np.array_equal(a.data, b.data)


def test_a_runner_from_the_cache_serves_the_same_numbers(service, settings, tmp_path: Path) -> None:
    """The bundled model's Q4_1 blocks (auto): the runner that timed its kernels and the one that read the
    choices back run the same kernels, so the same logits, bit for bit, and the same greedy tokens."""
    from engine import models
    from engine.core.model_runner import DecoderRunner
    from tests.engine.core.test_model_runner import greedy
    from tests.engine.core.test_quantization import _prompts, teacher_forced

    if service.engine.runner.kern is None:
        pytest.skip("no CPU kernels here: quantized weights need them")
    gguf = models.gguf_source(settings.model, models.cache_root(settings.cache_dir))
    if gguf is None:
        pytest.skip("the bundled GGUF is not on disk")
    cache = CalibrationCache(tmp_path)

    def runner() -> DecoderRunner:
        model = copy.deepcopy(service.engine.runner.model).float()
        return DecoderRunner(model, "cpu", kv_tokens=4096, quantization="auto", gguf=gguf, calibration=cache)

    timed = runner()
    assert timed.quant_calibration  # timed at this load
    kept = runner()
    assert kept.quant_calibration == {}  # nothing timed: the choices read back
    by_shape = lambda r: {p.shape: p.kernels_by_rows for layer in r.proj for p in layer}  # noqa: E731
    assert by_shape(kept) == by_shape(timed)
    prompts = _prompts(service)
    tokens = greedy(timed, prompts, 10)
    assert greedy(kept, prompts, 10) == tokens
    for p, o in zip(prompts, tokens):
        assert torch.equal(teacher_forced(timed, p, o), teacher_forced(kept, p, o))


def test_the_tile_kernel_refuses_an_input_of_another_width(K) -> None:
    (p, _) = projections(K)
    with pytest.raises(ValueError, match="columns"):
        p.tile(torch.randn(4, p.qw.k // 2))  # read past its end before: NaN or garbage, never an error
