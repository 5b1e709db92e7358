"""Parsers of generated text: tool calls (spec §8). Standard library only: text in, events out."""

from engine.parsers.events import ParsedDelta, ToolCallEvent, ToolCallParser, fold, new_call_id
from engine.parsers.tool_calls import PARSERS, canonical_name, make_parser, select_parser

__all__ = [
    "PARSERS",
    "ParsedDelta",
    "ToolCallEvent",
    "ToolCallParser",
    "canonical_name",
    "fold",
    "make_parser",
    "new_call_id",
    "select_parser",
]
