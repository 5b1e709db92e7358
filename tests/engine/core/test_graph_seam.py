"""The decode-graph seam (engine/core/graphs.py) on the CPU, with a FAKE graph that records and replays eagerly.

No GPU or NPU here, so no real graph is captured: `FakeGraphApi` stands in for engine/device.py's graph_api (CUDA
graphs / NPUGraph). Its capture runs the step once and remembers it; its replay runs the step again on the same
static buffers and writes into the captured output, which is what a real replay does with recorded kernels. The
tests check the bucketing, the padding of rows past the batch, that the buffers are refreshed before each replay,
that a runner stepping through the seam gives the same logits and greedy tokens as the eager runner, and that
`--graph-capture` is refused at start-up on a CPU. Whether real graphs replay correctly can only be checked on a
device (bench/device_check.py --graphs).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import torch

from engine import device as devices
from engine.core.graphs import DecodeBatch, DecodeGraphs, StaticInputs, buckets_up_to
from engine.core.model_runner import DecoderRunner, KVCache, Segment
from tests.engine.core.test_model_runner import tiny
from tests.paths import ROOT

ROOT = ROOT


class FakeGraph:
    """FAKE graph: remembers the captured function; replay() runs it eagerly into the captured output."""

    def __init__(self) -> None:
        self.fn: Any = None
        self.out: torch.Tensor | None = None
        self.replays = 0

    def replay(self) -> None:
        assert self.fn is not None and self.out is not None, "replay before capture"
        self.out.copy_(self.fn())
        self.replays += 1


class FakeGraphApi:
    """FAKE engine/device.py graph_api: records every capture."""

    def __init__(self) -> None:
        self.captured: list[FakeGraph] = []

    def new(self) -> FakeGraph:
        return FakeGraph()

    def capture(self, graph: FakeGraph, fn: Any) -> torch.Tensor:
        graph.fn, graph.out = fn, fn()
        self.captured.append(graph)
        return graph.out


def test_buckets() -> None:
    assert buckets_up_to(1) == (1,)
    assert buckets_up_to(8) == (1, 2, 4, 8)
    assert buckets_up_to(12) == (1, 2, 4, 8, 12)
    with pytest.raises(ValueError, match="increasing positive"):
        DecodeGraphs(lambda i: i.ids, FakeGraphApi(), "cpu", (4, 2), 3)


def test_a_batch_replays_the_graph_of_its_bucket_with_padded_rows_and_fresh_lengths() -> None:
    seen: list[dict[str, list]] = []

    def step(inputs: StaticInputs) -> torch.Tensor:  # what the step reads, every time it runs
        seen.append({k: getattr(inputs, k).tolist() for k in ("ids", "positions", "slots", "table", "lens")})
        return (inputs.ids * 10 + inputs.lens).float()[:, None].repeat(1, 3)

    refreshed: list[tuple[list[int], list[int]]] = []
    api = FakeGraphApi()
    graphs = DecodeGraphs(
        step,
        api,
        "cpu",
        (1, 2, 4),
        max_pages=3,
        pad_slot=5,
        refresh=lambda inputs, lens: refreshed.append((inputs.lens.tolist(), lens)),
    )
    assert [graphs.bucket(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 4, 4, None]

    batch = DecodeBatch(
        ids=[7, 8, 9], positions=[20, 3, 40], slots=[100, 51, 90], tables=[[6, 2], [3], [5, 4, 1]], lens=[21, 4, 41]
    )
    out = graphs.run(batch)
    assert len(api.captured) == 1 and api.captured[0] is graphs.graphs[4].graph  # bucket 4, captured once
    assert seen[-1] == {  # the replay read the batch and three padding rows' worth of nothing-but-page-0
        "ids": [7, 8, 9, 0],
        "positions": [20, 3, 40, 0],
        "slots": [100, 51, 90, 5],
        "table": [[6, 2, 0], [3, 0, 0], [5, 4, 1], [0, 0, 0]],
        "lens": [21, 4, 41, 1],
    }
    assert refreshed == [
        ([21, 4, 41, 1], [21, 4, 41, 1])
    ]  # lengths written before the replay, and the refresh told of them
    assert out.tolist() == [[91.0] * 3, [84.0] * 3, [131.0] * 3]  # the batch's rows only

    # The next step of the same bucket: no new capture; every buffer refreshed, the old rows gone.
    out = graphs.run(DecodeBatch(ids=[1, 2], positions=[21, 4], slots=[101, 52], tables=[[6, 2], [3]], lens=[22, 5]))
    assert len(api.captured) == 2 and graphs.bucket(2) == 2  # two rows: bucket 2, its own capture
    out = graphs.run(
        DecodeBatch(ids=[4, 4, 4, 4], positions=[1, 1, 1, 1], slots=[1, 2, 3, 4], tables=[[1]] * 4, lens=[2] * 4)
    )
    assert len(api.captured) == 2 and graphs.graphs[4].graph.replays == 2
    assert seen[-1]["lens"] == [2, 2, 2, 2] and seen[-1]["table"] == [[1, 0, 0]] * 4
    assert out.tolist() == [[42.0] * 3] * 4
    assert graphs.replays == 3

    assert not graphs.fits(DecodeBatch([1] * 5, [0] * 5, [0] * 5, [[1]] * 5, [1] * 5))  # beyond the last bucket
    assert not graphs.fits(DecodeBatch([1], [0], [0], [[1, 2, 3, 4]], [50]))  # wider than max_pages
    with pytest.raises(ValueError, match="does not fit"):
        graphs.run(DecodeBatch([1], [0], [0], [[1, 2, 3, 4]], [50]))


def test_a_runner_on_the_seam_gives_the_eager_logits_and_greedy_tokens() -> None:
    """Ragged decode batches of 1-3 sequences through captured buckets 1, 2, 4 (padding rows writing page 0), a
    prompt step between them (eager), against the same runner stepping eagerly."""
    from transformers import LlamaConfig, LlamaForCausalLM

    model = tiny(LlamaConfig, LlamaForCausalLM)
    eager = DecoderRunner(model, "cpu", kv_tokens=1024, use_kernels=False)
    graphed = eager.sibling(1024)
    api = FakeGraphApi()
    graphs = graphed.enable_graphs(api, max_seqs=4, max_context=256)
    assert graphs.buckets == (1, 2, 4) and graphs.max_pages == 256 // graphed.page
    assert eager.graphs is None

    prompts = [[1, 17, 300, 4000, 52], [5, 6, 7], [9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25]]
    tokens: dict[str, list[list[int]]] = {}
    last: dict[str, list[torch.Tensor]] = {}
    with torch.inference_mode():
        for name, runner in (("eager", eager), ("graphed", graphed)):
            caches = [KVCache() for _ in prompts]
            out = runner.forward([Segment(caches[0], prompts[0])])  # one prompt first: decode alone, bucket 1
            seqs = [[int(out[0].argmax())]]
            logits = []
            for _ in range(3):
                out = runner.forward([Segment(caches[0], [seqs[0][-1]])])
                logits.append(out)
                seqs[0].append(int(out[0].argmax()))
            out = runner.forward([Segment(c, p) for c, p in zip(caches[1:], prompts[1:])])  # two prompts: eager
            seqs += [[int(o.argmax())] for o in out]
            for _ in range(20):  # three sequences: bucket 4 with one padding row; crosses a page boundary
                out = runner.forward([Segment(c, [s[-1]]) for c, s in zip(caches, seqs)])
                logits.append(out)
                for s, o in zip(seqs, out):
                    s.append(int(o.argmax()))
            runner.release(caches[2])
            out = runner.forward([Segment(c, [s[-1]]) for c, s in zip(caches[:2], seqs[:2])])  # bucket 2
            logits.append(out)
            tokens[name], last[name] = seqs, logits
    assert tokens["graphed"] == tokens["eager"]
    for a, b in zip(last["graphed"], last["eager"]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert sorted(graphs.graphs) == [1, 2, 4] and len(api.captured) == 3
    assert graphs.replays == 3 + 20 + 1
    assert torch.isfinite(graphed.pool.k[:, 0]).all()  # the padding page stays finite


def test_graph_capture_is_refused_on_a_cpu() -> None:
    with pytest.raises(RuntimeError, match="--graph-capture: decode graphs need a CUDA GPU or an Ascend NPU"):
        devices.graph_api("cpu")
    with pytest.raises(RuntimeError, match="--graph-capture"):
        devices.graph_api("mps")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "--graph-capture", "--device", "cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode != 0
    assert (
        "app.py: error: --graph-capture: decode graphs need a CUDA GPU or an Ascend NPU, and this server runs "
        "on cpu; leave --graph-capture off" in out.stderr
    )


def test_graph_capture_is_off_by_default() -> None:
    from engine import config as cfg

    assert cfg.Settings().graph_capture is False
    assert DecoderRunner.graphs is None


class FakeNpuGraphApi(FakeGraphApi):
    """FAKE NPUGraph capture: the fake torch_npu reports a capture under way while the step is recorded."""

    def __init__(self, fake_npu: Any) -> None:
        super().__init__()
        self.fake_npu = fake_npu

    def capture(self, graph: FakeGraph, fn: Any) -> torch.Tensor:
        fn()  # warm-up, as engine/device.py does: not inside the capture
        self.fake_npu.npu.capturing = True
        try:
            return super().capture(graph, fn)
        finally:
            self.fake_npu.npu.capturing = False


def test_the_npu_tables_captured_paged_attention_gets_each_steps_lengths_before_a_replay() -> None:
    """On the NPU table, a captured _npu_paged_attention is a graph task group per layer, re-issued with the step's
    host lengths (graph_task_update_begin / _end) before every replay; the runner's tokens stay the eager ones."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.core import npu_ops
    from tests.fake_torch_npu.fake_fused_npu import FakeTorchNpu

    model = tiny(LlamaConfig, LlamaForCausalLM)
    eager = DecoderRunner(model, "cpu", kv_tokens=1024, use_kernels=False)
    graphed = eager.sibling(1024)
    fake = FakeTorchNpu()
    graphed.ops = npu_ops.NpuOps(fake, graphed.page)
    graphed.ops.attention_dtypes = (torch.float32, *npu_ops.HALF)  # the fake computes float32 too
    issued: list[list[int]] = []  # the lengths of each call re-issued as a task update
    paged = fake._npu_paged_attention

    def record(**kw: Any) -> None:
        if fake.npu.events and fake.npu.events[-1][0] == "update_begin":
            issued.append(kw["context_lens"].tolist())
        paged(**kw)

    fake._npu_paged_attention = record
    graphed.ops.fn["decode_attention"] = ("_npu_paged_attention", record)
    graphs = graphed.enable_graphs(FakeNpuGraphApi(fake), max_seqs=2, max_context=128)
    assert graphed.ops.graph_mode
    layers = len(graphed.layers)
    with torch.inference_mode():
        tokens = {}
        for name, runner in (("eager", eager), ("graphed", graphed)):
            caches = [KVCache(), KVCache()]
            out = runner.forward([Segment(caches[0], [1, 17, 300]), Segment(caches[1], [5, 6, 7, 8, 9])])
            seqs = [[int(o.argmax())] for o in out]
            for _ in range(4):
                out = runner.forward([Segment(c, [s[-1]]) for c, s in zip(caches, seqs)])
                for s, o in zip(seqs, out):
                    s.append(int(o.argmax()))
            tokens[name] = seqs
    assert tokens["graphed"] == tokens["eager"]
    assert graphs.replays == 4 and list(graphs.graphs) == [2]
    events = [e for e, _ in fake.npu.events]
    assert events[: 2 * layers] == ["group_begin", "group_end"] * layers  # one task group per layer, captured once
    assert events[2 * layers :] == ["update_begin", "update_end"] * (4 * layers)  # every layer, before every replay
    # the step's lengths (prompts of 3 and 5, one more a step), for every layer
    assert issued == [lens for lens in ([4, 6], [5, 7], [6, 8], [7, 9]) for _ in range(layers)]
