"""Which requests get the reasoning split (spec §7.1, §7.3, §7.6), and what the chat template is told.

The split itself runs in the engine on token ids (engine/core/sequence.py); this module only decides, per
request, whether it is on, which ids are the tags, and what the thinking budget forces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.config import ServingSettings
from engine.protocol.request import ChatCompletionRequest

# Model families whose thinking mode is off unless asked for (spec §7.1 step 3); the rest default to on.
THINKING_OFF_BY_DEFAULT = {"deepseek_v3"}


@dataclass(frozen=True)
class ThinkTags:
    start_id: int
    end_id: int


@dataclass(frozen=True)
class ReasoningPlan:
    thinking: bool | None  # resolved enable_thinking (None: neither request, tokenizer nor model says)
    split: bool  # reasoning_content is separated from content
    think_ids: tuple[int, int] | None = None
    budget: int | None = None
    budget_stop_ids: tuple[int, ...] = ()


def _single_id(tokenizer: Any, tag: str) -> int | None:
    ids = tokenizer.encode(tag, add_special_tokens=False)
    return ids[0] if len(ids) == 1 else None


def think_tags(tokenizer: Any) -> ThinkTags | None:
    """The tags, when the tokenizer encodes both as single tokens (spec §7.1 condition 1)."""
    start, end = _single_id(tokenizer, "<think>"), _single_id(tokenizer, "</think>")
    return ThinkTags(start, end) if start is not None and end is not None else None


class ReasoningPolicy:
    """Built once per model; `plan()` answers per request."""

    def __init__(self, tokenizer: Any, model_type: str, settings: ServingSettings) -> None:
        self.tags = think_tags(tokenizer)
        self.settings = settings
        configured = getattr(tokenizer, "init_kwargs", {}).get("enable_thinking")
        if isinstance(configured, bool):
            self.default_thinking: bool | None = configured
        elif self.tags is not None:
            self.default_thinking = model_type not in THINKING_OFF_BY_DEFAULT
        else:
            self.default_thinking = None
        stop = settings.thinking_early_stop_text
        self.budget_stop_ids = tuple(tokenizer.encode(stop, add_special_tokens=False)) if stop else ()
        if self.tags is not None and (not self.budget_stop_ids or self.budget_stop_ids[-1] != self.tags.end_id):
            self.budget_stop_ids += (self.tags.end_id,)  # the forced text must close the reasoning

    @property
    def available(self) -> bool:
        """Whether any request can get a reasoning split: the tags exist and the server has not turned it off."""
        return self.tags is not None and self.settings.enable_reasoning != "false"

    def plan(self, req: ChatCompletionRequest) -> ReasoningPlan:
        thinking = req.enable_thinking if req.enable_thinking is not None else self.default_thinking
        mode = self.settings.enable_reasoning
        split = self.tags is not None and mode != "false" and thinking is not False
        if not split or self.tags is None:
            return ReasoningPlan(thinking, False)
        budget = req.thinking_budget if thinking else None
        return ReasoningPlan(
            thinking, True, (self.tags.start_id, self.tags.end_id), budget, self.budget_stop_ids if budget else ()
        )
