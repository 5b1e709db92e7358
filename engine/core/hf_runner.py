"""HFRunner: any causal LM through its own HF forward, one segment at a time, with a DynamicCache per sequence.

The engine's fallback for what DecoderRunner does not run (multimodal models, sliding windows, other families):
correct everywhere, batched nowhere. Its caches hold no pages, so the prefix cache is off for it.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch

from engine.core.kv import KVCache, PageStore
from engine.core.runner import Segment


class HFRunner:
    """Any causal LM through its own forward; correct everywhere, batched nowhere."""

    pages: PageStore | None = None  # a DynamicCache per sequence: no pages for the prefix cache to copy

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

    def sibling(self, kv_tokens: int) -> HFRunner:
        """A runner for a second engine on the same model (its caches live in the sequences, not here)."""
        return self

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
