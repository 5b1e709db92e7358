"""Tool definitions typed as JSON: examples, parsing with clear messages, tool_choice, and argument checks.

Validation of the definitions is the API's own (`parse_chat_request` on a request carrying them); this module adds
only what the API cannot say: where a JSON syntax error is, and whether a call's arguments fit its schema.
"""

from __future__ import annotations

import json
from typing import Any

from engine.protocol.errors import RequestValidationError
from engine.protocol.request import parse_chat_request
from playground.client.say import say

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


# json's own messages (json.decoder) in Chinese; one not listed stays as json says it.
JSON_ERRORS_ZH = {
    "Expecting value": "此处应为一个值",
    "Expecting property name enclosed in double quotes": "此处应为双引号括起的属性名",
    "Expecting ',' delimiter": "此处应为分隔符 ','",
    "Expecting ':' delimiter": "此处应为分隔符 ':'",
    "Unterminated string starting at": "字符串没有结束",
    "Extra data": "多余的数据",
    "Invalid control character at": "无效的控制字符",
    "Invalid \\escape": "无效的转义",
    "Invalid \\uXXXX escape": "无效的 \\uXXXX 转义",
}


def json_error(exc: json.JSONDecodeError, lang: str = "en") -> str:
    """Where a JSON text is broken and why: "<why> at line L, column C" in `lang`."""
    if lang == "zh":
        return f"{JSON_ERRORS_ZH.get(exc.msg, exc.msg)}（第 {exc.lineno} 行第 {exc.colno} 列）"
    return f"{exc.msg} at line {exc.lineno}, column {exc.colno}"


def dumps(tools: list[dict[str, Any]]) -> str:
    return json.dumps(tools, indent=2, ensure_ascii=False)


def parse_tools(text: str, lang: str = "en") -> tuple[list[dict[str, Any]] | None, str | None]:
    """The editor's text -> (tools, None) or (None, message in `lang`; the API's own check in its words). Empty
    text means no tools."""
    if not text.strip():
        return None, None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, say(
            ("Tools are not valid JSON: {where}.", "工具不是有效的 JSON：{where}。"), lang, where=json_error(exc, lang)
        )
    if isinstance(value, dict):
        value = [value]  # one tool typed on its own
    if not isinstance(value, list):
        return None, say(
            ("Tools must be a JSON array of tool objects.", "工具必须是由工具对象组成的 JSON 数组。"), lang
        )
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


def check_arguments(
    tools: list[dict[str, Any]] | None, name: str | None, arguments: str, lang: str = "en"
) -> list[str]:
    """Problems with one call's arguments against its tool's schema (top level: required, types, unknown keys),
    in `lang`."""
    tool = next((t["function"] for t in tools or [] if t["function"]["name"] == name), None)
    if tool is None:
        return [say(("no tool named {name!r} was offered", "没有提供名为 {name!r} 的工具"), lang, name=name)]
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        why = JSON_ERRORS_ZH.get(exc.msg, exc.msg) if lang == "zh" else exc.msg
        return [say(("arguments are not valid JSON ({why})", "参数不是有效的 JSON（{why}）"), lang, why=why)]
    if not isinstance(args, dict):
        return [say(("arguments are not a JSON object", "参数不是 JSON 对象"), lang)]
    schema = tool.get("parameters") or {}
    props: dict[str, Any] = schema.get("properties") or {}
    problems = [
        say(("missing required {key!r}", "缺少必需的参数 {key!r}"), lang, key=key)
        for key in schema.get("required") or []
        if key not in args
    ]
    for key, value in args.items():
        if key not in props:
            if not schema.get("additionalProperties", False):
                problems.append(say(("unexpected argument {key!r}", "多余的参数 {key!r}"), lang, key=key))
            continue
        kind = props[key].get("type")
        expected = _JSON_TYPES.get(kind) if isinstance(kind, str) else None
        if expected is None:
            continue
        if not isinstance(value, expected) or (kind != "boolean" and isinstance(value, bool)):  # true is no integer
            problems.append(
                say(
                    ("{key!r} should be {kind}, got {value}", "{key!r} 应为 {kind}，实际为 {value}"),
                    lang,
                    key=key,
                    kind=kind,
                    value=json.dumps(value),
                )
            )
    return problems
