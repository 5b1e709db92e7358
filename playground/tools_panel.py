"""Tool definitions typed as JSON: examples, parsing with clear messages, tool_choice, and argument checks.

Validation of the definitions is the API's own (`parse_chat_request` on a request carrying them); this module adds
only what the API cannot say: where a JSON syntax error is, and whether a call's arguments fit its schema.
"""

from __future__ import annotations

import json
from typing import Any

from engine.protocol.errors import RequestValidationError
from engine.protocol.request import parse_chat_request

GET_WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}
GET_TIME: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current local time in an IANA time zone.",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "description": "e.g. Europe/Paris"}},
            "required": ["timezone"],
        },
    },
}
EXAMPLES = {"get_weather": [GET_WEATHER], "get_weather + get_time": [GET_WEATHER, GET_TIME]}
SAVED_RESULTS = {"get_weather": '{"temperature": 22, "sky": "sunny"}', "get_time": '{"time": "14:05"}'}
FIXED_CHOICES = ("auto", "none", "required")


def dumps(tools: list[dict[str, Any]]) -> str:
    return json.dumps(tools, indent=2, ensure_ascii=False)


def parse_tools(text: str) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The editor's text -> (tools, None) or (None, message). Empty text means no tools."""
    if not text.strip():
        return None, None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"Tools are not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
    if isinstance(value, dict):
        value = [value]  # one tool typed on its own
    if not isinstance(value, list):
        return None, "Tools must be a JSON array of tool objects."
    try:
        parse_chat_request({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": value})
    except RequestValidationError as exc:
        return None, exc.message
    return value or None, None


def tool_names(tools: list[dict[str, Any]] | None) -> list[str]:
    return [t["function"]["name"] for t in tools or []]


def choice_options(tools: list[dict[str, Any]] | None) -> list[str]:
    return [*FIXED_CHOICES, *tool_names(tools)]


def choice_value(selected: str | None) -> Any:
    """The tool_choice dropdown's entry -> the request value (a tool name becomes a named choice)."""
    if not selected or selected in FIXED_CHOICES:
        return selected or "auto"
    return {"type": "function", "function": {"name": selected}}


_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "array": list,
    "object": dict,
    "null": type(None),
}


def check_arguments(tools: list[dict[str, Any]] | None, name: str | None, arguments: str) -> list[str]:
    """Problems with one call's arguments against its tool's schema (top level: required, types, unknown keys)."""
    tool = next((t["function"] for t in tools or [] if t["function"]["name"] == name), None)
    if tool is None:
        return [f"no tool named {name!r} was offered"]
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        return [f"arguments are not valid JSON ({exc.msg})"]
    if not isinstance(args, dict):
        return ["arguments are not a JSON object"]
    schema = tool.get("parameters") or {}
    props: dict[str, Any] = schema.get("properties") or {}
    problems = [f"missing required {key!r}" for key in schema.get("required") or [] if key not in args]
    for key, value in args.items():
        if key not in props:
            if not schema.get("additionalProperties", False):
                problems.append(f"unexpected argument {key!r}")
            continue
        kind = props[key].get("type")
        expected = _JSON_TYPES.get(kind) if isinstance(kind, str) else None
        if expected is None:
            continue
        if not isinstance(value, expected) or (kind != "boolean" and isinstance(value, bool)):  # true is no integer
            problems.append(f"{key!r} should be {kind}, got {json.dumps(value)}")
    return problems
