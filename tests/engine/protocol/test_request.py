"""Unit tests for engine.protocol.request (spec §2.1-§2.4, §6.2; conformance cases of §9.2-9.4, 9.8, 9.12)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from engine.protocol.errors import RequestValidationError
from engine.protocol.request import ChatCompletionRequest, json_depth, parse_chat_request

HI = [{"role": "user", "content": "hi"}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}


def body(**fields: Any) -> dict[str, Any]:
    """A minimal valid /v1 body with `fields` merged in (a value of ... removes the field)."""
    out: dict[str, Any] = {"model": "m", "messages": copy.deepcopy(HI)}
    out.update(copy.deepcopy(fields))
    return {k: v for k, v in out.items() if v is not ...}


def msgs(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return body(messages=list(messages), **fields)


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def part(kind: str, value: Any) -> dict[str, Any]:
    return {"type": kind, kind: value}


def nested_schema(levels: int) -> dict[str, Any]:
    """A `parameters` object whose own JSON nesting depth is `levels` (>= 3): parameters → properties → x → items…"""
    inner: dict[str, Any] = {"type": "string"}
    for _ in range(levels - 3):
        inner = {"type": "array", "items": inner}
    schema = {"type": "object", "properties": {"x": inner}}
    assert json_depth(schema, limit=100) == levels
    return schema


def tool(name: str = "get_weather", **function: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, **function}}


# ---------------------------------------------------------------------------------------------------------------
# Valid bodies: (id, body, route)
VALID = [
    ("minimal", body(), "v1"),
    ("unknown-field-ignored-29", body(foo=1), "v1"),
    ("nulls-are-absent-30", body(max_tokens=None, stop=None, temperature=None, tools=None), "v1"),
    ("text-array-31", msgs(user([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])), "v1"),
    ("pangu-v1-no-model-7", body(model=...), "pangu_v1"),
    ("pangu-v1-model-ignored", body(model=5), "pangu_v1"),
    ("pangu-v1-no-role-22", msgs({"content": "hi"}), "pangu_v1"),
    ("pangu-stream-string-44", body(stream="True"), "pangu_v2"),
    ("pangu-v1-stream-string", body(stream="false", model=...), "pangu_v1"),
    (
        "tool-call-history-24",
        msgs(
            user("hi"),
            {"role": "assistant", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c", "content": ""},
        ),
        "v1",
    ),
    (
        "assistant-null-content-with-calls",
        msgs(user("a"), {"role": "assistant", "content": None, "tool_calls": [CALL]}),
        "v1",
    ),
    (
        "assistant-empty-content-with-calls",
        msgs(user("a"), {"role": "assistant", "content": "", "tool_calls": [CALL]}),
        "v1",
    ),
    ("assistant-text-array", msgs(user("a"), {"role": "assistant", "content": [{"type": "text", "text": "x"}]}), "v1"),
    ("tool-calls-ignored-on-user", msgs({"role": "user", "content": "a", "tool_calls": "junk"}), "v1"),
    ("tool-call-id-ignored-on-user", msgs({"role": "user", "content": "a", "tool_call_id": 5}), "v1"),
    ("extra-message-keys", msgs({"role": "user", "content": "a", "refusal": None, "x": 1}), "v1"),
    ("name-64", msgs({"role": "user", "content": "a", "name": "n" * 64}), "v1"),
    ("image-str", msgs(user([part("image_url", "data:image/png;base64,AAAA")])), "v1"),
    ("image-obj-detail", msgs(user([part("image_url", {"url": "https://x/a.png", "detail": "high"})])), "v1"),
    ("image-url-4096", msgs(user([part("image_url", "x" * 4096)])), "v1"),
    ("video-obj", msgs(user([part("video_url", {"url": "file:///a.mp4"})])), "v1"),
    ("audio-str", msgs(user([part("audio_url", "a.wav")])), "v1"),
    ("input-audio", msgs(user([part("input_audio", {"data": "AAAA", "format": "flac"})])), "v1"),
    ("temperature-int", body(temperature=1), "v1"),
    ("temperature-2.0-33", body(temperature=2.0), "v1"),
    ("temperature-0", body(temperature=0), "v1"),
    ("top-p-1-35", body(top_p=1), "v1"),
    ("top-k-minus-1-36", body(top_k=-1), "v1"),
    ("top-k-0-36", body(top_k=0), "v1"),
    ("repetition-penalty-2-38", body(repetition_penalty=2.0), "v1"),
    ("penalties-edges", body(presence_penalty=-2, frequency_penalty=2.0), "v1"),
    ("seed-max", body(seed=2**64 - 1), "v1"),
    ("max-tokens-max", body(max_tokens=2147483647, max_completion_tokens=1), "v1"),
    ("stop-empty-list-40", body(stop=[]), "v1"),
    ("stop-1024-items", body(stop=["ab"] * 1024), "v1"),
    ("stop-token-ids-out-of-range-41", body(stop_token_ids=[2, 99999999999, -5]), "v1"),
    ("include-stop-str-ignored-43", body(include_stop_str_in_output="yes"), "v1"),
    ("include-stop-str-ignored-empty-stop", body(include_stop_str_in_output=3, stop=[], stop_token_ids=[]), "v1"),
    ("include-stop-str-with-stop", body(include_stop_str_in_output=True, stop="x"), "v1"),
    ("n-2-no-temperature-48", body(n=2), "v1"),
    ("n-2-best-of-3", body(n=2, best_of=3, temperature=0.7), "v1"),
    ("stream-n-best-of-equal-51", body(stream=True, n=2, best_of=2), "v1"),
    ("beam-n-2-temp-0", body(use_beam_search=True, n=2, temperature=0, max_tokens=128), "v1"),
    ("beam-best-of-below-n", body(use_beam_search=True, n=4, best_of=2), "v1"),
    ("beam-stream-best-of-alone", body(use_beam_search=True, stream=True, best_of=2), "v1"),
    ("beam-empty-stop", body(use_beam_search=True, stop=[]), "v1"),
    ("top-logprobs-alone-56", body(top_logprobs=2), "v1"),
    ("logprobs-true", body(logprobs=True, top_logprobs=20), "v1"),
    (
        "stream-options",
        body(stream=True, stream_options={"include_usage": True, "continuous_usage_stats": False}),
        "v1",
    ),
    ("chat-template-inline-85", body(chat_template="{{ messages[0]['content'] }}"), "v1"),
    (
        "chat-template-kwargs",
        body(chat_template_kwargs={"enable_thinking": False, "thinking_budget": 5, "x": [1]}),
        "v1",
    ),
    ("thinking-budget-ignored-without-thinking", body(chat_template_kwargs={"thinking_budget": 5}, n=2), "v1"),
    ("tool-choice-auto-no-tools-121", body(tool_choice="auto"), "v1"),
    ("tool-choice-none-no-tools", body(tool_choice="none"), "v1"),
    ("tools-empty-is-absent", body(tools=[], n=2), "v1"),
    ("tools-basic", body(tools=[TOOL], tool_choice="required"), "v1"),
    (
        "tools-named-choice",
        body(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}}),
        "v1",
    ),
    ("tools-none-allows-n", body(tools=[TOOL], tool_choice="none", n=2, logprobs=True), "v1"),
    ("tools-stop-allowed", body(tools=[TOOL], stop=["x"], include_stop_str_in_output=True), "v1"),
    ("tools-cjk-name", body(tools=[tool("查询天气-v_2")]), "v1"),
    ("tools-64-char-name", body(tools=[tool("f" * 64)]), "v1"),
    ("tools-no-parameters", body(tools=[tool(description="d", strict=True)]), "v1"),
    ("tools-128", body(tools=[tool(f"f{i}") for i in range(128)]), "v1"),
    ("tools-depth-10", body(tools=[tool(parameters=nested_schema(7))]), "v1"),
    (
        "tools-realistic",
        body(
            tools=[
                tool(
                    parameters={
                        "type": "object",
                        "properties": {
                            "city": {"type": "string", "description": "City"},
                            "unit": {"type": "string", "enum": ["c", "f"]},
                            "days": {
                                "type": "array",
                                "items": {"type": "object", "properties": {"d": {"type": "integer"}}},
                            },
                        },
                        "required": ["city"],
                        "additionalProperties": False,
                    }
                )
            ]
        ),
        "v1",
    ),
    ("response-format-text", body(response_format={"type": "text"}), "v1"),
    ("response-format-json-object", body(response_format={"type": "json_object"}), "v1"),
    (
        "response-format-schema",
        body(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": {}}}),
        "v1",
    ),
    (
        "moderation-config-61",
        body(
            moderation_config={
                "black_glossary_names": ["a"],
                "white_glossary_names": [],
                "question_moderation": False,
                "answer_moderation": True,
                "show_result": True,
            }
        ),
        "v1",
    ),
    ("enable-search-62", body(enable_search=True), "v1"),
    ("user-tag", body(user="u1"), "v1"),
    ("skip-special-and-eos", body(skip_special_tokens=False, ignore_eos=True), "v1"),
]


@pytest.mark.parametrize(("case", "obj", "route"), VALID, ids=[c[0] for c in VALID])
def test_valid(case: str, obj: dict[str, Any], route: str) -> None:
    assert isinstance(parse_chat_request(obj, route), ChatCompletionRequest)


# ---------------------------------------------------------------------------------------------------------------
# Invalid bodies: (id, body, route, missing, substrings the message must contain)
INVALID = [
    ("body-array-16", [], "v1", False, ["Request body must be a JSON object"]),
    ("body-string", "not json", "v1", False, ["Request body must be a JSON object"]),
    ("body-number", 5, "pangu_v2", False, ["Request body must be a JSON object"]),
    ("model-missing", body(model=...), "v1", True, ["Field 'model' is required."]),
    ("model-missing-v2-60", body(model=...), "pangu_v2", True, ["'model'"]),
    ("model-null-v2", body(model=None), "pangu_v2", True, ["'model'"]),
    ("model-empty", body(model=""), "v1", False, ["model", "non-empty"]),
    ("model-not-string", body(model=5), "v1", False, ["model", "string"]),
    ("messages-missing-18", body(messages=...), "v1", True, ["Field 'messages' is required."]),
    ("messages-missing-v2-18", body(messages=...), "pangu_v2", True, ["messages"]),
    ("messages-empty-19", body(messages=[]), "v1", False, ["messages", "empty"]),
    ("messages-string-20", body(messages="hi"), "v1", False, ["messages", "array"]),
    ("message-not-object", body(messages=["hi"]), "v1", False, ["messages[0]", "object"]),
    (
        "role-robot-21",
        msgs({"role": "robot", "content": "x"}),
        "v1",
        False,
        ["messages[0].role must be one of system, user, assistant, tool, got 'robot'."],
    ),
    ("role-missing-22", msgs({"content": "x"}), "v1", True, ["messages[0].role"]),
    ("role-missing-v2-22", msgs({"content": "x"}), "pangu_v2", True, ["messages[0].role"]),
    ("role-not-string", msgs({"role": 1, "content": "x"}), "v1", False, ["messages[0].role"]),
    ("user-content-empty-23", msgs(user("")), "v1", False, ["messages[0].content", "empty"]),
    ("user-content-null-23", msgs(user(None)), "v1", True, ["messages[0].content"]),
    ("user-content-missing", msgs({"role": "user"}), "v1", True, ["messages[0].content"]),
    ("user-content-number-23", msgs(user(5)), "v1", False, ["messages[0].content", "string or an array"]),
    ("user-content-empty-array-23", msgs(user([])), "v1", False, ["messages[0].content", "empty"]),
    ("system-content-empty", msgs({"role": "system", "content": ""}, user("a")), "v1", False, ["messages[0].content"]),
    ("second-message-index", msgs(user("a"), user("")), "v1", False, ["messages[1].content"]),
    ("part-not-object", msgs(user(["a"])), "v1", False, ["messages[0].content[0]", "content part"]),
    ("part-type-missing", msgs(user([{"text": "a"}])), "v1", True, ["messages[0].content[0].type"]),
    (
        "part-type-unknown",
        msgs(user([{"type": "file", "file": "x"}])),
        "v1",
        False,
        ["messages[0].content[0].type", "image_url", "'file'"],
    ),
    ("text-missing", msgs(user([{"type": "text"}])), "v1", True, ["messages[0].content[0].text"]),
    ("text-empty", msgs(user([{"type": "text", "text": ""}])), "v1", False, ["messages[0].content[0].text"]),
    ("text-not-string", msgs(user([{"type": "text", "text": 1}])), "v1", False, ["content[0].text", "string"]),
    ("image-missing", msgs(user([{"type": "image_url"}])), "v1", True, ["messages[0].content[0].image_url"]),
    ("image-null", msgs(user([{"type": "image_url", "image_url": None}])), "v1", True, ["content[0].image_url"]),
    ("image-number", msgs(user([part("image_url", 5)])), "v1", False, ["messages[0].content[0].image_url"]),
    ("image-empty-str", msgs(user([part("image_url", "")])), "v1", False, ["content[0].image_url", "non-empty"]),
    ("image-url-empty", msgs(user([part("image_url", {"url": ""})])), "v1", False, ["content[0].image_url.url"]),
    ("image-url-missing", msgs(user([part("image_url", {"detail": "auto"})])), "v1", True, ["image_url.url"]),
    (
        "image-url-4097-84",
        msgs(user([part("image_url", "http://h/" + "x" * 4097)])),
        "v1",
        False,
        ["image_url", "4096"],
    ),
    ("video-url-4097-path", msgs(user([part("video_url", "/m/" + "x" * 4097)])), "v1", False, ["video_url", "4096"]),
    ("video-url-4097", msgs(user([part("video_url", {"url": "x" * 4097})])), "v1", False, ["video_url.url", "4096"]),
    ("audio-url-number", msgs(user([part("audio_url", [1])])), "v1", False, ["content[0].audio_url"]),
    (
        "input-audio-ogg-72",
        msgs(user([part("input_audio", {"data": "AA", "format": "ogg"})])),
        "v1",
        False,
        ["input_audio.format", "mp3, wav, flac", "'ogg'"],
    ),
    ("input-audio-no-data-72", msgs(user([part("input_audio", {"format": "wav"})])), "v1", True, ["input_audio.data"]),
    (
        "input-audio-empty-data",
        msgs(user([part("input_audio", {"data": "", "format": "wav"})])),
        "v1",
        False,
        ["input_audio.data"],
    ),
    ("input-audio-string", msgs(user([part("input_audio", "AAAA")])), "v1", False, ["input_audio", "object"]),
    (
        "image-in-system-74",
        msgs({"role": "system", "content": [part("image_url", "x")]}, user("a")),
        "v1",
        False,
        ["messages[0].content[0]", "user messages"],
    ),
    (
        "image-in-assistant",
        msgs(user("a"), {"role": "assistant", "content": [part("image_url", "x")]}),
        "v1",
        False,
        ["messages[1].content[0]", "user messages"],
    ),
    (
        "audio-in-tool",
        msgs({"role": "tool", "tool_call_id": "c", "content": [part("audio_url", "x")]}),
        "v1",
        False,
        ["messages[0].content[0]"],
    ),
    (
        "assistant-empty-25",
        msgs(user("a"), {"role": "assistant", "content": ""}),
        "v1",
        False,
        ["messages[1].content", "tool_calls"],
    ),
    ("assistant-missing-content", msgs(user("a"), {"role": "assistant"}), "v1", True, ["messages[1].content"]),
    (
        "assistant-empty-calls",
        msgs(user("a"), {"role": "assistant", "tool_calls": []}),
        "v1",
        True,
        ["messages[1].content"],
    ),
    ("tool-no-call-id-26", msgs({"role": "tool", "content": "x"}), "v1", True, ["messages[0].tool_call_id"]),
    (
        "tool-empty-call-id-26",
        msgs({"role": "tool", "content": "x", "tool_call_id": ""}),
        "v1",
        False,
        ["messages[0].tool_call_id", "non-empty"],
    ),
    (
        "tool-call-id-number",
        msgs({"role": "tool", "content": "x", "tool_call_id": 5}),
        "v1",
        False,
        ["messages[0].tool_call_id", "string"],
    ),
    ("tool-no-content", msgs({"role": "tool", "tool_call_id": "c"}), "v1", True, ["messages[0].content"]),
    (
        "tool-array-content",
        msgs({"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "a"}]}),
        "v1",
        False,
        ["messages[0].content", "string"],
    ),
    (
        "call-args-object-27",
        msgs({"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": {}}}]}),
        "v1",
        False,
        ["messages[0].tool_calls[0].function.arguments", "string"],
    ),
    (
        "call-id-missing-27",
        msgs({"role": "assistant", "tool_calls": [{k: v for k, v in CALL.items() if k != "id"}]}),
        "v1",
        True,
        ["messages[0].tool_calls[0].id"],
    ),
    (
        "call-id-empty",
        msgs({"role": "assistant", "tool_calls": [{**CALL, "id": ""}]}),
        "v1",
        False,
        ["tool_calls[0].id"],
    ),
    (
        "call-type-retrieval-27",
        msgs({"role": "assistant", "tool_calls": [{**CALL, "type": "retrieval"}]}),
        "v1",
        False,
        ["messages[0].tool_calls[0].type", "'retrieval'"],
    ),
    (
        "call-type-missing",
        msgs({"role": "assistant", "tool_calls": [{k: v for k, v in CALL.items() if k != "type"}]}),
        "v1",
        True,
        ["tool_calls[0].type"],
    ),
    (
        "call-function-missing",
        msgs({"role": "assistant", "tool_calls": [{"id": "a", "type": "function"}]}),
        "v1",
        True,
        ["tool_calls[0].function"],
    ),
    (
        "call-bad-name",
        msgs({"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "a b", "arguments": ""}}]}),
        "v1",
        False,
        ["tool_calls[0].function.name", "'a b'"],
    ),
    (
        "call-args-missing",
        msgs({"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f"}}]}),
        "v1",
        True,
        ["tool_calls[0].function.arguments"],
    ),
    (
        "tool-calls-not-array",
        msgs({"role": "assistant", "content": "x", "tool_calls": "x"}),
        "v1",
        False,
        ["messages[0].tool_calls", "array"],
    ),
    ("name-65", msgs({"role": "user", "content": "a", "name": "n" * 65}), "v1", False, ["messages[0].name", "64"]),
    (
        "reasoning-not-string",
        msgs(user("a"), {"role": "assistant", "content": "b", "reasoning_content": 1}),
        "v1",
        False,
        ["messages[1].reasoning_content"],
    ),
    # §9.3 sampling
    ("temperature-string-32", body(temperature="0.5"), "v1", False, ["Parameter temperature must be a number"]),
    ("temperature-bool", body(temperature=True), "v1", False, ["temperature", "number"]),
    (
        "temperature-2.5-33",
        body(temperature=2.5),
        "v1",
        False,
        ["Parameter temperature must be in [0.0, 2.0], got 2.5."],
    ),
    ("temperature-negative-33", body(temperature=-0.1), "v1", False, ["temperature", "[0.0, 2.0]", "-0.1"]),
    ("temperature-nan", body(temperature=float("nan")), "v1", False, ["temperature", "[0.0, 2.0]"]),
    ("top-p-0-35", body(top_p=0), "v1", False, ["Parameter top_p must be in (1e-6, 1.0]"]),
    ("top-p-1e-6", body(top_p=1e-6), "v1", False, ["top_p", "(1e-6, 1.0]"]),
    ("top-p-1.01-35", body(top_p=1.01), "v1", False, ["top_p", "1.01"]),
    ("top-k-minus-2-36", body(top_k=-2), "v1", False, ["Parameter top_k", "-2"]),
    ("top-k-float-36", body(top_k=1.5), "v1", False, ["Parameter top_k must be an integer"]),
    ("top-k-too-big", body(top_k=2147483648), "v1", False, ["top_k", "2147483647"]),
    ("max-tokens-0-37", body(max_tokens=0), "v1", False, ["Parameter max_tokens must be in [1, 2147483647], got 0."]),
    ("max-tokens-string-37", body(max_tokens="10"), "v1", False, ["max_tokens", "integer", "'10'"]),
    ("max-tokens-float", body(max_tokens=1.0), "v1", False, ["max_tokens", "integer"]),
    ("max-tokens-bool", body(max_tokens=True), "v1", False, ["max_tokens", "integer"]),
    ("max-tokens-2^31-37", body(max_tokens=2147483648), "v1", False, ["max_tokens", "2147483648"]),
    (
        "max-completion-tokens-0",
        body(max_completion_tokens=0),
        "v1",
        False,
        ["max_completion_tokens", "[1, 2147483647]"],
    ),
    ("presence-2.01-38", body(presence_penalty=2.01), "v1", False, ["presence_penalty", "[-2.0, 2.0]", "2.01"]),
    ("frequency-minus-3-38", body(frequency_penalty=-3), "v1", False, ["frequency_penalty", "[-2.0, 2.0]", "-3"]),
    ("repetition-0-38", body(repetition_penalty=0), "v1", False, ["repetition_penalty", "(0.0, 2.0]"]),
    ("repetition-2.1", body(repetition_penalty=2.1), "v1", False, ["repetition_penalty"]),
    ("seed-negative-39", body(seed=-1), "v1", False, ["Parameter seed must be in [0, 18446744073709551615], got -1."]),
    ("seed-float-39", body(seed=1.5), "v1", False, ["seed", "integer"]),
    ("seed-2^64", body(seed=2**64), "v1", False, ["seed"]),
    ("seed-huge", body(seed=10**5000), "v1", False, ["seed", "a very large integer"]),
    ("stop-empty-string-40", body(stop=""), "v1", False, ["Parameter stop", "1 to 1024"]),
    ("stop-1025-items-40", body(stop=["a"] * 1025), "v1", False, ["stop", "1024 items"]),
    ("stop-item-1025-chars-40", body(stop=["x" * 1025]), "v1", False, ["stop[0]", "1 to 1024"]),
    ("stop-string-1025-chars", body(stop="x" * 1025), "v1", False, ["stop", "1 to 1024"]),
    ("stop-item-empty", body(stop=["a", ""]), "v1", False, ["stop[1]"]),
    ("stop-item-number", body(stop=["a", 1]), "v1", False, ["stop[1]", "string"]),
    ("stop-number", body(stop=5), "v1", False, ["Parameter stop", "string or an array"]),
    ("stop-total-32769", body(stop=["x" * 1024] * 32 + ["y"]), "v1", False, ["stop", "32768"]),
    ("stop-token-ids-string-41", body(stop_token_ids=["2"]), "v1", False, ["stop_token_ids[0]", "integer"]),
    ("stop-token-ids-float", body(stop_token_ids=[1, 2.0]), "v1", False, ["stop_token_ids[1]", "integer"]),
    ("stop-token-ids-not-array", body(stop_token_ids=2), "v1", False, ["stop_token_ids", "array"]),
    (
        "include-stop-str-yes-43",
        body(include_stop_str_in_output="yes", stop=["x"]),
        "v1",
        False,
        ["include_stop_str_in_output", "boolean"],
    ),
    (
        "include-stop-str-with-token-ids",
        body(include_stop_str_in_output=1, stop_token_ids=[2]),
        "v1",
        False,
        ["include_stop_str_in_output"],
    ),
    ("stream-string-v1-44", body(stream="true"), "v1", False, ["Parameter stream must be a boolean"]),
    ("stream-yes-v2", body(stream="yes"), "pangu_v2", False, ["stream", "boolean"]),
    ("stream-int", body(stream=1), "v1", False, ["stream", "boolean"]),
    ("ignore-eos-string", body(ignore_eos="true"), "v1", False, ["ignore_eos", "boolean"]),
    ("skip-special-int", body(skip_special_tokens=0), "v1", False, ["skip_special_tokens", "boolean"]),
    # §9.4 n / best_of / beam / logprobs
    ("n-2-temperature-0-46", body(n=2, temperature=0), "v1", False, ["temperature", "n or best_of"]),
    ("best-of-2-temperature-0", body(best_of=2, temperature=0.0), "v1", False, ["temperature"]),
    ("n-0-49", body(n=0), "v1", False, ["Parameter n must be in [1, 8192], got 0."]),
    ("n-8193-49", body(n=8193), "v1", False, ["n", "8193"]),
    ("n-float", body(n=2.0), "v1", False, ["Parameter n must be an integer"]),
    ("best-of-129", body(best_of=129), "v1", False, ["best_of", "[1, 128]"]),
    ("best-of-1-n-2-50", body(best_of=1, n=2), "v1", False, ["best_of", "n"]),
    ("stream-best-of-3-n-2-51", body(stream=True, best_of=3, n=2), "v1", False, ["best_of", "stream"]),
    ("stream-best-of-alone-51", body(stream=True, best_of=2), "v1", False, ["best_of", "without n"]),
    ("beam-stop-52", body(use_beam_search=True, stop=["x"]), "v1", False, ["stop", "use_beam_search"]),
    ("beam-stop-string", body(use_beam_search=True, stop="x"), "v1", False, ["stop", "use_beam_search"]),
    ("beam-max-tokens-129-53", body(use_beam_search=True, max_tokens=129), "v1", False, ["max_tokens", "128", "129"]),
    (
        "beam-max-completion-129",
        body(use_beam_search=True, max_tokens=5, max_completion_tokens=129),
        "v1",
        False,
        ["128"],
    ),
    ("beam-string", body(use_beam_search="true"), "v1", False, ["use_beam_search", "boolean"]),
    ("top-logprobs-21-56", body(top_logprobs=21), "v1", False, ["top_logprobs", "[0, 20]", "21"]),
    ("top-logprobs-negative", body(top_logprobs=-1), "v1", False, ["top_logprobs"]),
    ("logprobs-false-top-2-56", body(logprobs=False, top_logprobs=2), "v1", False, ["top_logprobs", "logprobs"]),
    ("logprobs-int", body(logprobs=1), "v1", False, ["logprobs", "boolean"]),
    (
        "stream-options-no-stream-100",
        body(stream_options={"include_usage": True}),
        "v1",
        False,
        ["stream_options", "stream"],
    ),
    (
        "stream-options-bad-type",
        body(stream=True, stream_options={"include_usage": "yes"}),
        "v1",
        False,
        ["stream_options.include_usage", "boolean"],
    ),
    ("stream-options-not-object", body(stream=True, stream_options=[]), "v1", False, ["stream_options", "object"]),
    # §9.8 chat_template / kwargs
    ("chat-template-empty-86", body(chat_template=""), "v1", False, ["chat_template", "non-empty"]),
    ("chat-template-number-86", body(chat_template=5), "v1", False, ["chat_template", "string"]),
    ("chat-template-too-big", body(chat_template="é" * (1 << 19) + "x"), "v1", False, ["chat_template", "1 MiB"]),
    ("kwargs-string-92", body(chat_template_kwargs="x"), "v1", False, ["chat_template_kwargs", "object"]),
    (
        "kwargs-thinking-no-92",
        body(chat_template_kwargs={"enable_thinking": "no"}),
        "v1",
        False,
        ["chat_template_kwargs.enable_thinking", "boolean"],
    ),
    (
        "kwargs-budget-0-92",
        body(chat_template_kwargs={"thinking_budget": 0}),
        "v1",
        False,
        ["chat_template_kwargs.thinking_budget", "[1, 2147483647]"],
    ),
    ("kwargs-budget-float", body(chat_template_kwargs={"thinking_budget": 5.0}), "v1", False, ["thinking_budget"]),
    ("kwargs-budget-bool", body(chat_template_kwargs={"thinking_budget": True}), "v1", False, ["thinking_budget"]),
    (
        "kwargs-messages-92",
        body(chat_template_kwargs={"messages": []}),
        "v1",
        False,
        ["chat_template_kwargs.messages", "reserved"],
    ),
    *[
        (f"kwargs-reserved-{k}", body(chat_template_kwargs={k: 1}), "v1", False, [f"chat_template_kwargs.{k}"])
        for k in ("tools", "documents", "add_generation_prompt", "bos_token", "eos_token", "chat_template")
    ],
    (
        "budget-with-n",
        body(chat_template_kwargs={"enable_thinking": True, "thinking_budget": 4}, n=2),
        "v1",
        False,
        ["thinking_budget", "n"],
    ),
    (
        "budget-with-beam",
        body(chat_template_kwargs={"enable_thinking": True, "thinking_budget": 4}, use_beam_search=True),
        "v1",
        False,
        ["thinking_budget"],
    ),
    # §9.12 tools
    (
        "tool-choice-missing-name-121",
        body(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "missing"}}),
        "v1",
        False,
        ["tool_choice", "'missing'"],
    ),
    ("tool-choice-any-121", body(tools=[TOOL], tool_choice="any"), "v1", False, ["tool_choice", "'any'"]),
    ("tool-choice-any-no-tools", body(tool_choice="any"), "v1", False, ["tool_choice"]),
    ("tool-choice-required-no-tools-121", body(tool_choice="required"), "v1", False, ["tool_choice", "tools"]),
    ("tool-choice-required-empty-tools", body(tools=[], tool_choice="required"), "v1", False, ["tool_choice"]),
    (
        "tool-choice-named-no-tools",
        body(tool_choice={"type": "function", "function": {"name": "f"}}),
        "v1",
        False,
        ["tool_choice", "tools"],
    ),
    ("tool-choice-number", body(tool_choice=1), "v1", False, ["tool_choice"]),
    (
        "tool-choice-bad-type",
        body(tools=[TOOL], tool_choice={"type": "x", "function": {"name": "get_weather"}}),
        "v1",
        False,
        ["tool_choice.type"],
    ),
    (
        "tool-type-retrieval-122",
        body(tools=[{"type": "retrieval", "function": {"name": "f"}}]),
        "v1",
        False,
        ["tools[0].type", "'retrieval'"],
    ),
    (
        "tool-name-space-122",
        body(tools=[tool("get weather!")]),
        "v1",
        False,
        ["tools[0].function.name", "get weather!"],
    ),
    ("tool-name-65-122", body(tools=[tool("f" * 65)]), "v1", False, ["tools[0].function.name"]),
    ("tool-name-empty", body(tools=[tool("")]), "v1", False, ["tools[0].function.name"]),
    ("tool-name-trailing-newline", body(tools=[tool("f\n")]), "v1", False, ["tools[0].function.name"]),
    ("tool-name-accented", body(tools=[tool("café")]), "v1", False, ["tools[0].function.name"]),
    ("tool-name-missing", body(tools=[{"type": "function", "function": {}}]), "v1", True, ["tools[0].function.name"]),
    ("tool-function-missing", body(tools=[{"type": "function"}]), "v1", True, ["tools[0].function"]),
    ("tool-duplicate-names-122", body(tools=[TOOL, tool()]), "v1", False, ["tools[1].function.name", "duplicate"]),
    (
        "tool-parameters-array",
        body(tools=[tool(parameters={"type": "array"})]),
        "v1",
        False,
        ["tools[0].function.parameters.type", "'object'"],
    ),
    ("tool-parameters-no-type", body(tools=[tool(parameters={})]), "v1", False, ["tools[0].function.parameters.type"]),
    ("tool-parameters-string", body(tools=[tool(parameters="{}")]), "v1", False, ["tools[0].function.parameters"]),
    ("tool-strict-string", body(tools=[tool(strict="true")]), "v1", False, ["tools[0].function.strict", "boolean"]),
    ("tools-129", body(tools=[tool(f"f{i}") for i in range(129)]), "v1", False, ["tools", "128"]),
    ("tools-depth-11-123", body(tools=[tool(parameters=nested_schema(11))]), "v1", False, ["tools", "10 levels"]),
    ("tools-depth-11-just-over", body(tools=[tool(parameters=nested_schema(8))]), "v1", False, ["tools", "nested"]),
    ("tools-not-array", body(tools={"type": "function"}), "v1", False, ["tools", "array"]),
    ("tools-n-2-124", body(tools=[TOOL], n=2), "v1", False, ["Parameter n", "tools"]),
    ("tools-best-of-2", body(tools=[TOOL], best_of=2), "v1", False, ["best_of", "tools"]),
    ("tools-beam-124", body(tools=[TOOL], use_beam_search=True), "v1", False, ["use_beam_search", "tools"]),
    ("tools-logprobs-124", body(tools=[TOOL], logprobs=True), "v1", False, ["logprobs", "tools"]),
    ("tools-top-logprobs", body(tools=[TOOL], tool_choice="auto", top_logprobs=0), "v1", False, ["logprobs", "tools"]),
    # response_format, Pangu-origin fields, misc
    ("response-format-xml", body(response_format={"type": "xml"}), "v1", False, ["response_format.type", "'xml'"]),
    ("response-format-missing-type", body(response_format={}), "v1", True, ["response_format.type"]),
    (
        "response-format-schema-missing",
        body(response_format={"type": "json_schema"}),
        "v1",
        True,
        ["response_format.json_schema"],
    ),
    (
        "response-format-name-empty",
        body(response_format={"type": "json_schema", "json_schema": {"name": "", "schema": {}}}),
        "v1",
        False,
        ["response_format.json_schema.name"],
    ),
    (
        "response-format-name-65",
        body(response_format={"type": "json_schema", "json_schema": {"name": "n" * 65, "schema": {}}}),
        "v1",
        False,
        ["response_format.json_schema.name", "64"],
    ),
    (
        "response-format-schema-not-object",
        body(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": "x"}}),
        "v1",
        False,
        ["response_format.json_schema.schema", "object"],
    ),
    (
        "response-format-no-schema",
        body(response_format={"type": "json_schema", "json_schema": {"name": "s"}}),
        "v1",
        True,
        ["response_format.json_schema.schema"],
    ),
    (
        "moderation-yes-61",
        body(moderation_config={"question_moderation": "yes"}),
        "pangu_v2",
        False,
        ["moderation_config.question_moderation", "boolean"],
    ),
    (
        "moderation-glossary-string",
        body(moderation_config={"black_glossary_names": "a"}),
        "v1",
        False,
        ["moderation_config.black_glossary_names", "array"],
    ),
    (
        "moderation-glossary-item",
        body(moderation_config={"white_glossary_names": [1]}),
        "v1",
        False,
        ["moderation_config.white_glossary_names[0]", "string"],
    ),
    ("moderation-not-object", body(moderation_config=True), "v1", False, ["moderation_config", "object"]),
    ("enable-search-string", body(enable_search="true"), "v1", False, ["enable_search", "boolean"]),
    ("user-number", body(user=5), "v1", False, ["Parameter user must be a string"]),
]


@pytest.mark.parametrize(("case", "obj", "route", "missing", "fragments"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid(case: str, obj: Any, route: str, missing: bool, fragments: list[str]) -> None:
    with pytest.raises(RequestValidationError) as info:
        parse_chat_request(obj, route)
    err = info.value
    assert err.missing is missing, err.message
    for fragment in fragments:
        assert fragment in err.message, err.message
    assert "pydantic" not in err.message and "http" not in err.message and "\n" not in err.message
    assert len(err.message) < 400, err.message


# ---------------------------------------------------------------------------------------------------------------
# Error hygiene: long inputs are truncated when echoed (§6.5)
@pytest.mark.parametrize(
    "obj",
    [
        msgs({"role": "x" * 5000, "content": "a"}),
        body(temperature="9" * 5000),
        body(tools=[tool("y" * 5000)]),
        body(tool_choice="z" * 5000),
    ],
    ids=["role", "temperature", "tool-name", "tool-choice"],
)
def test_echoed_values_truncated(obj: dict[str, Any]) -> None:
    with pytest.raises(RequestValidationError) as info:
        parse_chat_request(obj)
    assert len(info.value.message) < 300 and "..." in info.value.message


# ---------------------------------------------------------------------------------------------------------------
# Derived values: (id, body, route, attribute, expected)
DERIVED = [
    ("temperature-default", body(), "v1", "effective_temperature", 1.0),
    ("temperature-given", body(temperature=0), "v1", "effective_temperature", 0.0),
    ("max-tokens-absent", body(), "v1", "effective_max_tokens", None),
    ("max-tokens", body(max_tokens=7), "v1", "effective_max_tokens", 7),
    ("max-completion-wins", body(max_tokens=7, max_completion_tokens=3), "v1", "effective_max_tokens", 3),
    ("n-default", body(), "v1", "effective_n", 1),
    ("best-of-default", body(n=3), "v1", "effective_best_of", 3),
    ("best-of-given", body(n=2, best_of=4), "v1", "effective_best_of", 4),
    ("beam-width", body(use_beam_search=True, n=4, best_of=2), "v1", "effective_best_of", 4),
    ("stop-absent", body(), "v1", "stop_list", []),
    ("stop-string", body(stop="x"), "v1", "stop_list", ["x"]),
    ("stop-list", body(stop=["a", "b"]), "v1", "stop_list", ["a", "b"]),
    ("stop-empty-list", body(stop=[]), "v1", "stop", None),
    (
        "stop-ids",
        body(stop_token_ids=[5, 2147483648, 3, 5, -1, 0, 2147483647]),
        "v1",
        "stop_token_id_list",
        [5, 3, 0, 2147483647],
    ),
    ("stop-ids-absent", body(), "v1", "stop_token_id_list", []),
    ("logprobs-absent", body(), "v1", "wants_logprobs", False),
    ("logprobs-true", body(logprobs=True), "v1", "wants_logprobs", True),
    ("logprobs-true-count", body(logprobs=True), "v1", "top_logprobs_count", 0),
    ("top-logprobs-implies", body(top_logprobs=3), "v1", "wants_logprobs", True),
    ("top-logprobs-count", body(top_logprobs=3), "v1", "top_logprobs_count", 3),
    ("logprobs-false", body(logprobs=False), "v1", "wants_logprobs", False),
    ("tools-absent", body(), "v1", "tools_active", False),
    ("tools-empty", body(tools=[]), "v1", "tools", None),
    ("tools-auto", body(tools=[TOOL]), "v1", "tools_active", True),
    ("tools-none", body(tools=[TOOL], tool_choice="none"), "v1", "tools_active", False),
    (
        "tools-named",
        body(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}}),
        "v1",
        "tools_active",
        True,
    ),
    ("stream-default", body(), "v1", "stream", False),
    ("stream-pangu-true", body(stream="TRUE"), "pangu_v2", "stream", True),
    ("stream-pangu-false", body(stream="False"), "pangu_v1", "stream", False),
    ("skip-special-default", body(), "v1", "skip_special_tokens", True),
    ("include-stop-default", body(), "v1", "include_stop_str_in_output", False),
    ("include-stop-ignored", body(include_stop_str_in_output="yes"), "v1", "include_stop_str_in_output", False),
    ("kwargs-default", body(), "v1", "chat_template_kwargs", {}),
    ("enable-thinking-absent", body(), "v1", "enable_thinking", None),
    ("enable-thinking", body(chat_template_kwargs={"enable_thinking": False}), "v1", "enable_thinking", False),
    ("thinking-budget", body(chat_template_kwargs={"thinking_budget": 9}), "v1", "thinking_budget", 9),
    ("model-v1", body(), "v1", "model", "m"),
    ("model-pangu-v1-ignored", body(model="other"), "pangu_v1", "model", None),
    ("role-default-pangu-v1", msgs({"content": "hi"}), "pangu_v1", "messages.0.role", "user"),
    ("moderation-defaults", body(moderation_config={}), "v1", "moderation_config.question_moderation", True),
    (
        "schema-alias",
        body(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": {"a": 1}}}),
        "v1",
        "response_format.json_schema.schema_",
        {"a": 1},
    ),
    ("has-media-false", body(), "v1", "has_media", False),
    ("has-media-true", msgs(user([part("image_url", "x")])), "v1", "has_media", True),
    ("image-str-kept", msgs(user([part("image_url", "u")])), "v1", "messages.0.content.0.image_url", "u"),
    ("image-obj-url", msgs(user([part("image_url", {"url": "u"})])), "v1", "messages.0.content.0.image_url.url", "u"),
]


def _attr(obj: Any, dotted: str) -> Any:
    for name in dotted.split("."):
        obj = obj[int(name)] if name.isdigit() else getattr(obj, name)
    return obj


@pytest.mark.parametrize(("case", "obj", "route", "attr", "expected"), DERIVED, ids=[c[0] for c in DERIVED])
def test_derived(case: str, obj: dict[str, Any], route: str, attr: str, expected: Any) -> None:
    assert _attr(parse_chat_request(obj, route), attr) == expected


# ---------------------------------------------------------------------------------------------------------------
# text_only_messages()
def test_text_only_messages_flattens_and_forwards() -> None:
    req = parse_chat_request(
        msgs(
            {"role": "system", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
            {"role": "user", "content": "hi", "name": "bob"},
            {"role": "assistant", "tool_calls": [CALL], "reasoning_content": "think"},
            {"role": "assistant", "content": "", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "x"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": ""},
        )
    )
    assert req.text_only_messages() == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi", "name": "bob"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "think",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ],
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "x"}}],
        },
        {"role": "tool", "content": "", "tool_call_id": "call_1"},
    ]


@pytest.mark.parametrize(
    ("content", "modality"),
    [
        ([{"type": "text", "text": "a"}, part("image_url", "x")], "image"),
        ([part("video_url", {"url": "v"})], "video"),
        ([part("audio_url", "a")], "audio"),
        ([part("input_audio", {"data": "AA", "format": "wav"})], "audio"),
    ],
    ids=["image", "video", "audio-url", "input-audio"],
)
def test_text_only_messages_rejects_media(content: list[Any], modality: str) -> None:
    req = parse_chat_request(msgs(user("a"), user(content)))
    with pytest.raises(RequestValidationError) as info:
        req.text_only_messages()
    assert f"model does not accept {modality} input" in info.value.message
    assert "messages[1].content" in info.value.message


# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "depth"),
    [(1, 0), ("s", 0), ([], 1), ({}, 1), ([{"a": [1]}], 3), ({"a": {"b": {"c": {}}}, "d": 1}, 4), ([[[[[[]]]]]], 6)],
)
def test_json_depth(value: Any, depth: int) -> None:
    assert json_depth(value, limit=100) == depth


def test_json_depth_stops_early_on_deep_input() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    assert json_depth(deep) == 11


def test_input_is_not_mutated() -> None:
    obj = body(stream="true", include_stop_str_in_output="x", max_tokens=None)
    before = copy.deepcopy(obj)
    parse_chat_request(obj, "pangu_v2")
    assert obj == before
