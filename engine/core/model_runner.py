"""Turns scheduled token segments into logits.

A step runs a ragged batch: each segment is one sequence's new tokens (a whole or partial prompt, or the one
token sampled last step). All segments are packed into one flat token axis so the projections and MLPs of
every sequence run as single matmuls; only attention runs per segment, against that sequence's own KV cache.
This is what lets requests join and leave the batch between steps without padding or re-copying caches.

`DecoderRunner` is a lean forward for the Llama family (Llama, SmolLM, Mistral without sliding window, Qwen2,
Qwen3), reusing the HF model's own modules and weights; tests check its logits against the HF forward.
`HFRunner` serves any other causal LM through the HF forward, one segment at a time, with a DynamicCache each.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

LEAN_MODEL_TYPES = {"llama", "mistral", "qwen2", "qwen3"}


@dataclass
class KVCache:
    """One sequence's keys and values: [layers, kv_heads, capacity, head_dim] each."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    length: int = 0  # tokens whose KV is stored
    hf: Any = None  # DynamicCache, for HFRunner

    @property
    def capacity(self) -> int:
        return 0 if self.k is None else self.k.shape[2]


@dataclass
class Segment:
    cache: KVCache
    token_ids: list[int]
    want_logits: bool = True  # False for a prompt chunk that does not end the prompt
    positions: list[int] = field(default_factory=list)


def make_runner(model: Any, device: str) -> DecoderRunner | HFRunner:
    cfg = model.config
    if (
        cfg.model_type in LEAN_MODEL_TYPES
        and not getattr(cfg, "use_sliding_window", False)
        and not (cfg.model_type == "mistral" and getattr(cfg, "sliding_window", None))
    ):
        return DecoderRunner(model, device)
    return HFRunner(model, device)


def _fuse_layer(layer: Any) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """One matmul for q/k/v and one for gate/up instead of five. The HF modules' weights are rebound as views
    of the fused tensors, so memory is not doubled and the HF forward still works on the same storage."""
    attn, mlp = layer.self_attn, layer.mlp
    projections = (attn.q_proj, attn.k_proj, attn.v_proj)
    w_qkv = torch.cat([p.weight.data for p in projections])
    b_qkv = torch.cat([p.bias.data for p in projections]) if attn.q_proj.bias is not None else None
    offset = 0
    for p in projections:
        rows = p.weight.shape[0]
        p.weight.data = w_qkv[offset : offset + rows]
        if b_qkv is not None:
            p.bias.data = b_qkv[offset : offset + rows]
        offset += rows
    w_gate_up = torch.cat([mlp.gate_proj.weight.data, mlp.up_proj.weight.data])
    half = mlp.gate_proj.weight.shape[0]
    mlp.gate_proj.weight.data, mlp.up_proj.weight.data = w_gate_up[:half], w_gate_up[half:]
    return w_qkv, b_qkv, w_gate_up


def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x @ w.T for a [rows, in] activation. For a handful of rows (a decode batch) the CPU BLAS packs the
    weight on every call when asked for x @ w.T, while w @ x.T streams it once: 1.5-2.5x faster at 2..32 rows
    and 2.5x on the vocabulary projection at 4 rows (measured on 2 AVX2 cores; see bench/README.md)."""
    rows = x.shape[0]
    if rows == 1 or rows > 64:
        return F.linear(x, w, b)
    out = torch.mm(w, x.t()).t().contiguous()
    return out + b if b is not None else out


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class DecoderRunner:
    def __init__(self, model: Any, device: str) -> None:
        self.model = model
        self.device = device
        self.inner = model.model
        cfg = model.config
        self.layers = list(self.inner.layers)
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.dtype = next(model.parameters()).dtype
        self.vocab_size = model.get_output_embeddings().weight.shape[0]  # width of the logits
        self.fused = [_fuse_layer(layer) for layer in self.layers]

    def reserve(self, cache: KVCache, tokens: int) -> None:
        """Make room for `tokens` tokens in total (allocated once, to the request's known maximum)."""
        if tokens <= cache.capacity:
            return
        shape = (len(self.layers), self.n_kv, tokens, self.head_dim)
        k = torch.empty(shape, dtype=self.dtype, device=self.device)
        v = torch.empty(shape, dtype=self.dtype, device=self.device)
        if cache.length:
            k[:, :, : cache.length] = cache.k[:, :, : cache.length]
            v[:, :, : cache.length] = cache.v[:, :, : cache.length]
        cache.k, cache.v = k, v

    def fork(self, cache: KVCache) -> KVCache:
        new = KVCache()
        self.reserve(new, cache.capacity)
        new.k[:, :, : cache.length] = cache.k[:, :, : cache.length]
        new.v[:, :, : cache.length] = cache.v[:, :, : cache.length]
        new.length = cache.length
        return new

    def forward(self, segments: list[Segment]) -> torch.Tensor:
        """Logits (float32) at the last token of each segment that wants them, in segment order."""
        ids, pos, bounds = [], [], []
        for seg in segments:
            start = seg.cache.length
            self.reserve(seg.cache, start + len(seg.token_ids))
            bounds.append((len(ids), len(ids) + len(seg.token_ids), start))
            ids.extend(seg.token_ids)
            pos.extend(range(start, start + len(seg.token_ids)))
        input_ids = torch.tensor(ids, device=self.device)
        position_ids = torch.tensor([pos], device=self.device)
        h = self.inner.embed_tokens(input_ids)  # [N, D]: every token of every segment on one axis
        cos, sin = self.inner.rotary_emb(h, position_ids=position_ids)  # [1, N, hd], broadcast over heads
        n_tok = len(ids)
        q_size, kv_size = self.n_heads * self.head_dim, self.n_kv * self.head_dim
        # Single-token (decode) segments attend in one padded call; prompt chunks attend one by one.
        decode = [i for i, (a, b, _) in enumerate(bounds) if b - a == 1] if len(segments) > 1 else []
        single = [i for i in range(len(segments)) if i not in set(decode)]
        if decode:
            cols = torch.tensor([bounds[i][0] for i in decode], device=self.device)
            ends = torch.tensor([bounds[i][2] + 1 for i in decode], device=self.device)
            mask = (torch.arange(int(ends.max()), device=self.device) < ends.unsqueeze(1))[:, None, None, :]
        for li, (layer, (w_qkv, b_qkv, w_gate_up)) in enumerate(zip(self.layers, self.fused)):
            attn = layer.self_attn
            q, k, v = _linear(layer.input_layernorm(h), w_qkv, b_qkv).split((q_size, kv_size, kv_size), dim=-1)
            q = q.reshape(n_tok, self.n_heads, self.head_dim)
            k = k.reshape(n_tok, self.n_kv, self.head_dim)
            v = v.reshape(n_tok, self.n_kv, self.head_dim)
            if hasattr(attn, "q_norm"):
                q, k = attn.q_norm(q), attn.k_norm(k)
            q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [heads, N, hd]
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            for seg, (a, b, start) in zip(segments, bounds):
                seg.cache.k[li, :, start : start + b - a] = k[:, a:b]
                seg.cache.v[li, :, start : start + b - a] = v[:, a:b]
            out = q.new_empty(q.shape)
            for i in single:
                (a, b, start), cache = bounds[i], segments[i].cache
                end = start + b - a
                out[:, a:b] = self._attend(q[:, a:b], cache.k[li, :, :end], cache.v[li, :, :end], start)
            if decode:
                out[:, cols] = self._attend_decode(q[:, cols], [segments[i].cache for i in decode], mask, li)
            h = h + _linear(out.transpose(0, 1).reshape(n_tok, -1), attn.o_proj.weight, attn.o_proj.bias)
            mlp = layer.mlp
            gate, up = _linear(layer.post_attention_layernorm(h), w_gate_up).chunk(2, dim=-1)
            h = h + _linear(mlp.act_fn(gate) * up, mlp.down_proj.weight, mlp.down_proj.bias)
        for seg, (a, b, start) in zip(segments, bounds):
            seg.cache.length = start + (b - a)
        last = [b - 1 for seg, (a, b, _) in zip(segments, bounds) if seg.want_logits]
        if not last:
            return torch.empty(0)
        hidden = self.inner.norm(h[last])
        return _linear(hidden, self.model.lm_head.weight, self.model.lm_head.bias).float()

    def _attend_decode(self, q: torch.Tensor, caches: list[KVCache], mask: torch.Tensor, li: int) -> torch.Tensor:
        """One new token per sequence, ragged cache lengths: pad the caches into one batch, mask the padding."""
        lmax = mask.shape[-1]
        k = pad_sequence([c.k[li, :, : c.length + 1].transpose(0, 1) for c in caches], batch_first=True)
        v = pad_sequence([c.v[li, :, : c.length + 1].transpose(0, 1) for c in caches], batch_first=True)
        k, v = k[:, :lmax].transpose(1, 2), v[:, :lmax].transpose(1, 2)  # [B, kv_heads, Lmax, hd]
        o = F.scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(2), k, v, attn_mask=mask, enable_gqa=True)
        return o[:, :, 0].transpose(0, 1)  # [heads, B, hd]

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


class HFRunner:
    """Any causal LM through its own forward; correct everywhere, batched nowhere."""

    def __init__(self, model: Any, device: str) -> None:
        self.model = model
        self.device = device
        self.dtype = next(model.parameters()).dtype
        self.vocab_size = model.get_output_embeddings().weight.shape[0]

    def reserve(self, cache: KVCache, tokens: int) -> None:
        pass

    def fork(self, cache: KVCache) -> KVCache:
        return KVCache(length=cache.length, hf=copy.deepcopy(cache.hf))

    def forward(self, segments: list[Segment]) -> torch.Tensor:
        from transformers import DynamicCache

        rows = []
        for seg in segments:
            if seg.cache.hf is None:
                seg.cache.hf = DynamicCache(config=self.model.config)
            start = seg.cache.length
            ids = torch.tensor([seg.token_ids], device=self.device)
            positions = torch.arange(start, start + len(seg.token_ids), device=self.device)
            out = self.model(input_ids=ids, cache=seg.cache.hf, use_cache=True, cache_position=positions)
            seg.cache.length = start + len(seg.token_ids)
            if seg.want_logits:
                rows.append(out.logits[0, -1].float())
        return torch.stack(rows) if rows else torch.empty(0)
