"""Tool-call parsers by name, and the `auto` choice of one for a model (spec §8.1).

A parser takes the content text of one choice as it is generated and returns content to emit and tool-call
events. With `streaming=False` it emits nothing until `finish()` and then exactly the non-stream result, so a
service can build both responses by folding the same events.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.parsers.chatglm3 import ChatGLM3Parser
from engine.parsers.events import IdFactory, ToolCallParser, new_call_id
from engine.parsers.hermes import HermesParser

_Factory = Callable[..., ToolCallParser]
PARSERS: dict[str, _Factory] = {"hermes": HermesParser, "chatglm3": ChatGLM3Parser}
# MindIE registers the Hermes parser as qwen3 / qwen3_moe / hermes and a same-format one as qwen2_5.
ALIASES = {"qwen3": "hermes", "qwen3_moe": "hermes", "qwen2_5": "hermes"}


def canonical_name(name: str) -> str:
    """The registered name for `name` or one of its aliases; ValueError when unknown."""
    name = ALIASES.get(name, name)
    if name not in PARSERS:
        raise ValueError(f"unknown tool-call parser {name!r}; known: {', '.join(sorted([*PARSERS, *ALIASES]))}")
    return name


def make_parser(name: str, *, streaming: bool, id_factory: IdFactory | None = None) -> ToolCallParser:
    """A fresh parser for one choice. `id_factory` makes call ids (default: `call_` + 8 random [A-Za-z0-9])."""
    return PARSERS[canonical_name(name)](streaming=streaming, id_factory=id_factory or new_call_id)


def select_parser(name: str, template_text: str | None, model_type: str | None, special_tokens: set[str]) -> str | None:
    """The parser for the `tool_call_parser` setting: a name (or alias), "none", or "auto" (§8.1).

    `auto` picks hermes when the chat template mentions `<tool_call>`, chatglm3 for a ChatGLM model with an
    `<|observation|>` special token, else none. Returns the registered name, or None for no tool calling.
    """
    if name == "none":
        return None
    if name != "auto":
        return canonical_name(name)
    if template_text and "<tool_call>" in template_text:
        return "hermes"
    if model_type and model_type.lower() == "chatglm" and "<|observation|>" in special_tokens:
        return "chatglm3"
    return None
