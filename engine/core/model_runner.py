"""DecoderRunner: turns scheduled token segments into logits for the Llama family.

A step runs a ragged batch: each segment is one sequence's new tokens (a whole or partial prompt, or the one
token sampled last step). All segments are packed into one flat token axis so the projections and MLPs of
every sequence run as single matmuls; only attention runs per segment, against that sequence's own KV cache.
This is what lets requests join and leave the batch between steps without padding or re-copying caches.

`DecoderRunner` is a lean forward for the Llama family (Llama, SmolLM, Mistral without sliding window, Qwen2,
Qwen3), reusing the HF model's own modules and weights; tests check its logits against the HF forward.
`make_runner` gives any other causal LM the HF forward (`HFRunner`, hf_runner.py). Both implement `Runner`
(runner.py); the KV page pool is `PagePool` (kv.py).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from engine.core import cpu_kernels
from engine.core.hf_runner import HFRunner
from engine.core.kv import PAGE, KVCache, PagePool
from engine.core.projection import Projection, calibrate_bf16
from engine.core.runner import Segment
from engine.core.weights import bf16_exact, fuse_layer, widen_vectors

__all__ = ["DecoderRunner", "HFRunner", "KVCache", "Segment", "make_runner"]  # what callers import from here

log = logging.getLogger(__name__)

LEAN_MODEL_TYPES = {"llama", "mistral", "qwen2", "qwen3"}


@dataclass
class DecodeRows:
    """The single-token segments of a step: their rows on the token axis, their page tables ([rows, width],
    zero-padded), how many positions each attends to, and (torch path) the padding mask."""

    cols: torch.Tensor
    table: torch.Tensor
    lens: torch.Tensor
    mask: torch.Tensor | None = None


def make_runner(model: Any, device: str, kv_tokens: int = 65536) -> DecoderRunner | HFRunner:
    cfg = model.config
    if (
        cfg.model_type in LEAN_MODEL_TYPES
        and not any(hasattr(cfg, k) for k in ("vision_config", "audio_config"))  # multimodal: HF forward
        and not getattr(cfg, "use_sliding_window", False)
        and not (cfg.model_type == "mistral" and getattr(cfg, "sliding_window", None))
    ):
        return DecoderRunner(model, device, kv_tokens)
    return HFRunner(model, device)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class DecoderRunner:
    """Keys and values live in one page pool per runner (kv.PagePool), and a sequence owns a list of pages. A step
    writes every new token's KV with one indexed copy per layer, and a decode batch reads its sequences' pages with
    one gather per layer, whatever the batch size: per-sequence Python work per layer is what dominated a batched
    step before."""

    def __init__(self, model: Any, device: str, kv_tokens: int = 65536, use_kernels: bool = True) -> None:
        self.model = model
        self.device = device
        self.inner = model.model
        cfg = model.config
        self.layers = list(self.inner.layers)
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.dtype = next(model.parameters()).dtype  # of activations and the KV cache
        self.vocab_size = model.get_output_embeddings().weight.shape[0]  # width of the logits
        # float32 on a CPU with the kernels: matrices stored in bf16 when that is exact (halves the bytes a decode
        # step streams), math in float32. The HF model's matrices then are bf16: run its own forward on a
        # `.float()` copy.
        cpu = use_kernels and str(device) == "cpu"
        kern = cpu_kernels.kernels() if cpu and self.dtype in (torch.float32, torch.bfloat16) else None
        # bf16 on a CPU with the kernels: the same float32 activations, KV cache and fused steps, with the bf16
        # matrices as loaded; only projections of many rows round their inputs to bf16 for torch's bf16 matmul
        # (bf16 dot products: 1.4x the float32 math at 16 rows, 2x at 288, on a CPU with AVX512_BF16).
        self.bf16_matmul = kern is not None and self.dtype == torch.bfloat16
        if self.bf16_matmul:
            widen_vectors(model)
            self.dtype = torch.float32
        store = torch.bfloat16 if kern is not None and bf16_exact(model) else self.dtype
        self.weights_dtype = store
        self.kern = kern  # also reads decode rows' KV pages in place (float32)
        # ...and runs the elementwise steps, for the plain Llama layer (Qwen3's q/k norms take the torch path).
        norms = [n for layer in self.layers for n in (layer.input_layernorm, layer.post_attention_layernorm)]
        norms.append(self.inner.norm)
        self.fused = (
            kern is not None
            and not hasattr(self.layers[0].self_attn, "q_norm")
            and getattr(cfg, "hidden_act", "silu") == "silu"
            and self.head_dim % 2 == 0
            and all(hasattr(n, "variance_epsilon") and n.weight.dtype == torch.float32 for n in norms)
        )
        self.norm_w = [n.weight.data.contiguous() for n in norms]
        self.norm_eps = float(getattr(self.inner.norm, "variance_epsilon", 1e-6))
        self.proj = []  # per layer: qkv, o, gate_up, down
        for layer in self.layers:
            w_qkv, b_qkv, w_gate_up = fuse_layer(layer, store)
            attn, mlp = layer.self_attn, layer.mlp
            mixed = self.bf16_matmul
            self.proj.append((
                Projection(w_qkv, b_qkv, kern, mixed),
                Projection(attn.o_proj.weight.data, attn.o_proj.bias, kern, mixed),
                Projection(w_gate_up, None, kern, mixed),
                Projection(mlp.down_proj.weight.data, mlp.down_proj.bias, kern, mixed),
            ))  # fmt: skip
        head, embed = model.lm_head, model.get_input_embeddings()
        head.weight.data = head.weight.data.to(store)  # tied: the embedding's too
        embed.weight.data = embed.weight.data.to(store)
        self.lm_head = Projection(head.weight.data, head.bias, kern, self.bf16_matmul)
        if self.bf16_matmul:
            with torch.inference_mode():
                self.bf16_rows = calibrate_bf16([p for layer in self.proj for p in layer] + [self.lm_head])
            log.info("bf16 matmul from rows (per matrix shape): %s", self.bf16_rows)
        self._own_pool(kv_tokens)

    def _own_pool(self, kv_tokens: int) -> None:
        self.pool = PagePool(len(self.layers), kv_tokens, self.n_kv, self.head_dim, self.dtype, self.device)
        self.pages = self.pool  # what the prefix cache copies pages out of and into
        self.k, self.v = self.pool.k, self.pool.v

    def sibling(self, kv_tokens: int) -> DecoderRunner:
        """A runner on the same (read-only) weights with a KV pool of its own, for a second engine in the
        process: a runner, and its pool, belong to one engine thread."""
        other = copy.copy(self)
        other._own_pool(kv_tokens)
        return other

    @property
    def free_pages(self) -> int:
        return self.pool.free_pages

    def reserve(self, cache: KVCache, tokens: int) -> None:
        self.pool.reserve(cache, tokens)

    def release(self, cache: KVCache) -> None:
        self.pool.release(cache)

    def fork(self, cache: KVCache) -> KVCache:
        return self.pool.fork(cache)

    def forward(self, segments: list[Segment]) -> torch.Tensor:
        """Logits (float32) at the last token of each segment that wants them, in segment order."""
        ids: list[int] = []
        pos: list[int] = []
        bounds: list[tuple[int, int, int]] = []  # per segment: its rows [a, b) and its first position
        slots: list[int] = []
        for seg in segments:
            start = seg.cache.length
            self.pool.reserve(seg.cache, start + len(seg.token_ids))
            bounds.append((len(ids), len(ids) + len(seg.token_ids), start))
            ids.extend(seg.token_ids)
            pos.extend(range(start, start + len(seg.token_ids)))
            pages = seg.cache.pages
            slots.extend(pages[p // PAGE] * PAGE + p % PAGE for p in range(start, start + len(seg.token_ids)))
        dev = self.device
        input_ids = torch.tensor(ids, device=dev)
        position_ids = torch.tensor([pos], device=dev)
        slot = torch.tensor(slots, device=dev)
        h = self.inner.embed_tokens(input_ids).to(self.dtype)  # [N, D]: every token of every segment on one axis
        cos, sin = self.inner.rotary_emb(h, position_ids=position_ids)  # [1, N, hd], broadcast over heads
        n_tok = len(ids)
        q_size, kv_size = self.n_heads * self.head_dim, self.n_kv * self.head_dim
        # Single-token (decode) segments attend in one padded call; prompt chunks attend one by one.
        # With the CPU kernel every decode row reads its own pages in place, a lone one included.
        decode = [i for i, (a, b, _) in enumerate(bounds) if b - a == 1] if len(segments) > 1 or self.kern else []
        single = [i for i in range(len(segments)) if i not in set(decode)]
        rows = self._decode_rows(segments, bounds, decode) if decode else None
        chunk_pages = {i: self.pool.index(segments[i].cache.pages[: -(-(bounds[i][1] - bounds[i][0] + bounds[i][2]) // PAGE)])
                       for i in single}  # fmt: skip
        if self.fused:
            last = [b - 1 for seg, (a, b, _) in zip(segments, bounds) if seg.want_logits]
            hidden = self._fused_layers(h, cos, sin, slot, bounds, single, chunk_pages, rows, last)
            for seg, (a, b, start) in zip(segments, bounds):
                seg.cache.length = start + (b - a)
            return self.lm_head(hidden) if last else torch.empty(0)
        for li, (layer, (p_qkv, p_o, p_gate_up, p_down)) in enumerate(zip(self.layers, self.proj)):
            attn = layer.self_attn
            q, k, v = p_qkv(layer.input_layernorm(h)).split((q_size, kv_size, kv_size), dim=-1)
            q = q.reshape(n_tok, self.n_heads, self.head_dim)
            k = k.reshape(n_tok, self.n_kv, self.head_dim)
            v = v.reshape(n_tok, self.n_kv, self.head_dim)
            if hasattr(attn, "q_norm"):
                q, k = attn.q_norm(q), attn.k_norm(k)
            q, k = q.transpose(0, 1), k.transpose(0, 1)  # [heads, N, hd]
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            flat_k = self.k[li].view(-1, self.n_kv, self.head_dim)
            flat_v = self.v[li].view(-1, self.n_kv, self.head_dim)
            flat_k.index_copy_(0, slot, k.transpose(0, 1))  # every new token of every segment: one copy each
            flat_v.index_copy_(0, slot, v)
            out = self._attention(li, q.transpose(0, 1), bounds, single, chunk_pages, rows)
            h = h + p_o(out.reshape(n_tok, -1))
            gate, up = p_gate_up(layer.post_attention_layernorm(h)).chunk(2, dim=-1)
            h = h + p_down(layer.mlp.act_fn(gate) * up)
        for seg, (a, b, start) in zip(segments, bounds):
            seg.cache.length = start + (b - a)
        last = [b - 1 for seg, (a, b, _) in zip(segments, bounds) if seg.want_logits]
        if not last:
            return torch.empty(0)
        hidden = self.inner.norm(h[last])
        return self.lm_head(hidden).float()

    def _fused_layers(self, h, cos, sin, slot, bounds, single, chunk_pages, rows, last) -> torch.Tensor:
        """The layers with the CPU kernels doing the elementwise steps too (norms with the residual adds, rotary
        embedding with the KV write, SiLU gating): ~9 calls a layer instead of ~45 torch ops. Returns the final
        norm's output at the rows in `last`."""
        kern, eps = self.kern, self.norm_eps
        assert kern is not None  # this path runs only with the kernels loaded
        h = h.contiguous()
        cos, sin = cos[0].contiguous(), sin[0].contiguous()
        n_tok = h.shape[0]
        normed = kern.add_rmsnorm(h, None, self.norm_w[0], eps)
        for li, (p_qkv, p_o, p_gate_up, p_down) in enumerate(self.proj):
            flat_k = self.k[li].view(-1, self.n_kv, self.head_dim)
            flat_v = self.v[li].view(-1, self.n_kv, self.head_dim)
            q = kern.rope_store(p_qkv(normed), cos, sin, slot, flat_k, flat_v, self.n_heads)  # [N, H, hd]
            out = self._attention(li, q, bounds, single, chunk_pages, rows)
            normed = kern.add_rmsnorm(h, p_o(out.view(n_tok, -1)), self.norm_w[2 * li + 1], eps)
            nxt = self.norm_w[2 * li + 2]  # the next layer's input norm, after the last layer the model's
            normed = kern.add_rmsnorm(h, p_down(kern.silu_mul(p_gate_up(normed))), nxt, eps)
        return normed[last]

    def _decode_rows(
        self, segments: list[Segment], bounds: list[tuple[int, int, int]], decode: list[int]
    ) -> DecodeRows:
        ends = [bounds[i][2] + 1 for i in decode]
        width = -(-max(ends) // PAGE)
        table = torch.tensor(
            [segments[i].cache.pages[: -(-e // PAGE)] + [0] * (width - -(-e // PAGE)) for i, e in zip(decode, ends)],
            device=self.device,
        )
        lens = torch.tensor(ends, device=self.device)
        cols = torch.tensor([bounds[i][0] for i in decode], device=self.device)
        if self.kern:
            return DecodeRows(cols, table.to(torch.int32), lens.to(torch.int32))
        mask = (torch.arange(width * PAGE, device=self.device) < lens.unsqueeze(1))[:, None, None]
        return DecodeRows(cols, table, lens, mask)

    def _attention(
        self, li: int, q: torch.Tensor, bounds, single, chunk_pages, rows: DecodeRows | None
    ) -> torch.Tensor:
        """Layer li's attention for q [N, H, hd] (its keys and values already in the pool) -> [N, H, hd]: prompt
        chunks one by one through SDPA, decode rows in one call (the kernel, or a gather and SDPA)."""
        pool_k, pool_v = self.k[li], self.v[li]  # [pages, PAGE, kv, hd]
        if rows is not None and not single and self.kern:  # every row decodes: no row selection either way
            return self.kern.decode_attention(q, pool_k, pool_v, rows.table, rows.lens)
        out = torch.empty_like(q)
        qh = q.transpose(0, 1)  # [H, N, hd]
        for i in single:
            (a, b, start), end = bounds[i], bounds[i][2] + bounds[i][1] - bounds[i][0]
            kc = pool_k[chunk_pages[i]].flatten(0, 1)[:end].transpose(0, 1)  # [kv, end, hd]
            vc = pool_v[chunk_pages[i]].flatten(0, 1)[:end].transpose(0, 1)
            out[a:b] = self._attend(qh[:, a:b], kc, vc, start).transpose(0, 1)
        if rows is not None and self.kern:
            out[rows.cols] = self.kern.decode_attention(q[rows.cols], pool_k, pool_v, rows.table, rows.lens)
        elif rows is not None:
            assert rows.mask is not None  # the torch path's rows always carry their padding mask
            shape = (*rows.table.shape, PAGE, self.n_kv, self.head_dim)
            flat = rows.table.flatten()
            out[rows.cols] = self._attend_decode(
                qh[:, rows.cols],
                pool_k.index_select(0, flat).view(shape),
                pool_v.index_select(0, flat).view(shape),
                rows.mask,
            ).transpose(0, 1)
        return out

    def _attend_decode(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """One new token per sequence against its gathered pages ([B, pages, PAGE, kv, hd]); padding is masked."""
        b = k.shape[0]
        k = k.flatten(1, 2).transpose(1, 2)  # [B, kv_heads, width, hd]
        v = v.flatten(1, 2).transpose(1, 2)
        o = F.scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(2), k, v, attn_mask=mask, enable_gqa=True)
        return o.view(b, self.n_heads, self.head_dim).transpose(0, 1)  # [heads, B, hd]

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int) -> torch.Tensor:
        t, total = q.shape[1], k.shape[1]
        mask = None
        causal = False
        if t > 1:
            if start == 0:
                causal = True
            else:
                rows = torch.arange(t, device=q.device).unsqueeze(1) + start
                mask = torch.arange(total, device=q.device).unsqueeze(0) <= rows
        o = F.scaled_dot_product_attention(
            q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), attn_mask=mask, is_causal=causal, enable_gqa=True
        )
        return o[0]
