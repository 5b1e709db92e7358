"""HFRunner: any causal LM through its own HF forward; a step's decode rows run as one padded batch.

The engine's fallback for what DecoderRunner does not run (other families, sliding windows, multimodal models).
A prompt (or prompt chunk) runs alone through the forward with its own DynamicCache. A sequence that decodes joins
the runner's *cohort*: one batched DynamicCache in which each decoding sequence owns a row, right-aligned (row i's
tokens are the last `length_i` slots of every layer, zeros before them), so a step's single-token segments run as
one forward of [rows, 1] tokens with a 2-D attention mask over the valid slots and each row's own position ids.
Copies happen when the cohort changes (a sequence joins: padded to the cohort's width and concatenated; one leaves:
the rows that stay are selected and the columns only padding for all of them trimmed), not every step; a fork
copies its row out. Right-aligned rows keep slot distance equal to position distance, so sliding-window layers
(which keep the last window of slots) stay exact. Multimodal prompts prefill alone with their media, then decode in
the cohort (Qwen2-VL's M-RoPE rows at their cache length plus their own rope delta). A forward without
logits_to_keep (Qwen2-Audio) and caches other than full or sliding attention (chunked, linear, compressed) keep the
one-by-one path.
Its caches hold no pages, so the prefix cache is off for it.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.core.kv import KVCache, PageStore
from engine.core.runner import Segment

BATCHED_LAYER_TYPES = {"full_attention", "sliding_attention"}


@dataclass
class Cohort:
    """The batched cache of the decoding sequences: `members[i]` owns row i (None: released, dropped at the next
    step); every full-attention layer holds `width` slots."""

    cache: Any  # DynamicCache, [rows, kv_heads, slots, head_dim] per layer
    members: list[KVCache | None] = field(default_factory=list)
    width: int = 0

    def row(self, cache: KVCache) -> int:
        return next(i for i, m in enumerate(self.members) if m is cache)


def batchable(model: Any) -> bool:
    """Whether the model's decode rows can share one padded DynamicCache: its forward takes a 2-D attention mask,
    position ids and logits_to_keep, and its cache layers are all full or sliding attention."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer, get_layer_types_and_kwargs

    cfg = model.config
    params = inspect.signature(model.forward).parameters
    if not all(k in params for k in ("attention_mask", "position_ids", "logits_to_keep")):
        return False  # Qwen2-Audio among them: no logits_to_keep
    try:
        types, _ = get_layer_types_and_kwargs(cfg.get_text_config(decoder=True))
        layers = DynamicCache(config=cfg).layers
    except (AttributeError, KeyError, TypeError, ValueError):  # a config the cache cannot read: one by one
        return False
    plain = (DynamicLayer, DynamicSlidingWindowLayer)
    return set(types) <= BATCHED_LAYER_TYPES and all(type(x) in plain for x in layers)


def _fit(x: torch.Tensor, width: int) -> torch.Tensor:
    """x [rows, heads, slots, hd] right-aligned to `width` slots: the last ones kept, zeros padded on the left."""
    have = x.shape[-2]
    if have >= width:
        return x[..., have - width :, :]
    return torch.nn.functional.pad(x, (0, 0, width - have, 0))


def _layer_width(layer: Any, width: int) -> int:
    """Slots a cache layer holds for a cache `width` tokens long: a sliding layer keeps its last window - 1."""
    return min(width, layer.sliding_window - 1) if layer.is_sliding else width


def _set_layer(layer: Any, keys: torch.Tensor, values: torch.Tensor, width: int) -> None:
    layer.keys, layer.values = keys, values
    if not layer.is_initialized:
        layer.device = keys.device
        layer.is_initialized = True
        if layer.is_sliding:
            layer._sliding_window_tensor = layer._sliding_window_tensor.to(keys.device)
    if layer.is_sliding:
        layer.cumulative_length = width


class HFRunner:
    """Any causal LM through its own forward; decode rows batched in one padded cache (`batched=False`, or a model
    `batchable` rejects: every segment alone)."""

    pages: PageStore | None = None  # DynamicCaches: no pages for the prefix cache to copy

    def __init__(self, model: Any, device: str, batched: bool = True) -> None:
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
        self.batched = batched and batchable(model)
        self.cohort: Cohort | None = None

    @property
    def padding(self) -> int:
        """KV slots the cohort holds beyond its live rows' own tokens (each right-aligned to the widest); released
        rows go at its next step. The scheduler counts them against the KV budget (kv.KVBudget)."""
        cohort = self.cohort
        return sum(cohort.width - m.length for m in cohort.members if m is not None) if cohort is not None else 0

    def join_padding(self, tokens: int) -> int:
        """The padding a sequence of `tokens` tokens adds when it joins the cohort: its own row up to the cohort's
        width, or every live row up to its length when it is the longest."""
        cohort = self.cohort
        if cohort is None or not self.batched:
            return 0
        rows = sum(m is not None for m in cohort.members)
        return max(0, cohort.width - tokens) + rows * max(0, tokens - cohort.width)

    def sibling(self, kv_tokens: int) -> HFRunner:
        """A runner for a second engine on the same model: the same weights, a cohort of its own."""
        other = copy.copy(self)
        other.cohort = None
        return other

    def reserve(self, cache: KVCache, tokens: int) -> None:
        pass

    def release(self, cache: KVCache) -> None:
        cohort = self.cohort
        if isinstance(cache.hf, Cohort) and cohort is cache.hf:
            cohort.members[cohort.row(cache)] = None  # dropped with the others at the next step
            if not any(cohort.members):
                self.cohort = None
        cache.hf, cache.length, cache.rope_delta = None, 0, 0

    def fork(self, cache: KVCache) -> KVCache:
        if isinstance(cache.hf, Cohort):
            return KVCache(length=cache.length, hf=self._row_cache(cache), rope_delta=cache.rope_delta)
        return KVCache(length=cache.length, hf=copy.deepcopy(cache.hf), rope_delta=cache.rope_delta)

    # ---- the cohort ----

    def _new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _row_cache(self, cache: KVCache) -> Any:
        """A DynamicCache of its own holding a copy of a cohort member's row, without the padding."""
        assert self.cohort is not None
        i, n = self.cohort.row(cache), cache.length
        out = self._new_cache()
        for src, dst in zip(self.cohort.cache.layers, out.layers):
            w = _layer_width(src, n)
            _set_layer(dst, src.keys[i : i + 1, :, -w:].clone(), src.values[i : i + 1, :, -w:].clone(), n)
        return out

    def _leave(self, caches: list[KVCache]) -> None:
        """Move these members out to caches of their own (they run alone this step, or not at all)."""
        assert self.cohort is not None
        for cache in caches:
            cache.hf = self._row_cache(cache)
            self.cohort.members[self.cohort.row(cache)] = None

    def _compact(self) -> None:
        """Drop released rows and the columns that are padding for every row that stays."""
        cohort = self.cohort
        if cohort is None or all(cohort.members):
            return
        keep = [i for i, m in enumerate(cohort.members) if m is not None]
        if not keep:
            self.cohort = None
            return
        members = [cohort.members[i] for i in keep]
        width = max(m.length for m in members if m is not None)
        idx = torch.tensor(keep, device=self.device)
        for layer in cohort.cache.layers:
            w = _layer_width(layer, width)
            _set_layer(
                layer, _fit(layer.keys.index_select(0, idx), w), _fit(layer.values.index_select(0, idx), w), width
            )
        cohort.members, cohort.width = members, width

    def _join(self, caches: list[KVCache]) -> None:
        """Add these sequences' own caches to the cohort as new rows (the first becomes the cohort when none)."""
        if self.cohort is None:
            first = caches[0]
            self.cohort = Cohort(first.hf, [first], first.length)
            first.hf = self.cohort
            caches = caches[1:]
        if not caches:
            return
        cohort = self.cohort
        width = max(cohort.width, *(c.length for c in caches))
        for li, layer in enumerate(cohort.cache.layers):
            w = _layer_width(layer, width)
            keys = [_fit(layer.keys, w)] + [_fit(c.hf.layers[li].keys, w) for c in caches]
            values = [_fit(layer.values, w)] + [_fit(c.hf.layers[li].values, w) for c in caches]
            _set_layer(layer, torch.cat(keys), torch.cat(values), width)
        for c in caches:
            c.hf = cohort
        cohort.members.extend(caches)
        cohort.width = width

    def _decode(self, segments: list[Segment]) -> torch.Tensor:
        """One forward for these single-token segments, through the cohort: their last-token logits in order."""
        self._compact()
        mine = {id(s.cache) for s in segments}
        cohort = self.cohort
        if cohort is not None:  # members not decoding this step leave, so every row gets this step's token
            self._leave([m for m in cohort.members if m is not None and id(m) not in mine])
            self._compact()
        self._join([s.cache for s in segments if not isinstance(s.cache.hf, Cohort)])
        cohort = self.cohort
        assert cohort is not None
        rows = len(cohort.members)
        tokens = [0] * rows
        for seg in segments:
            tokens[cohort.row(seg.cache)] = seg.token_ids[0]
        members = [m for m in cohort.members if m is not None]
        lengths = torch.tensor([m.length for m in members], device=self.device)
        pos = lengths + torch.tensor([m.rope_delta for m in members], device=self.device) if self.mrope else lengths
        positions = pos.view(1, -1, 1).expand(3, -1, 1) if self.mrope else pos[:, None]  # M-RoPE: [3, rows, 1]
        slots = torch.arange(cohort.width + 1, device=self.device)
        # [rows, width + 1]: valid slots and the new one; none without padding (one row, or n candidates alike)
        mask = (slots >= cohort.width - lengths[:, None]).long() if int(lengths.min()) < cohort.width else None
        grown = False
        try:
            logits = self.model(
                input_ids=torch.tensor(tokens, device=self.device)[:, None],
                attention_mask=mask,
                position_ids=positions,
                cache=cohort.cache,
                use_cache=True,
                logits_to_keep=1,
            ).logits
            grown = True
        finally:
            if not grown:  # the forward raised (the error goes on to the engine, which ends these requests) and
                self._drop_cohort()  # may have grown some layers of the cache: it is no longer one width
        cohort.width += 1
        for m in cohort.members:
            if m is not None:
                m.length += 1
        order = torch.tensor([cohort.row(s.cache) for s in segments], device=self.device)
        return logits[order, -1].float()

    def _drop_cohort(self) -> None:
        if self.cohort is not None:
            for m in self.cohort.members:
                if m is not None:
                    m.hf = None
            self.cohort = None

    # ---- one segment alone ----

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
            grids = {
                k: mm[k].to(self.device) for k in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts") if k in mm
            }
            positions, delta = self.model.model.get_rope_index(ids, mm_token_type_ids=types, **grids)
            seg.cache.rope_delta = int(delta.flatten()[0])
            return positions
        if start == 0:
            seg.cache.rope_delta = 0
        pos = torch.arange(start, start + ids.shape[1], device=self.device) + seg.cache.rope_delta
        return pos.view(1, 1, -1).expand(3, 1, -1)

    def _alone(self, seg: Segment) -> torch.Tensor:
        """The segment through the forward with its sequence's own cache: logits [1, vocab] at its last token."""
        if seg.cache.hf is None:
            seg.cache.hf = self._new_cache()
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
            logits = self.model.lm_head(hidden if seg.prompt_logits else hidden[:, -1:])
        else:
            last_only = self._keep_last and not seg.prompt_logits
            keep = {"logits_to_keep": 1} if last_only else {}
            logits = self.model(input_ids=ids, **keep, **kwargs).logits
        if seg.prompt_logits:  # every token's row (`prompt_logprobs`)
            seg.prompt_rows = logits[0].float()
        seg.cache.length = start + len(seg.token_ids)
        return logits[0, -1:].float()

    def forward(self, segments: list[Segment]) -> torch.Tensor:
        """Logits (float32) at the last token of each segment that wants them, in segment order. Prompts and
        prompt chunks run alone; with `batched`, the single-token segments of sequences with a cache run as one
        batch through the cohort."""
        decode = [
            i
            for i, s in enumerate(segments)
            if self.batched and len(s.token_ids) == 1 and s.cache.length and not s.prompt_logits
        ]
        out: dict[int, torch.Tensor] = {}
        alone = [i for i in range(len(segments)) if i not in set(decode)]
        if self.cohort is not None:  # a member with a prompt chunk (never in practice) runs it alone
            self._leave([segments[i].cache for i in alone if segments[i].cache.hf is self.cohort])
        for i in alone:
            out[i] = self._alone(segments[i])
        if decode:
            for i, row in zip(decode, self._decode([segments[i] for i in decode])):
                out[i] = row[None]
        rows = [out[i] for i, s in enumerate(segments) if s.want_logits]
        return torch.cat(rows) if rows else torch.empty(0)
