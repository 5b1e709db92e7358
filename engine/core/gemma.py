"""Gemma 3 (`gemma3_text`, Gemma3ForCausalLM) on DecoderRunner: what its layer adds to the Llama layer.

The same fused projections, page pool and device ops as the Llama family (model_runner.py), and these
differences, each as HF's modeling_gemma3.py computes it:

- embeddings times sqrt(hidden), the product in the model's own dtype (bf16 rounds the scale: 25.25 for 640);
- RMSNorm scales by (1 + weight): folded once into the weights handed to the ops, in float32;
- sandwich norms: post_attention_layernorm on the attention output before the residual add, then
  pre_feedforward_layernorm, and post_feedforward_layernorm on the MLP output before its residual add;
- per-head q / k norms (the reference's `rope_store` with `qk_norm`), gelu_tanh gating (`gelu_tanh_mul`);
- attention scaled by query_pre_attn_scalar ** -0.5 (q rescaled before the ops, which scale by head_dim ** -0.5;
  nothing to do where the two agree, as in the 270M);
- two RoPEs (rope_theta for full-attention layers, the local base for sliding layers, per `layer_types`);
- sliding layers attend to the last `sliding_window` positions only: their decode rows read only the pages that
  window spans (page tables cut at the window's first page, and a start inside it), prompt chunks read only the
  pages from the first window a chunk's queries need. Their keys and values live in a pool of their own, in which a
  sequence holds only the pages of its window (window_kv.py); the full-attention layers keep every position;
- tied embeddings (the runner's lm_head is the embedding) and the final logit softcapping when configured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from engine.core.kv import PAGE

if TYPE_CHECKING:
    from engine.core.lora import LoraStep
    from engine.core.model_runner import DecodeRows, DecoderRunner
    from engine.core.runner import Segment

MODEL_TYPE = "gemma3_text"
SLIDING = "sliding_attention"


def supported(cfg: Any) -> bool:
    """The Gemma 3 text configs this module implements; anything else keeps the HF forward."""
    return (
        cfg.model_type == MODEL_TYPE
        and getattr(cfg, "hidden_activation", "gelu_pytorch_tanh") == "gelu_pytorch_tanh"
        and getattr(cfg, "attn_logit_softcapping", None) is None
        and not getattr(cfg, "use_bidirectional_attention", False)
        and set(cfg.layer_types) <= {SLIDING, "full_attention"}
    )


@dataclass
class Window:
    """A step's view for the sliding layers: its decode rows' page tables from their window's first page (with the
    window's start in that table, model_runner.DecodeRows) and, per prompt chunk, the pages from the first one its
    queries need."""

    rows: DecodeRows | None
    chunks: dict[int, tuple[slice | torch.Tensor, int]]  # segment -> (pool index of its pages, their first position)


class GemmaLayers:
    def __init__(self, model: Any, model_dtype: torch.dtype, dtype: torch.dtype) -> None:
        cfg = model.config
        inner = model.model

        def plus_one(norm: Any) -> torch.Tensor:
            return (1.0 + norm.weight.data.float()).to(dtype).contiguous()

        self.norms = [
            tuple(
                plus_one(n)
                for n in (
                    layer.input_layernorm,
                    layer.post_attention_layernorm,
                    layer.pre_feedforward_layernorm,
                    layer.post_feedforward_layernorm,
                )
            )
            for layer in inner.layers
        ]
        self.final_norm = plus_one(inner.norm)
        self.eps = float(cfg.rms_norm_eps)
        self.qk_norm = [
            (plus_one(layer.self_attn.q_norm), plus_one(layer.self_attn.k_norm), self.eps) for layer in inner.layers
        ]
        self.sliding = [t == SLIDING for t in cfg.layer_types[: cfg.num_hidden_layers]]
        self.window = int(cfg.sliding_window or 0)
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        ratio = float(cfg.query_pre_attn_scalar) ** -0.5 / head_dim**-0.5
        self.q_scale = None if ratio == 1.0 else ratio
        self.softcap = getattr(cfg, "final_logit_softcapping", None)
        self.model_dtype = model_dtype  # the dtype the checkpoint was loaded in: the embedding's product's
        self.rotary = inner.rotary_emb
        self.layer_types = sorted(set(cfg.layer_types))

    def embed(self, embedding: Any, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """HF's Gemma3TextScaledWordEmbedding in the model's dtype (the runner may store the matrix in bf16)."""
        rows = embedding.rows(ids) if hasattr(embedding, "rows") else F.embedding(ids, embedding.weight)
        rows = rows.to(self.model_dtype)
        return (rows * embedding.embed_scale.to(self.model_dtype)).to(dtype)

    def logits(self, logits: torch.Tensor) -> torch.Tensor:
        if self.softcap is None:
            return logits
        return torch.tanh(logits / self.softcap) * self.softcap

    def window_view(
        self, runner: DecoderRunner, segments: list[Segment], bounds: list[tuple[int, int, int]], single: list[int]
    ) -> Window:
        """The sliding layers' pages: the decode rows (single tokens and drafted segments' tokens, as the full
        layers' rows) through the runner's own _decode_rows with the window, the prompt chunks here."""
        assert runner.window is not None  # the runner's sliding layers have their own pool
        w = self.window
        chunks = {}
        for i in single:
            a, b, start = bounds[i]
            first = max(0, start - w + 1) // PAGE  # the first page the chunk's first query still sees
            pages = segments[i].cache.window[first : -(-(start + b - a) // PAGE)]
            chunks[i] = (runner.window.pool.index(pages), first * PAGE)
        decode = [i for i in range(len(segments)) if i not in set(single)]
        return Window(runner._decode_rows(segments, bounds, decode, w) if decode else None, chunks)

    def layers(
        self,
        r: DecoderRunner,
        h: torch.Tensor,
        position_ids: torch.Tensor,
        slot: torch.Tensor,
        window_slot: torch.Tensor | None,
        bounds: list[tuple[int, int, int]],
        single: list[int],
        chunk_pages: dict,
        rows: DecodeRows | None,
        last: list[int],
        segments: list[Segment],
        lora: LoraStep | None = None,
    ) -> torch.Tensor:
        """DecoderRunner._layers for Gemma 3: the final norm's output at the rows in `last`."""
        ops, eps = r.ops, self.eps
        adapters, step = (r.lora, lora) if lora is not None else (None, None)

        def delta(li: int, k: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return y if adapters is None or step is None else adapters.add(step, li, k, x, y)

        rope = {}
        for kind in self.layer_types:
            cos, sin = self.rotary(h, position_ids=position_ids, layer_type=kind)
            rope[kind == SLIDING] = (cos[0].contiguous(), sin[0].contiguous())
        win = self.window_view(r, segments, bounds, single) if r.window is not None else None
        h = h.contiguous()
        if rows is not None and not single and lora is None and (win is None or win.rows is not None):
            fused = r._fused()  # every row decodes: all the layers in one native call (fused_step.py)
            if fused is not None and h.shape[0] < fused.rows:
                either = next(iter(rope.values()))  # a model with one kind of layer computed one table
                ropes = [rope.get(False, either), rope.get(True, either)]
                return fused.run(h, ropes, slot, rows, window_slot, win.rows if win is not None else None)[last]
        n_tok = h.shape[0]
        normed = ops.add_rmsnorm(h, None, self.norms[0][0], eps)
        for li, (p_qkv, p_o, p_gate_up, p_down) in enumerate(r.proj):
            _, w_post_attn, w_pre_ff, w_post_ff = self.norms[li]
            sliding = self.sliding[li]
            cos, sin = rope[sliding]
            pool_k, pool_v = r.layer_kv[li]  # in the window pool for a sliding layer (r.sliding)
            flat_k = pool_k.view(-1, r.n_kv, r.head_dim)
            flat_v = pool_v.view(-1, r.n_kv, r.head_dim)
            qkv = delta(li, 0, normed, p_qkv(normed))
            windowed = win is not None and r.sliding[li]
            at = window_slot if windowed and window_slot is not None else slot
            q = ops.rope_store(qkv, cos, sin, at, flat_k, flat_v, r.n_heads, self.qk_norm[li])  # [N, H, hd]
            if self.q_scale is not None:
                q = q * self.q_scale
            if windowed and win is not None:
                out = self._sliding_attention(r, pool_k, pool_v, q, bounds, single, win)
            else:
                out = r._attention(pool_k, pool_v, q, bounds, single, chunk_pages, rows)
            out = out.reshape(n_tok, -1)
            attn = ops.add_rmsnorm(delta(li, 1, out, p_o(out)), None, w_post_attn, eps)
            normed = ops.add_rmsnorm(h, attn, w_pre_ff, eps)
            gated = ops.gelu_tanh_mul(delta(li, 2, normed, p_gate_up(normed)))
            mlp = ops.add_rmsnorm(delta(li, 3, gated, p_down(gated)), None, w_post_ff, eps)
            nxt = self.norms[li + 1][0] if li + 1 < len(self.norms) else self.final_norm
            normed = ops.add_rmsnorm(h, mlp, nxt, eps)
        return normed[last]

    def _sliding_attention(
        self,
        r: DecoderRunner,
        pool_k: torch.Tensor,
        pool_v: torch.Tensor,
        q: torch.Tensor,
        bounds: list[tuple[int, int, int]],
        single: list[int],
        win: Window,
    ) -> torch.Tensor:
        """A sliding layer's attention: DecoderRunner._attention over the window's pages only."""
        wr = win.rows
        if wr is not None and not single:
            return r.ops.decode_attention(q, pool_k, pool_v, wr.table, wr.lens, wr.starts)
        out = torch.empty_like(q)
        qh = q.transpose(0, 1)  # [H, N, hd]
        for i in single:
            (a, b, start), (index, k0) = bounds[i], win.chunks[i]
            n = start + b - a - k0  # the keys from the first page read up to the chunk's last token
            kc = pool_k[index].flatten(0, 1)[:n].transpose(0, 1)  # [kv, n, hd]
            vc = pool_v[index].flatten(0, 1)[:n].transpose(0, 1)
            out[a:b] = r.ops.prompt_attention(qh[:, a:b], kc, vc, start - k0, self.window).transpose(0, 1)
        if wr is not None:
            out[wr.cols] = r.ops.decode_attention(q[wr.cols], pool_k, pool_v, wr.table, wr.lens, wr.starts)
        return out
