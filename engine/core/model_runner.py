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
import inspect
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from engine.core import cpu_kernels
from engine.core.projection import Projection, calibrate_bf16

log = logging.getLogger(__name__)

LEAN_MODEL_TYPES = {"llama", "mistral", "qwen2", "qwen3"}


PAGE = 16  # tokens per KV page (equal to the prefix cache's block, so a block is one page)


@dataclass
class KVCache:
    """One sequence's keys and values: the pool pages holding them (DecoderRunner), or a DynamicCache (HFRunner)."""

    pages: list[int] = field(default_factory=list)
    length: int = 0  # tokens whose KV is stored
    hf: Any = None  # DynamicCache, for HFRunner
    # HFRunner, M-RoPE models (Qwen2-VL): rope position minus cache position after the prompt's media. Kept per
    # sequence because the model's own `rope_deltas` attribute is shared by every interleaved request.
    rope_delta: int = 0

    @property
    def capacity(self) -> int:
        return len(self.pages) * PAGE


@dataclass
class Segment:
    cache: KVCache
    token_ids: list[int]
    want_logits: bool = True  # False for a prompt chunk that does not end the prompt
    positions: list[int] = field(default_factory=list)
    # Media tensors (pixel_values, image_grid_thw, input_features, ...) for a prefill that starts at position 0
    # and holds every media placeholder: multimodal models embed them on this call only.
    mm: dict[str, Any] | None = None


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


def _fuse_layer(layer: Any, store: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """One matmul for q/k/v and one for gate/up instead of five, with weights kept in `store`. The HF modules'
    weights are rebound as views of the fused tensors, so memory is not doubled."""
    attn, mlp = layer.self_attn, layer.mlp
    projections = (attn.q_proj, attn.k_proj, attn.v_proj)
    w_qkv = torch.cat([p.weight.data for p in projections]).to(store)
    b_qkv = torch.cat([p.bias.data for p in projections]) if attn.q_proj.bias is not None else None
    offset = 0
    for p in projections:
        rows = p.weight.shape[0]
        p.weight.data = w_qkv[offset : offset + rows]
        if b_qkv is not None:
            p.bias.data = b_qkv[offset : offset + rows]
        offset += rows
    w_gate_up = torch.cat([mlp.gate_proj.weight.data, mlp.up_proj.weight.data]).to(store)
    for p in (attn.o_proj, mlp.down_proj):
        p.weight.data = p.weight.data.to(store)
    half = mlp.gate_proj.weight.shape[0]
    mlp.gate_proj.weight.data, mlp.up_proj.weight.data = w_gate_up[:half], w_gate_up[half:]
    return w_qkv, b_qkv, w_gate_up


def _bf16_exact(model: Any) -> bool:
    """True when every matrix of the model's linear layers and embeddings is exactly representable in bf16 (a
    checkpoint stored in bf16 and loaded in float32), so keeping them in bf16 loses nothing."""
    for m in model.modules():
        if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
            w = m.weight.data
            if w.dtype != torch.bfloat16 and not torch.equal(w.to(torch.bfloat16).to(w.dtype), w):
                return False
    return True


def _widen_vectors(model: Any) -> None:
    """Every parameter and buffer but the matrices of linear layers and embeddings to float32 (norm weights,
    biases), in place: the bf16 model's float32 forward on the CPU kernels."""
    matrices = {id(m.weight) for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))}
    for p in model.parameters():
        if id(p) not in matrices and p.dtype == torch.bfloat16:
            p.data = p.data.float()
    for m in model.modules():
        for name, buf in m.named_buffers(recurse=False):
            if buf is not None and buf.dtype == torch.bfloat16:
                setattr(m, name, buf.float())


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class DecoderRunner:
    """Keys and values live in one pool per runner, [layers, pages, PAGE, kv_heads, head_dim], and a sequence
    owns a list of pages. A step writes every new token's KV with one indexed copy per layer, and a decode batch
    reads its sequences' pages with one gather per layer, whatever the batch size: per-sequence Python work per
    layer is what dominated a batched step before. The pool is allocated empty and pages are zeroed when first
    handed out, so resident memory follows the pages in use, not the budget."""

    paged = True

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
            _widen_vectors(model)
            self.dtype = torch.float32
        store = torch.bfloat16 if kern is not None and _bf16_exact(model) else self.dtype
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
            w_qkv, b_qkv, w_gate_up = _fuse_layer(layer, store)
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
        pages = 1 + -(-kv_tokens // PAGE)  # page 0 stays zero: padding for ragged decode batches
        shape = (len(self.layers), pages, PAGE, self.n_kv, self.head_dim)
        self.k = torch.empty(shape, dtype=self.dtype, device=device)
        self.v = torch.empty(shape, dtype=self.dtype, device=device)
        self.k[:, 0].zero_()
        self.v[:, 0].zero_()
        self._free = list(range(pages - 1, 0, -1))  # pop() hands out the lowest page first
        self._lock = threading.Lock()  # engines of the tests share a runner

    @property
    def free_pages(self) -> int:
        return len(self._free)

    def reserve(self, cache: KVCache, tokens: int) -> None:
        """Make room for `tokens` tokens in total."""
        need = -(-tokens // PAGE) - len(cache.pages)
        if need <= 0:
            return
        with self._lock:
            if need > len(self._free):
                raise RuntimeError("KV cache pool exhausted")
            new = [self._free.pop() for _ in range(need)]
        idx = torch.tensor(new, device=self.device)
        self.k[:, idx] = 0  # fresh pages may hold anything: a NaN in a masked slot would still poison attention
        self.v[:, idx] = 0
        cache.pages.extend(new)

    def release(self, cache: KVCache) -> None:
        with self._lock:
            self._free.extend(reversed(cache.pages))
        cache.pages, cache.length = [], 0

    def fork(self, cache: KVCache) -> KVCache:
        new = KVCache()
        self.reserve(new, cache.capacity)
        src, dst = torch.tensor(cache.pages, device=self.device), torch.tensor(new.pages, device=self.device)
        self.k[:, dst] = self.k[:, src]
        self.v[:, dst] = self.v[:, src]
        new.length = cache.length
        return new

    def _page_index(self, pages: list[int]) -> slice | torch.Tensor:
        """Index of a sequence's pages in the pool: a slice (a view, no copy) when they are consecutive, which the
        lowest-first allocator makes the usual case for a lone stream."""
        if pages and pages[-1] - pages[0] == len(pages) - 1 and all(b == a + 1 for a, b in zip(pages, pages[1:])):
            return slice(pages[0], pages[-1] + 1)
        return torch.tensor(pages, device=self.device)

    def read_page(self, cache: KVCache, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A copy of the i-th page's keys and values, [layers, PAGE, kv_heads, head_dim] each."""
        page = cache.pages[i]
        return self.k[:, page].clone(), self.v[:, page].clone()

    def write_page(self, cache: KVCache, i: int, k: torch.Tensor, v: torch.Tensor) -> None:
        page = cache.pages[i]
        self.k[:, page] = k
        self.v[:, page] = v

    def forward(self, segments: list[Segment]) -> torch.Tensor:
        """Logits (float32) at the last token of each segment that wants them, in segment order."""
        ids, pos, bounds, slots = [], [], [], []
        for seg in segments:
            start = seg.cache.length
            self.reserve(seg.cache, start + len(seg.token_ids))
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
        chunk_pages = {i: self._page_index(segments[i].cache.pages[: -(-(bounds[i][1] - bounds[i][0] + bounds[i][2]) // PAGE)])
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


class HFRunner:
    """Any causal LM through its own forward; correct everywhere, batched nowhere."""

    def __init__(self, model: Any, device: str) -> None:
        self.model = model
        self.device = device
        self.dtype = next(model.parameters()).dtype
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        inner = getattr(model, "model", None)
        self.mrope = callable(getattr(inner, "get_rope_index", None))  # Qwen2-VL family: explicit 3-D positions
        params = inspect.signature(model.forward).parameters
        self._keep_last = "logits_to_keep" in params
        # No logits_to_keep (Qwen2-Audio): run the body and project only the last position, not the whole prompt
        # (a 30 s clip is 750 tokens of 151k logits each). Only for media models, whose head is a plain lm_head.
        self._split_head = not self._keep_last and hasattr(model.config, "audio_config") and hasattr(model, "lm_head")

    paged = False

    def reserve(self, cache: KVCache, tokens: int) -> None:
        pass

    def release(self, cache: KVCache) -> None:
        cache.hf, cache.length, cache.rope_delta = None, 0, 0

    def fork(self, cache: KVCache) -> KVCache:
        return KVCache(length=cache.length, hf=copy.deepcopy(cache.hf), rope_delta=cache.rope_delta)

    def _media_tensor(self, t: torch.Tensor) -> torch.Tensor:
        """Pixels and audio features in the model's dtype (bf16 models then never see float32 activations,
        whichever model casts or not); grids, masks and per-video seconds as they are."""
        if t.is_floating_point() and t.ndim >= 2:
            return t.to(self.device, self.dtype)
        return t.to(self.device)

    def _mrope_positions(self, seg: Segment, ids: torch.Tensor, start: int) -> torch.Tensor:
        """[3, 1, L] positions. A prefill with images or video gets them from the model's get_rope_index, which
        also gives the sequence's delta; every later call continues from the cache length plus that delta."""
        mm = seg.mm or {}
        if start == 0 and ("image_grid_thw" in mm or "video_grid_thw" in mm):
            cfg = self.model.config
            types = (ids == cfg.image_token_id).int() + 2 * (ids == cfg.video_token_id).int()
            grids = {k: mm[k].to(self.device) for k in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts")
                     if k in mm}  # fmt: skip
            positions, delta = self.model.model.get_rope_index(ids, mm_token_type_ids=types, **grids)
            seg.cache.rope_delta = int(delta.flatten()[0])
            return positions
        if start == 0:
            seg.cache.rope_delta = 0
        pos = torch.arange(start, start + ids.shape[1], device=self.device) + seg.cache.rope_delta
        return pos.view(1, 1, -1).expand(3, 1, -1)

    def forward(self, segments: list[Segment]) -> torch.Tensor:
        from transformers import DynamicCache

        rows = []
        for seg in segments:
            if seg.cache.hf is None:
                seg.cache.hf = DynamicCache(config=self.model.config)
            start = seg.cache.length
            ids = torch.tensor([seg.token_ids], device=self.device)
            kwargs: dict[str, Any] = {"cache": seg.cache.hf, "use_cache": True}
            if self.mrope:
                kwargs["position_ids"] = self._mrope_positions(seg, ids, start)
            else:
                kwargs["cache_position"] = torch.arange(start, start + len(seg.token_ids), device=self.device)
            if seg.mm and start == 0:
                kwargs.update({k: self._media_tensor(v) for k, v in seg.mm.items()})
            if self._split_head:
                hidden = self.model.model(input_ids=ids, **kwargs).last_hidden_state
                logits = self.model.lm_head(hidden[:, -1:])
            else:
                logits = self.model(input_ids=ids, logits_to_keep=1, **kwargs).logits if self._keep_last else \
                    self.model(input_ids=ids, **kwargs).logits  # fmt: skip
            seg.cache.length = start + len(seg.token_ids)
            if seg.want_logits:
                rows.append(logits[0, -1].float())
        return torch.stack(rows) if rows else torch.empty(0)
