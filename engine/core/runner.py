"""What the engine asks of a model runner: one packed forward over the step's segments, and the caches' lifecycle.

Two runners implement `Runner`: DecoderRunner (model_runner.py), the lean ragged-batch forward of the Llama family
with its KV in a page pool, and HFRunner (hf_runner.py), any other causal LM through the HF forward, a
DynamicCache per sequence. `make_runner` (model_runner.py) picks one for a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from engine.core.kv import KVCache, PageStore


@dataclass
class Segment:
    """One sequence's new tokens in a step: a whole or partial prompt, or the one token sampled last step."""

    cache: KVCache
    token_ids: list[int]
    want_logits: bool = True  # False for a prompt chunk that does not end the prompt
    all_logits: bool = False  # a row for every token, not only the last (a decode step with speculative drafts)
    positions: list[int] = field(default_factory=list)
    # Media tensors (pixel_values, image_grid_thw, input_features, ...) for a prefill that starts at position 0
    # and holds every media placeholder: multimodal models embed them on this call only.
    mm: dict[str, Any] | None = None
    adapter: int = 0  # the LoRA adapter its rows run with (engine/core/lora.py): 0 = the base model
    # A prompt chunk whose every token's logits are wanted (`prompt_logprobs`): the runner leaves them here,
    # [tokens, vocab] float32, beside the rows forward() returns (which stay as they are).
    prompt_logits: bool = False
    prompt_rows: Any = None


@runtime_checkable
class Runner(Protocol):
    vocab_size: int  # width of the logits

    @property
    def pages(self) -> PageStore | None:
        """The KV pages the prefix cache copies out and in; None: no pages (no prefix cache). Read-only here, so a
        runner may hold a narrower kind (the lean runner's PagePool or SplitPages)."""
        ...

    @property
    def padding(self) -> int:
        """KV tokens held beyond the sequences' own (a padded batch's rows), counted against the budget."""
        ...

    def join_padding(self, tokens: int) -> int:
        """The padding a sequence of `tokens` tokens would add when it starts decoding beside the others."""
        ...

    def forward(self, segments: list[Segment]) -> torch.Tensor:
        """Logits (float32) at the last token of each segment that wants them, in segment order; every segment's
        cache grows by its tokens."""
        ...

    def reserve(self, cache: KVCache, tokens: int) -> None:
        """Make room for `tokens` tokens in total in `cache`."""
        ...

    def release(self, cache: KVCache) -> None:
        """Free what `cache` holds; it is empty afterwards."""
        ...

    def fork(self, cache: KVCache) -> KVCache:
        """A new cache holding a copy of `cache`'s keys and values."""
        ...

    def sibling(self, kv_tokens: int) -> Runner:
        """A runner on the same weights for another engine of the process, with KV memory of its own: a runner is
        driven by one engine thread, so nothing in it is locked."""
        ...
