"""DecoderRunner: turns scheduled token segments into logits for the Llama family.

A step runs a ragged batch: each segment is one sequence's new tokens (a whole or partial prompt, or the one
token sampled last step). All segments are packed into one flat token axis so the projections and MLPs of
every sequence run as single matmuls; only attention runs per segment, against that sequence's own KV cache.
This is what lets requests join and leave the batch between steps without padding or re-copying caches.

`DecoderRunner` is a lean forward for the Llama family (Llama, SmolLM, Mistral without sliding window, Qwen2,
Qwen3), reusing the HF model's own modules and weights; tests check its logits against the HF forward.
Gemma 3 text models run on it too, with what their layer adds in gemma.py. `make_runner` gives any other causal
LM the HF forward (`HFRunner`, hf_runner.py). Both implement `Runner`
(runner.py); the KV page pool is `PagePool` (kv.py).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any

import torch

from engine import device as devices
from engine.core import cpu_kernels, device_quant, gemma, quant
from engine.core.fused_step import FusedStep
from engine.core.graphs import DecodeBatch, DecodeGraphs, GraphApi, StaticInputs, buckets_up_to
from engine.core.hf_runner import HFRunner
from engine.core.kv import PAGE, KVCache, PagePool, kv_dtype
from engine.core.lora import LoraAdapter, LoraSet, LoraStep
from engine.core.projection import Projection, calibrate_bf16
from engine.core.runner import Segment
from engine.core.weights import bf16_exact, fuse_layer, widen_vectors
from engine.core.window_kv import SplitPages, WindowPages, pool_tokens

__all__ = ["DecoderRunner", "HFRunner", "KVCache", "Segment", "make_runner"]  # what callers import from here

log = logging.getLogger(__name__)

LEAN_MODEL_TYPES = {"llama", "mistral", "qwen2", "qwen3"}


@dataclass
class DecodeRows:
    """The single-token segments of a step: their rows on the token axis, their page tables ([rows, width],
    zero-padded) and how many positions each attends to; with a sliding window, each table starts at the window's
    first page and `starts` is the window's first position in it."""

    cols: torch.Tensor
    table: torch.Tensor
    lens: torch.Tensor
    starts: torch.Tensor | None = None


@dataclass
class PrefillRows:
    """The prompt chunks of a step for a table with `paged_prefill` (the NPU's): their rows on the token axis (chunk
    after chunk), their page tables ([chunks, width], zero-padded), each chunk's rows and KV length."""

    cols: torch.Tensor
    table: torch.Tensor
    q_lens: list[int]
    kv_lens: list[int]


def make_runner(
    model: Any,
    device: str,
    kv_tokens: int = 65536,
    seqs: int = 0,
    step_tokens: int = 0,
    quantization: str = "none",
    gguf: Any = None,
    kv_cache_dtype: str | None = None,
    calibration: Any = None,
) -> DecoderRunner | HFRunner:
    """The runner for `model`, with KV room for `kv_tokens` tokens; `seqs` (live sequences at most) and
    `step_tokens` (tokens one step writes at most) size a sliding-window pool (window_kv.py) to what the engine can
    hold at once, 0 to as many tokens as the main pool. `quantization` (quant.CHOICES) with the model's GGUF
    (`gguf`, for auto) says how its projections' weights are kept; quant.QuantError where that cannot be.
    `kv_cache_dtype` (--kv-cache-dtype; None: the activations' dtype) is the pages' dtype (kv.kv_dtype).
    `calibration` (calibration_cache.CalibrationCache): where the kernel choices timed at load are kept, so a
    later load applies them untimed; None times at every load."""
    cfg = model.config
    q = dict(quantization=quantization, gguf=gguf, kv_cache_dtype=kv_cache_dtype, calibration=calibration)
    if (
        cfg.model_type in LEAN_MODEL_TYPES
        and not any(hasattr(cfg, k) for k in ("vision_config", "audio_config"))  # multimodal: HF forward
        and not getattr(cfg, "use_sliding_window", False)
        and not (cfg.model_type == "mistral" and getattr(cfg, "sliding_window", None))
        and getattr(cfg, "hidden_act", "silu") == "silu"  # the layer the device ops implement
    ):
        return DecoderRunner(model, device, kv_tokens, seqs=seqs, step_tokens=step_tokens, **q)
    if gemma.supported(cfg):
        return DecoderRunner(model, device, kv_tokens, seqs=seqs, step_tokens=step_tokens, **q)
    quant.plan(quantization, device, None, False, gguf, cfg.model_type)  # raises for int8 / int4
    if kv_cache_dtype not in (None, "auto"):
        log.warning(
            "--kv-cache-dtype %s: %s runs on the HF forward, whose cache keeps the model's dtype",
            kv_cache_dtype,
            cfg.model_type,
        )
    return HFRunner(model, device)


class DecoderRunner:
    """Keys and values live in one page pool per runner (kv.PagePool), and a sequence owns a list of pages; the
    sliding-window layers of a Gemma 3 have a pool of their own, of which a sequence holds only the pages its
    window still spans (window_kv.py). A step writes every new token's KV in the rotary op, and a decode batch
    attends over its sequences' pages in one call per layer, whatever the batch size: per-sequence Python work per
    layer is what dominated a batched step before. The layer's elementwise and attention steps are the device's
    ops (engine/core/ops.py)."""

    all_logits = True  # honours Segment.all_logits, so the engine may run speculative drafts through it

    def __init__(
        self,
        model: Any,
        device: str,
        kv_tokens: int = 65536,
        use_kernels: bool = True,
        *,
        seqs: int = 0,
        step_tokens: int = 0,
        quantization: str = "none",
        gguf: Any = None,
        kv_cache_dtype: str | None = None,
        calibration: Any = None,
        ops: Any = None,
    ) -> None:
        self.model = model
        self.device = device
        self.inner = model.model
        cfg = model.config
        self.layers = list(self.inner.layers)
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.dtype = next(model.parameters()).dtype  # of activations (and by default of the KV cache)
        model_dtype = self.dtype  # as loaded
        self.vocab_size = model.get_output_embeddings().weight.shape[0]  # width of the logits
        # float32 on a CPU with the kernels: matrices stored in bf16 when that is exact (halves the bytes a decode
        # step streams), math in float32. The HF model's matrices then are bf16: run its own forward on a
        # `.float()` copy.
        cpu = use_kernels and str(device) == "cpu"
        kern = cpu_kernels.kernels() if cpu and self.dtype in (torch.float32, torch.bfloat16) else None
        # The layer's device operations (norms with the residual adds, rotary embedding with the KV write, SiLU
        # gating, attention, quantized matmuls): the CPU kernels here, the NPU's fused ops, the torch reference
        # elsewhere (engine/core/ops.py; engine/device.py picks unless `ops` is given: a test's fake NPU table).
        self.ops = ops if ops is not None else devices.device_ops(str(device), kern)
        mode = quant.plan(quantization, device, kern, True, gguf, cfg.model_type, self.ops)
        # bf16 on a CPU with the kernels: the same float32 activations, KV cache and fused steps, with the bf16
        # matrices as loaded; only projections of many rows round their inputs to bf16 for torch's bf16 matmul
        # (bf16 dot products: 1.4x the float32 math at 16 rows, 2x at 288, on a CPU with AVX512_BF16).
        self.bf16_matmul = kern is not None and self.dtype == torch.bfloat16
        if self.bf16_matmul:
            widen_vectors(model)
            self.dtype = torch.float32
        store = torch.bfloat16 if kern is not None and bf16_exact(model) else self.dtype
        self.weights_dtype = store
        self.kern = kern
        # The KV pages' dtype (--kv-cache-dtype, kv.kv_dtype): bf16 under float32 activations halves the bytes the
        # pool holds and attention streams; rope_store rounds into the pages, attention widens them as it reads.
        self.kv_dtype = kv_dtype(kv_cache_dtype, str(device), self.dtype, kern is not None)
        # Kernel choices kept from an earlier load (calibration_cache.py), keyed also by the dtypes and kernel build.
        self.calibration = (
            calibration.within(dtype=str(model_dtype), store=str(store), isa=getattr(kern, "isa", None))
            if calibration is not None
            else None
        )
        norms = [n for layer in self.layers for n in (layer.input_layernorm, layer.post_attention_layernorm)]
        norms.append(self.inner.norm)
        self.norm_w = [n.weight.data.contiguous() for n in norms]
        self.norm_eps = float(getattr(self.inner.norm, "variance_epsilon", 1e-6))
        attn = self.layers[0].self_attn
        self.qk_norm = (
            [
                (
                    layer.self_attn.q_norm.weight.data,
                    layer.self_attn.k_norm.weight.data,
                    float(getattr(layer.self_attn.q_norm, "variance_epsilon", self.norm_eps)),
                )
                for layer in self.layers
            ]
            if hasattr(attn, "q_norm")
            else None
        )  # Qwen3
        self.proj: list[tuple[Any, ...]] = []  # per layer: qkv, o, gate_up, down (Projection or QuantProjection)
        for layer in self.layers:
            w_qkv, b_qkv, w_gate_up = fuse_layer(layer, store)
            attn, mlp = layer.self_attn, layer.mlp
            mixed = self.bf16_matmul
            self.proj.append(
                (
                    Projection(w_qkv, b_qkv, kern, mixed),
                    Projection(attn.o_proj.weight.data, attn.o_proj.bias, kern, mixed),
                    Projection(w_gate_up, None, kern, mixed),
                    Projection(mlp.down_proj.weight.data, mlp.down_proj.bias, kern, mixed),
                )
            )
        self.quantization = "none"  # what the projections' weights are (the log, /v1/models)
        self.weights_label = ""  # the same for the page's header ("Q4_1 · int4 kernels"); "" when not quantized
        self.quant_calibration: dict[Any, Any] = {}
        # The input embedding: the model's own module, or (quantized weights) a QuantEmbedding of int8 rows.
        self.embed_tokens: Any = self.inner.embed_tokens
        self.lm_head: Any
        if mode != "none" and kern is None:  # an accelerator: the device table's quantized matmul, the head as is
            self.proj, self.quantization = device_quant.device_projections(
                self.proj, self.layers, mode, self.ops, self.dtype
            )
            chosen = self.ops.chosen["weight_quant_matmul"]  # the fused op's name, or the reference's "torch"
            self.weights_label = f"{mode} · " + ("dequantized per call" if chosen == "torch" else chosen)
            self.lm_head = Projection(model.lm_head.weight.data, model.lm_head.bias)
            log.info("weights: %s on %s (%s)", self.quantization, device, self.weights_label)
        elif mode != "none":
            self.lm_head, self.embed_tokens = quant.quantized_head(model, mode, kern, gguf)
            self._quantize(mode, gguf, kern, cfg)
        else:
            head, embed = model.lm_head, model.get_input_embeddings()
            head.weight.data = head.weight.data.to(store)  # tied: the embedding's too
            embed.weight.data = embed.weight.data.to(store)
            self.lm_head = Projection(head.weight.data, head.bias, kern, self.bf16_matmul)
        if self.bf16_matmul:
            with torch.inference_mode():
                self.bf16_rows = calibrate_bf16(
                    [
                        p
                        for p in [*(q for layer in self.proj for q in layer), self.lm_head]
                        if isinstance(p, Projection)
                    ],
                    cache=self.calibration,
                )
            log.info("bf16 matmul from rows (per matrix shape): %s", self.bf16_rows)
        self.lora: LoraSet | None = None  # LoRA adapters (set_lora); None: the base model only
        self.gemma = gemma.GemmaLayers(model, model_dtype, self.dtype) if gemma.supported(cfg) else None
        self.sliding = (
            self.gemma.sliding if self.gemma is not None and self.gemma.window else [False] * len(self.layers)
        )
        self.window_room = (seqs, step_tokens)  # what sizes the sliding layers' pool (make_runner)
        # Tokens per KV page: the device's (engine/device.py page_size); a sliding-window pool keeps kv.PAGE.
        self.page = PAGE if any(self.sliding) else devices.page_size(str(device), self.head_dim)
        if hasattr(self.ops, "page"):  # the NPU table's KV write views the pool's pages with this block size
            self.ops.page = self.page
        self._own_pool(kv_tokens)

    def _quantize(self, mode: str, gguf: Any, kern: Any, cfg: Any) -> None:
        import time

        started = time.perf_counter()
        self.proj, self.quantization = quant.quantized_projections(self.proj, self.layers, mode, kern, gguf, cfg)
        first = self.quantization.split(" x")[0]
        bits = 4 if first in ("int4", "Q4_0", "Q4_1", "Q4_K") else 8
        self.weights_label = f"{first} · int{bits} kernels" if mode == "gguf" else f"{mode} · quantized at load"
        mixed = self.bf16_matmul

        def reference(w: torch.Tensor, bias: torch.Tensor | None) -> Projection:  # the unquantized path, same matrix
            return Projection(w.to(torch.bfloat16), bias, kern, mixed)

        qp = [p for layer in self.proj for p in layer if isinstance(p, quant.QuantProjection)] + [self.lm_head]
        with torch.inference_mode():
            budget = quant.copy_budget(mode, qp)
            self.quant_calibration = quant.calibrate(qp, reference, cache=self.calibration, copy_budget=budget)
        log.info(
            "weights: %s (%s, %.1f MB in the projections; %.1f s with calibration); per shape, the kernels "
            "below %d rows and from there: %s",
            self.quantization,
            mode,
            sum(p.nbytes for p in qp) / 1e6,
            time.perf_counter() - started,
            quant.SPLIT_ROWS,
            sorted({p.shape: p.kernels_by_rows for p in qp}.items()),
        )

    def set_lora(self, adapters: list[LoraAdapter]) -> LoraSet:
        """Serve `adapters` beside the base model: segment.adapter i (1..n) runs with adapters[i - 1]."""
        self.lora = LoraSet(adapters, self.layers, self.dtype, self.device)
        return self.lora

    fuse_decode = True  # whether decode steps may take fused_step.py's one native call (bench A/B: False)
    _fused_plan: FusedStep | None = None
    _fused_built = False

    def _fused(self) -> FusedStep | None:
        """The plan of fused_step.py for this runner, built at its first decode step (after calibration, with
        this runner's pool), or None where the model or its kernels do not fit it."""
        if not self.fuse_decode:
            return None
        if not self._fused_built:
            self._fused_plan, self._fused_built = FusedStep.build(self), True
            log.info("decode steps: %s", "one native call" if self._fused_plan else "the layer loop")
        return self._fused_plan

    def _own_pool(self, kv_tokens: int) -> None:
        """The main pool, for every layer that attends to the whole context, and with sliding-window layers their
        own pool; `layer_kv[li]` is layer li's keys and values [pages, PAGE, kv_heads, head_dim] in its pool."""
        full = [li for li, s in enumerate(self.sliding) if not s]
        sliding = [li for li, s in enumerate(self.sliding) if s]
        self.pool = PagePool(len(full), kv_tokens, self.n_kv, self.head_dim, self.kv_dtype, self.device, self.page)
        self.pages: PagePool | SplitPages = self.pool  # what the prefix cache copies pages out of and into
        self.k, self.v = self.pool.k, self.pool.v
        where = {li: (self.pool.k[j], self.pool.v[j]) for j, li in enumerate(full)}
        self.window: WindowPages | None = None
        if sliding:
            assert self.gemma is not None
            w = self.gemma.window
            tokens = pool_tokens(w, kv_tokens, *self.window_room)
            pool = PagePool(len(sliding), tokens, self.n_kv, self.head_dim, self.kv_dtype, self.device)
            self.window = WindowPages(pool, w)
            self.pages = SplitPages(self.pool, self.window)
            where |= {li: (pool.k[j], pool.v[j]) for j, li in enumerate(sliding)}
        self.layer_kv = [where[li] for li in range(len(self.layers))]
        self._fused_plan, self._fused_built = None, False  # points into the pool: rebuilt for a new one

    def sibling(self, kv_tokens: int, kv_cache_dtype: str | None = None) -> DecoderRunner:
        """A runner on the same (read-only) weights with a KV pool of its own, for a second engine in the
        process: a runner, and its pool, belong to one engine thread. Its pages keep this runner's dtype, or
        `kv_cache_dtype`'s (--kv-cache-dtype) when given."""
        other = copy.copy(self)
        if kv_cache_dtype is not None:
            other.kv_dtype = kv_dtype(kv_cache_dtype, str(self.device), self.dtype, self.kern is not None)
        other._own_pool(kv_tokens)
        other.graphs = None  # captured over this runner's pool: the sibling would capture its own
        return other

    graphs: DecodeGraphs | None = None  # decode steps captured and replayed (enable_graphs); None: eager

    def enable_graphs(self, api: GraphApi, max_seqs: int, max_context: int) -> DecodeGraphs:
        """Capture decode steps of up to `max_seqs` sequences of up to `max_context` tokens per batch-size bucket,
        and replay them (engine/core/graphs.py); each bucket is captured on its first batch."""
        if self.gemma is not None or self.lora is not None or self.window is not None:
            raise ValueError("--graph-capture: decode graphs are for the lean Llama-family runner without LoRA")
        if hasattr(self.ops, "begin_graphs"):
            self.ops.begin_graphs()
        self.graphs = DecodeGraphs(
            self._graph_step,
            api,
            self.device,
            buckets_up_to(max_seqs),
            -(-max_context // self.page),
            pad_slot=0,
            refresh=self._graph_refresh,
        )
        return self.graphs

    def _graph_step(self, inputs: StaticInputs) -> torch.Tensor:
        """A decode step on a bucket's static buffers -> logits [B, vocab]: the eager step's layers, with no
        host-side work left inside (no lists, no indexing by Python lists)."""
        h = self.embed_tokens(inputs.ids).to(self.dtype)
        cos, sin = self.inner.rotary_emb(h, position_ids=inputs.positions[None])
        rows = DecodeRows(inputs.ids, inputs.table, inputs.lens)  # cols unused: every row decodes
        hidden = self._layers(h, cos[0].contiguous(), sin[0].contiguous(), inputs.slots, [], [], {}, rows, slice(None))
        return self.lm_head(hidden).float()

    def _graph_refresh(self, inputs: StaticInputs, lens: list[int]) -> None:
        """Before each replay: the ops table's captured attention tasks, where its kernel reads the lengths from
        the host (the NPU's `refresh_lengths`), get this step's; the reference reads the static buffer."""
        refresh = getattr(self.ops, "refresh_lengths", None)
        if refresh is not None:
            refresh(lens)

    def _graph_batch(self, segments: list[Segment]) -> DecodeBatch | None:
        """The step as a DecodeBatch when a captured graph can run it: every segment one decode token that wants
        its logits, on the base model, within the buckets and the page-table width."""
        if self.graphs is None or not all(
            len(s.token_ids) == 1 and s.want_logits and not s.all_logits and not s.adapter and s.mm is None
            for s in segments
        ):
            return None
        page = self.page
        for seg in segments:
            self.pool.reserve(seg.cache, seg.cache.length + 1)
        starts = [seg.cache.length for seg in segments]
        batch = DecodeBatch(
            ids=[seg.token_ids[0] for seg in segments],
            positions=starts,
            slots=[seg.cache.pages[p // page] * page + p % page for seg, p in zip(segments, starts)],
            tables=[seg.cache.pages[: p // page + 1] for seg, p in zip(segments, starts)],
            lens=[p + 1 for p in starts],
        )
        return batch if self.graphs.fits(batch) else None

    padding = 0  # KV the runner holds beyond the sequences' own tokens (HFRunner's cohort rows): none, pages

    def join_padding(self, tokens: int) -> int:
        return 0

    @property
    def free_pages(self) -> int:
        return self.pool.free_pages

    def reserve(self, cache: KVCache, tokens: int) -> None:
        self.pool.reserve(cache, tokens)  # window pages are taken as a step writes them (WindowPages.write)

    def release(self, cache: KVCache) -> None:
        self.pool.release(cache)
        if self.window is not None:
            self.window.release(cache)

    def fork(self, cache: KVCache) -> KVCache:
        new = self.pool.fork(cache)
        if self.window is not None:
            self.window.fork(cache, new)
        return new

    def forward(self, segments: list[Segment]) -> torch.Tensor:
        """Logits (float32) at the last token of each segment that wants them (at every token of an all_logits
        segment), in segment order."""
        batch = self._graph_batch(segments) if self.graphs is not None else None
        if batch is not None and self.graphs is not None:  # a captured decode step (engine/core/graphs.py)
            logits = self.graphs.run(batch).clone()  # the static output is overwritten by the next replay
            for seg in segments:
                seg.cache.length += 1
            return logits
        ids: list[int] = []
        pos: list[int] = []
        bounds: list[tuple[int, int, int]] = []  # per segment: its rows [a, b) and its first position
        slots: list[int] = []
        window_slots: list[int] = []  # the same positions in the sliding layers' pool
        page = self.page
        for seg in segments:
            start, end = seg.cache.length, seg.cache.length + len(seg.token_ids)
            self.pool.reserve(seg.cache, end)
            bounds.append((len(ids), len(ids) + len(seg.token_ids), start))
            ids.extend(seg.token_ids)
            pos.extend(range(start, end))
            pages = seg.cache.pages
            slots.extend(pages[p // page] * page + p % page for p in range(start, end))
            if self.window is not None:
                self.window.drop(seg.cache, start)  # what none of this step's queries sees any more
                self.window.write(seg.cache, start, end)
                window_slots.extend(seg.cache.window[p // PAGE] * PAGE + p % PAGE for p in range(start, end))
        dev = self.device
        input_ids = torch.tensor(ids, device=dev)
        position_ids = torch.tensor([pos], device=dev)
        slot = torch.tensor(slots, device=dev)
        window_slot = torch.tensor(window_slots, device=dev) if self.window is not None else None
        embed = self.embed_tokens
        # [N, D]: every token of every segment on one axis
        h = embed(input_ids).to(self.dtype) if self.gemma is None else self.gemma.embed(embed, input_ids, self.dtype)
        # Single-token (decode) segments attend in one call, reading their pages where they are, and so do drafted
        # ones (a row per token, see _decode_rows); prompt chunks attend one by one.
        decode = [i for i, (a, b, _) in enumerate(bounds) if b - a == 1 or segments[i].all_logits]
        single = [i for i in range(len(segments)) if i not in set(decode)]
        rows = self._decode_rows(segments, bounds, decode) if decode else None
        chunk_pages = {
            i: self.pool.index(segments[i].cache.pages[: -(-(bounds[i][1] - bounds[i][0] + bounds[i][2]) // page)])
            for i in single
        }
        prefill = None
        if single and self.ops.paged_prefill and self.gemma is None:  # every prompt chunk in one call per layer
            prefill = self._prefill_rows(segments, bounds, single)
        last = [b - 1 for seg, (a, b, _) in zip(segments, bounds) if seg.want_logits]
        if any(seg.all_logits for seg in segments):  # speculative drafts: a row for each of their tokens
            last = [
                r
                for seg, (a, b, _) in zip(segments, bounds)
                if seg.want_logits
                for r in (range(a, b) if seg.all_logits else (b - 1,))
            ]
        kept, prompt_rows = self._prompt_rows(segments, bounds, last)
        lora = self.lora.step([s.adapter for s in segments], bounds, dev) if self.lora is not None else None
        if self.gemma is None:
            cos, sin = self.inner.rotary_emb(h, position_ids=position_ids)  # [1, N, hd], broadcast over heads
            hidden = self._layers(
                h,
                cos[0].contiguous(),
                sin[0].contiguous(),
                slot,
                bounds,
                single,
                chunk_pages,
                rows,
                last,
                lora,
                prefill,
            )
        else:
            hidden = self.gemma.layers(
                self, h, position_ids, slot, window_slot, bounds, single, chunk_pages, rows, last, segments, lora
            )
        for seg, (a, b, start) in zip(segments, bounds):
            seg.cache.length = start + (b - a)
            # Decode rows give back what their next step cannot see (a drafted step may be rolled back to one past
            # its first row); a prompt keeps its pages until its next step, the prefix cache copying them first.
            if self.window is not None and (seg.all_logits or b - a == 1):
                self.window.drop(seg.cache, start + 1 if seg.all_logits else seg.cache.length)
        if not last:
            return torch.empty(0)
        logits = self.lm_head(hidden).float()
        logits = logits if self.gemma is None else self.gemma.logits(logits)
        if not prompt_rows:
            return logits
        for i, (a, b) in prompt_rows.items():
            segments[i].prompt_rows = logits[a:b]
        return logits[:kept]

    @staticmethod
    def _prompt_rows(
        segments: list[Segment], bounds: list[tuple[int, int, int]], last: list[int]
    ) -> tuple[int, dict[int, tuple[int, int]]]:
        """Rows for every token of the prompt chunks that want them (`prompt_logprobs`), appended to `last`:
        (how many rows forward() returns, each such segment's [a, b) among the projected rows)."""
        kept, extra = len(last), {}
        for i, (seg, (a, b, _)) in enumerate(zip(segments, bounds)):
            if seg.prompt_logits:
                extra[i] = (len(last), len(last) + b - a)
                last.extend(range(a, b))
        return kept, extra

    def _layers(
        self,
        h,
        cos,
        sin,
        slot,
        bounds,
        single,
        chunk_pages,
        rows,
        last,
        lora: LoraStep | None = None,
        prefill: PrefillRows | None = None,
    ) -> torch.Tensor:
        """Every layer through the device ops: ~9 calls a layer (norms with the residual adds, rotary embedding
        with the KV write, SiLU gating, attention) around the four projections, each projection's output plus the
        LoRA delta of its rows' adapters when the step has adapter rows (`lora`, lora.LoraSet.add; else the output
        as it is). Returns the final norm's output at the rows in `last`."""
        ops, eps = self.ops, self.norm_eps
        adapters, step = (self.lora, lora) if lora is not None else (None, None)
        if rows is not None and not single and lora is None and rows.starts is None:  # every row decodes
            fused = self._fused()
            if fused is not None and h.shape[0] < fused.rows:  # all the layers in one native call (fused_step.py)
                return fused.run(h.contiguous(), [(cos, sin)], slot, rows)[last]

        def delta(li: int, k: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return y if adapters is None or step is None else adapters.add(step, li, k, x, y)

        h = h.contiguous()
        n_tok = h.shape[0]
        normed = ops.add_rmsnorm(h, None, self.norm_w[0], eps)
        for li, (p_qkv, p_o, p_gate_up, p_down) in enumerate(self.proj):
            pool_k, pool_v = self.layer_kv[li]
            flat_k = pool_k.view(-1, self.n_kv, self.head_dim)
            flat_v = pool_v.view(-1, self.n_kv, self.head_dim)
            qk_norm = self.qk_norm[li] if self.qk_norm is not None else None
            qkv = delta(li, 0, normed, p_qkv(normed))
            q = ops.rope_store(qkv, cos, sin, slot, flat_k, flat_v, self.n_heads, qk_norm)  # [N, H, hd]
            out = self._attention(pool_k, pool_v, q, bounds, single, chunk_pages, rows, prefill).reshape(n_tok, -1)
            # the norm and the new residual: the reference adds into h in place and hands h back; a fused
            # backend (the NPU's add-and-norm op) returns its own sum
            normed, h = ops.norm_residual(h, delta(li, 1, out, p_o(out)), self.norm_w[2 * li + 1], eps)
            gated = ops.silu_mul(delta(li, 2, normed, p_gate_up(normed)))
            nxt = self.norm_w[2 * li + 2]  # the next layer's input norm, after the last layer the model's
            normed, h = ops.norm_residual(h, delta(li, 3, gated, p_down(gated)), nxt, eps)
        return normed[last]

    def _decode_rows(
        self, segments: list[Segment], bounds: list[tuple[int, int, int]], decode: list[int], window: int = 0
    ) -> DecodeRows:
        """A decode row per token of the `decode` segments: a drafted segment's token j (at position start + j)
        attends to the first start + j + 1 positions of its sequence's pages, which rope_store has written before
        attention runs, so its k + 1 rows are causal attention within the one decode call. With a `window` (Gemma 3's
        sliding layers), a row attends to its last `window` positions only: its table begins at the page holding
        the first of them, in the sliding layers' own pages (`KVCache.window`)."""
        cols = [r for i in decode for r in range(bounds[i][0], bounds[i][1])]
        ends = [start + 1 + r - a for i in decode for a, b, start in (bounds[i],) for r in range(a, b)]
        owner = [i for i in decode for _ in range(bounds[i][1] - bounds[i][0])]
        page = PAGE if window else self.page  # the sliding layers' pool keeps kv.PAGE
        first = [max(0, e - window) // page if window else 0 for e in ends]  # each table's first page
        tables = [
            (segments[i].cache.window if window else segments[i].cache.pages)[f : -(-e // page)]
            for i, e, f in zip(owner, ends, first)
        ]
        width = max(len(t) for t in tables)
        as_int = {"device": self.device, "dtype": torch.int32}
        table = torch.tensor([t + [0] * (width - len(t)) for t in tables], **as_int)  # type: ignore[arg-type]
        lens = torch.tensor([e - f * page for e, f in zip(ends, first)], **as_int)  # type: ignore[arg-type]
        starts = None
        if window:
            starts = torch.tensor([max(0, e - window) - f * page for e, f in zip(ends, first)], **as_int)  # type: ignore[arg-type]
        return DecodeRows(torch.tensor(cols, device=self.device), table, lens, starts)

    def _prefill_rows(
        self, segments: list[Segment], bounds: list[tuple[int, int, int]], single: list[int]
    ) -> PrefillRows:
        """The prompt chunks `single` for one prefill_attention call: chunk i's rows a..b at positions start.. see
        its first start + (b - a) positions, whose KV rope_store has written before attention runs."""
        cols = [r for i in single for r in range(bounds[i][0], bounds[i][1])]
        q_lens = [bounds[i][1] - bounds[i][0] for i in single]
        kv_lens = [bounds[i][2] + t for i, t in zip(single, q_lens)]
        tables = [segments[i].cache.pages[: -(-n // self.page)] for i, n in zip(single, kv_lens)]
        width = max(len(t) for t in tables)
        table = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32, device=self.device)
        return PrefillRows(torch.tensor(cols, device=self.device), table, q_lens, kv_lens)

    def _attention(
        self,
        pool_k: torch.Tensor,
        pool_v: torch.Tensor,
        q: torch.Tensor,
        bounds,
        single,
        chunk_pages,
        rows: DecodeRows | None,
        prefill: PrefillRows | None = None,
    ) -> torch.Tensor:
        """A layer's attention for q [N, H, hd] over its keys and values [pages, PAGE, kv, hd] in the pool (this
        step's already written) -> [N, H, hd]: prompt chunks one by one, decode rows in one call."""
        if rows is not None and not single:  # every row decodes: no row selection either way
            return self.ops.decode_attention(q, pool_k, pool_v, rows.table, rows.lens)
        out = torch.empty_like(q)
        if prefill is not None:  # every prompt chunk in one call (ops.paged_prefill)
            p = prefill
            out[p.cols] = self.ops.prefill_attention(q[p.cols], pool_k, pool_v, p.table, p.q_lens, p.kv_lens)
            single = []
        qh = q.transpose(0, 1)  # [H, N, hd]
        for i in single:
            (a, b, start), end = bounds[i], bounds[i][2] + bounds[i][1] - bounds[i][0]
            kc = pool_k[chunk_pages[i]].flatten(0, 1)[:end].transpose(0, 1)  # [kv, end, hd]
            vc = pool_v[chunk_pages[i]].flatten(0, 1)[:end].transpose(0, 1)
            out[a:b] = self.ops.prompt_attention(qh[:, a:b], kc, vc, start).transpose(0, 1)
        if rows is not None:
            out[rows.cols] = self.ops.decode_attention(q[rows.cols], pool_k, pool_v, rows.table, rows.lens)
        return out
