"""Tool definitions and tool_choice of a chat request (spec §2.2 `tools` / `tool_choice` rows)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Tag, field_validator

from engine.protocol.messages import FunctionName, StrictModel, fail, show

MAX_TOOLS = 128
MAX_TOOLS_DEPTH = 10


def json_depth(value: Any, limit: int = MAX_TOOLS_DEPTH) -> int:
    """Nesting depth of a JSON value: scalars 0, an array or object 1 + the depth of its deepest child.

    Applied to the whole `tools` array, a tool's `parameters` object sits at depth 4 (tools → tool → function →
    parameters) and `parameters.properties.<arg>` at 6, so a schema can nest six more levels below `parameters`
    before the limit of 10 is exceeded. Iterative, and stops as soon as the depth exceeds `limit`.
    """
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (list, dict)):
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


class FunctionDefinition(StrictModel):
    name: FunctionName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool = False

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise fail(f"must be 'object', got {show(value.get('type'))}.", sub="type")
        return value


class Tool(StrictModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(StrictModel):
    name: str


class NamedToolChoice(StrictModel):
    type: Literal["function"]
    function: NamedFunction


ToolChoice = Annotated[
    Annotated[Literal["none", "auto", "required"], Tag("#str")] | Annotated[NamedToolChoice, Tag("#obj")],
    Discriminator(
        lambda v: {str: "#str", dict: "#obj"}.get(type(v)),
        custom_error_type="request",
        custom_error_message="must be 'none', 'auto', 'required' or {\"type\": \"function\", ...}.",
    ),
]
