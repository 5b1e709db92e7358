"""Every text-relevant validation rule of spec §2 through HTTP: 422 + the §6.2 body on /v1 with a message that
names the field, or 200 where the rule says a value is accepted. Conformance cases 18-56 (text parts), 73, 86, 92.

Body parsing, size limits and chat-template rendering are in test_api_body.py.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api_helpers import DROP, assert_422, send, user

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}
PNG = "data:image/png;base64,iVBORw0KGgo="


def history(*messages: dict[str, Any]) -> dict[str, Any]:
    """`messages` = a user turn followed by `messages`."""
    return {"messages": [user("hi"), *messages]}


def with_call(**changes: Any) -> dict[str, Any]:
    """A history whose assistant turn carries one tool call, changed by `changes` (DROP removes a key)."""
    call = {k: v for k, v in {**CALL, **changes}.items() if v is not DROP}
    return history({"role": "assistant", "tool_calls": [call]})


# (case id, fields merged into a minimal valid body, fragments the error message must contain)
INVALID: list[tuple[str, dict[str, Any], list[str]]] = [
    # model and messages (cases 18-28)
    ("model-missing", {"model": DROP}, ["model"]),
    ("model-empty", {"model": ""}, ["model"]),
    ("model-number", {"model": 5}, ["model"]),
    ("model-unknown", {"model": "nope"}, ["Model not found"]),  # case 28
    ("messages-missing", {"messages": DROP}, ["messages"]),  # case 18
    ("messages-empty", {"messages": []}, ["messages"]),  # case 19
    ("messages-string", {"messages": "hi"}, ["messages"]),  # case 20
    ("message-not-object", {"messages": ["hi"]}, ["messages[0]"]),
    ("role-robot", {"messages": [{"role": "robot", "content": "hi"}]}, ["role"]),  # case 21
    ("role-missing", {"messages": [{"content": "hi"}]}, ["role"]),  # case 22
    ("content-empty", {"messages": [user("")]}, ["content"]),  # case 23
    ("content-null", {"messages": [user(None)]}, ["content"]),
    ("content-number", {"messages": [user(5)]}, ["content"]),
    ("content-empty-array", {"messages": [user([])]}, ["content"]),
    ("system-content-empty", {"messages": [{"role": "system", "content": ""}, user("hi")]}, ["messages[0].content"]),
    ("part-type-missing", {"messages": [user([{"text": "a"}])]}, ["messages[0].content[0]"]),
    ("part-type-unknown", {"messages": [user([{"type": "foo", "text": "a"}])]}, ["messages[0].content[0]"]),
    ("part-text-empty", {"messages": [user([{"type": "text", "text": ""}])]}, ["text"]),
    ("part-text-missing", {"messages": [user([{"type": "text"}])]}, ["text"]),
    ("image-on-text-model", {"messages": [user([{"type": "image_url", "image_url": PNG}])]}, ["image"]),  # case 73
    (
        "image-in-system",
        {"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": PNG}]}]},
        ["messages[0]"],
    ),
    ("assistant-content-empty", history({"role": "assistant", "content": ""}), ["messages[1].content"]),  # case 25
    ("assistant-content-missing", history({"role": "assistant"}), ["messages[1].content"]),
    ("tool-call-id-missing", history({"role": "tool", "content": "x"}), ["tool_call_id"]),  # case 26
    ("tool-call-id-empty", history({"role": "tool", "content": "x", "tool_call_id": ""}), ["tool_call_id"]),
    ("tool-content-missing", history({"role": "tool", "tool_call_id": "c"}), ["content"]),
    ("tool-call-arguments-object", with_call(function={"name": "f", "arguments": {"a": 1}}), ["arguments"]),  # 27
    ("tool-call-id-absent", with_call(id=DROP), ["id"]),
    ("tool-call-type-retrieval", with_call(type="retrieval"), ["type"]),
    ("tool-call-bad-name", with_call(function={"name": "bad name!", "arguments": "{}"}), ["name"]),
    ("message-name-too-long", {"messages": [{"role": "user", "content": "hi", "name": "n" * 65}]}, ["name"]),
    # stream and stream_options (cases 44, 100)
    ("stream-string", {"stream": "true"}, ["stream"]),
    ("stream-number", {"stream": 1}, ["stream"]),
    ("stream-options-without-stream", {"stream_options": {"include_usage": True}}, ["stream_options"]),
    ("stream-options-bad-type", {"stream": True, "stream_options": {"include_usage": "yes"}}, ["include_usage"]),
    ("stream-options-not-object", {"stream": True, "stream_options": "x"}, ["stream_options"]),
    # sampling ranges and types (cases 32-41)
    ("temperature-string", {"temperature": "0.5"}, ["temperature"]),
    ("temperature-high", {"temperature": 2.5}, ["temperature", "[0.0, 2.0]", "2.5"]),
    ("temperature-negative", {"temperature": -0.1}, ["temperature"]),
    ("top_p-zero", {"top_p": 0}, ["top_p"]),
    ("top_p-high", {"top_p": 1.01}, ["top_p"]),
    ("top_p-string", {"top_p": "1"}, ["top_p"]),
    ("top_k-minus-two", {"top_k": -2}, ["top_k"]),
    ("top_k-float", {"top_k": 1.5}, ["top_k"]),
    ("top_k-too-large", {"top_k": 2147483648}, ["top_k"]),
    ("min_p-negative", {"min_p": -0.01}, ["min_p", "[0.0, 1.0]"]),
    ("min_p-high", {"min_p": 1.01}, ["min_p", "[0.0, 1.0]", "1.01"]),
    ("min_p-string", {"min_p": "0.1"}, ["min_p"]),
    ("max_tokens-zero", {"max_tokens": 0}, ["max_tokens"]),
    ("max_tokens-string", {"max_tokens": "10"}, ["max_tokens"]),
    ("max_tokens-float", {"max_tokens": 1.0}, ["max_tokens"]),
    ("max_tokens-too-large", {"max_tokens": 2147483648}, ["max_tokens"]),
    ("max_completion_tokens-zero", {"max_completion_tokens": 0}, ["max_completion_tokens"]),
    ("presence_penalty-high", {"presence_penalty": 2.01}, ["presence_penalty"]),
    ("presence_penalty-low", {"presence_penalty": -2.01}, ["presence_penalty"]),
    ("frequency_penalty-low", {"frequency_penalty": -3}, ["frequency_penalty"]),
    ("repetition_penalty-zero", {"repetition_penalty": 0}, ["repetition_penalty"]),
    ("repetition_penalty-high", {"repetition_penalty": 2.01}, ["repetition_penalty"]),
    ("seed-negative", {"seed": -1}, ["seed"]),
    ("seed-float", {"seed": 1.5}, ["seed"]),
    ("seed-too-large", {"seed": 18446744073709551616}, ["seed"]),
    ("skip_special_tokens-string", {"skip_special_tokens": "no"}, ["skip_special_tokens"]),
    ("ignore_eos-number", {"ignore_eos": 1}, ["ignore_eos"]),
    # stop, stop_token_ids, include_stop_str_in_output (cases 40, 41, 43)
    ("stop-empty-string", {"stop": ""}, ["stop"]),
    ("stop-too-many", {"stop": ["x"] * 1025}, ["stop", "1024"]),
    ("stop-item-too-long", {"stop": ["x" * 1025]}, ["stop"]),
    ("stop-string-too-long", {"stop": "x" * 1025}, ["stop"]),
    ("stop-total-too-long", {"stop": ["x" * 1000] * 33}, ["stop", "32768"]),
    ("stop-item-empty", {"stop": ["a", ""]}, ["stop[1]"]),
    ("stop-item-number", {"stop": [1]}, ["stop[0]"]),
    ("stop-number", {"stop": 5}, ["stop"]),
    ("stop_token_ids-string-item", {"stop_token_ids": ["2"]}, ["stop_token_ids"]),
    ("stop_token_ids-float-item", {"stop_token_ids": [1.5]}, ["stop_token_ids"]),
    ("stop_token_ids-not-array", {"stop_token_ids": 2}, ["stop_token_ids"]),
    (
        "include-stop-string-with-stop",
        {"stop": "x", "include_stop_str_in_output": "yes"},
        ["include_stop_str_in_output"],
    ),
    (
        "include-stop-string-with-stop-ids",
        {"stop_token_ids": [2], "include_stop_str_in_output": 1},
        ["include_stop_str_in_output"],
    ),
    # n, best_of, beam search (§2.4.2, cases 46-53)
    ("n-zero", {"n": 0}, ["n"]),
    ("n-too-large", {"n": 8193}, ["n"]),
    ("n-above-max_n", {"n": 9}, ["max_n", "8"]),
    ("n-string", {"n": "2"}, ["n"]),
    ("n2-greedy", {"n": 2, "temperature": 0}, ["temperature"]),
    ("best_of2-greedy", {"best_of": 2, "temperature": 0}, ["temperature"]),
    ("best_of-below-n", {"n": 2, "best_of": 1}, ["best_of"]),
    ("best_of-too-large", {"best_of": 129}, ["best_of"]),
    ("best_of-above-max_n", {"best_of": 9}, ["max_n"]),
    ("stream-best_of-not-n", {"stream": True, "n": 2, "best_of": 3}, ["best_of"]),
    ("stream-best_of-alone", {"stream": True, "best_of": 2}, ["best_of"]),
    ("beam-with-stop", {"use_beam_search": True, "stop": ["x"]}, ["stop"]),
    ("beam-max_tokens-129", {"use_beam_search": True, "max_tokens": 129}, ["max_tokens", "128"]),
    ("beam-max_completion_tokens-129", {"use_beam_search": True, "max_completion_tokens": 129}, ["128"]),
    ("beam-default-max_tokens", {"use_beam_search": True}, ["max_tokens", "128"]),  # default 512 > 128
    ("beam-width-above-max_n", {"use_beam_search": True, "n": 9, "max_tokens": 4}, ["max_n"]),
    ("beam-string", {"use_beam_search": "true"}, ["use_beam_search"]),
    # logprobs (§2.4.3, case 56)
    ("top_logprobs-21", {"top_logprobs": 21}, ["top_logprobs"]),
    ("top_logprobs-negative", {"top_logprobs": -1}, ["top_logprobs"]),
    ("logprobs-false-with-top", {"logprobs": False, "top_logprobs": 2}, ["top_logprobs"]),
    ("logprobs-string", {"logprobs": "yes"}, ["logprobs"]),
    # chat_template and its kwargs (cases 86, 87, 92)
    ("template-empty", {"chat_template": ""}, ["chat_template"]),
    ("template-number", {"chat_template": 5}, ["chat_template"]),
    ("template-abs-path", {"chat_template": "/etc/passwd"}, ["chat_template paths are not allowed"]),
    ("template-relative-path", {"chat_template": "./t.jinja"}, ["chat_template paths are not allowed"]),
    ("template-parent-path", {"chat_template": "../t.jinja"}, ["chat_template paths are not allowed"]),
    ("template-home-path", {"chat_template": "~/t.jinja"}, ["chat_template paths are not allowed"]),
    ("template-file-url", {"chat_template": "file:///etc/passwd"}, ["chat_template paths are not allowed"]),
    ("template-bare-name", {"chat_template": "t.jinja"}, ["chat_template paths are not allowed"]),  # path mode off
    ("template-too-large", {"chat_template": "{# " + "x" * (1 << 20) + " #}"}, ["chat_template", "1 MiB"]),
    ("template-syntax-error", {"chat_template": "{% for %}"}, ["chat_template"]),
    ("template-raise", {"chat_template": "{{ raise_exception('roles must alternate') }}"}, ["roles must alternate"]),
    ("template-renders-empty", {"chat_template": "{% if false %}x{% endif %}"}, ["Messages token length"]),
    ("kwargs-string", {"chat_template_kwargs": "x"}, ["chat_template_kwargs"]),
    ("kwargs-thinking-string", {"chat_template_kwargs": {"enable_thinking": "no"}}, ["enable_thinking"]),
    ("kwargs-budget-zero", {"chat_template_kwargs": {"thinking_budget": 0}}, ["thinking_budget"]),
    ("kwargs-reserved-messages", {"chat_template_kwargs": {"messages": []}}, ["messages"]),
    (
        "kwargs-reserved-generation-prompt",
        {"chat_template_kwargs": {"add_generation_prompt": False}},
        ["add_generation_prompt"],
    ),
    ("kwargs-reserved-bos", {"chat_template_kwargs": {"bos_token": "x"}}, ["bos_token"]),
    (
        "budget-with-n2",
        {"chat_template_kwargs": {"enable_thinking": True, "thinking_budget": 5}, "n": 2},
        ["thinking_budget"],
    ),
    # tools and response_format: this model's template has no tool-call format
    ("tools-unsupported", {"tools": [TOOL]}, ["tool calling is not supported by this model"]),
    ("tools-required-without-tools", {"tool_choice": "required"}, ["tool_choice"]),
    ("tool-choice-unknown-string", {"tool_choice": "sometimes"}, ["tool_choice"]),
    ("tools-n2", {"tools": [TOOL], "n": 2}, ["n"]),
    ("tools-logprobs", {"tools": [TOOL], "logprobs": True}, ["logprobs"]),
    (
        "response-format-beam",
        {"response_format": {"type": "json_object"}, "use_beam_search": True, "n": 2, "max_tokens": 4},
        ["use_beam_search"],
    ),
    ("response-format-xml", {"response_format": {"type": "xml"}}, ["response_format"]),
    # Pangu-origin fields: types validated (§2.6)
    ("moderation-config-bad-type", {"moderation_config": {"question_moderation": "yes"}}, ["question_moderation"]),
    ("enable-search-string", {"enable_search": "yes"}, ["enable_search"]),
    ("user-number", {"user": 5}, ["user"]),
]


@pytest.mark.parametrize(("fields", "fragments"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_request_is_422(http: httpx.Client, fields: dict[str, Any], fragments: list[str]) -> None:
    assert_422(send(http, fields), *fragments)


# Accepted values at the edges of the rules: 200 (max_tokens kept at 1 so each costs one decode step).
VALID: list[tuple[str, dict[str, Any]]] = [
    ("unknown-field-ignored", {"foo": 1}),  # case 29
    (
        "nulls-are-absent",
        {"max_tokens": None, "stop": None, "temperature": None, "n": None, "seed": None, "max_completion_tokens": 1},
    ),  # case 30
    ("temperature-2", {"temperature": 2.0}),  # case 33
    ("temperature-int", {"temperature": 1}),  # a float field accepts integers
    ("top_p-1", {"top_p": 1}),  # case 35
    ("top_k-minus-one", {"top_k": -1}),  # case 36
    ("top_k-zero", {"top_k": 0}),
    ("top_k-above-vocab", {"top_k": 2147483647}),  # clamped to the vocabulary
    ("min_p-bounds", {"min_p": 0}),
    ("min_p-one", {"min_p": 1}),
    ("repetition_penalty-2", {"repetition_penalty": 2.0}),  # case 38
    ("penalties-at-bounds", {"presence_penalty": -2.0, "frequency_penalty": 2.0}),
    ("seed-max", {"seed": 18446744073709551615}),
    ("stop-empty-array", {"stop": []}),  # case 40
    ("stop_token_ids-out-of-range", {"stop_token_ids": [2, 99999999999, -5]}),  # case 41
    ("include-stop-ignored-without-stop", {"include_stop_str_in_output": "yes"}),  # case 43
    ("n2-default-temperature", {"n": 2}),  # case 48
    ("beam-best_of-below-n", {"use_beam_search": True, "n": 2, "best_of": 1}),  # not validated under beam search
    ("top_logprobs-alone", {"top_logprobs": 2}),  # case 56
    ("tools-empty", {"tools": []}),  # an empty array equals absent
    ("tools-none-choice", {"tools": [TOOL], "tool_choice": "none"}),  # tools not active
    ("tool-choice-auto-without-tools", {"tool_choice": "auto"}),
    ("response-format-text", {"response_format": {"type": "text"}}),
    ("moderation-config-valid", {"moderation_config": {"question_moderation": True}}),
    ("enable-search", {"enable_search": True}),
    (
        "assistant-tool-calls-without-content",
        {
            "messages": [
                user("weather?"),
                {"role": "assistant", "tool_calls": [CALL]},
                {"role": "tool", "content": "", "tool_call_id": "call_1"},
            ]
        },
    ),  # case 24
    (
        "system-and-history",
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                user("hi"),
                {"role": "assistant", "content": "Hello!"},
                user("bye"),
            ]
        },
    ),
    ("message-name", {"messages": [{"role": "user", "content": "hi", "name": "n" * 64}]}),
]


@pytest.mark.parametrize("fields", [c[1] for c in VALID], ids=[c[0] for c in VALID])
def test_accepted_values(http: httpx.Client, fields: dict[str, Any]) -> None:
    fields = {"max_tokens": 1, **fields} if "max_tokens" not in fields else fields
    r = send(http, fields)
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "chat.completion"


def test_text_only_parts_are_flattened(http: httpx.Client) -> None:  # case 31
    parts = send(
        http, {"messages": [user([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])], "max_tokens": 1}
    )
    plain = send(http, {"messages": [user("ab")], "max_tokens": 1})
    assert parts.status_code == plain.status_code == 200
    assert parts.json()["usage"]["prompt_tokens"] == plain.json()["usage"]["prompt_tokens"]
