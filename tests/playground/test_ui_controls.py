"""The playground's request building, tool editor checks and copy-as snippets, without a browser or a model."""

from __future__ import annotations

import json
import shlex

import pytest

from playground.client import controls, snippets, tools_panel
from playground.client.controls import KNOBS, PRESETS, build_body, check, request_fields

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

DEFAULTS = {k.name: k.default for k in KNOBS}
MESSAGES = [{"role": "user", "content": "hi"}]


def body(**changes) -> dict:
    return build_body("m", MESSAGES, request_fields({**DEFAULTS, **changes}))


def test_defaults_send_only_what_differs_from_the_api_defaults() -> None:
    assert body() == {
        "model": "m",
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.7,
        "max_tokens": 256,
    }
    assert check(body()) is None


def test_controls_become_typed_request_fields() -> None:
    b = body(
        max_tokens=64.0,
        top_k=40.0,
        seed="7",
        stop="END\n\n###",
        stop_token_ids="2, 5",
        logprobs=True,
        top_logprobs=3.0,
        enable_thinking="off",
        thinking_budget=16,
        response_format="json_object",
    )
    assert b["max_tokens"] == 64 and type(b["max_tokens"]) is int and b["top_k"] == 40
    assert b["seed"] == 7 and b["stop"] == ["END", "###"] and b["stop_token_ids"] == [2, 5]
    assert b["logprobs"] is True and b["top_logprobs"] == 3
    assert b["chat_template_kwargs"] == {"enable_thinking": False, "thinking_budget": 16}
    assert b["response_format"] == {"type": "json_object"}
    assert check(b) is None
    assert "top_logprobs" not in body(top_logprobs=3)  # only with logprobs on


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"temperature": 0.0, "n": 2}, "temperature must be greater than 0 when n or best_of is greater than 1"),
        ({"n": 2, "best_of": 3}, "best_of must equal n when stream is true"),
        ({"use_beam_search": True, "stop": "x"}, "stop is not supported with use_beam_search"),
        ({"use_beam_search": True, "max_tokens": 200}, "max_tokens must be at most 128 with use_beam_search"),
        ({"seed": "-5"}, "Parameter seed must be in"),
        ({"seed": "abc"}, "seed"),
        ({"top_k": -3}, "Parameter top_k must be in [-1, 2147483647]"),
        ({"stop_token_ids": "1, x"}, "stop_token_ids"),
    ],
)
def test_invalid_combinations_get_the_api_message_before_sending(changes: dict, message: str) -> None:
    problem = check(body(**changes))
    assert problem is not None and message in problem


def test_a_broken_json_schema_box_says_where() -> None:
    with pytest.raises(Exception, match="not valid JSON: Expecting .* line 1, column"):
        request_fields({**DEFAULTS, "response_format": "json_schema", "json_schema": '{"name": '})
    fine = body(response_format="json_schema", json_schema='{"name": "n", "schema": {"type": "object"}}')
    assert fine["response_format"]["json_schema"]["name"] == "n" and check(fine) is None


def test_presets_set_valid_sampling_fields() -> None:
    for preset in PRESETS.values():
        assert set(preset) == set(controls.PRESET_FIELDS)
        assert check(body(**preset)) is None


def test_tools_editor_messages() -> None:
    assert tools_panel.parse_tools("") == (None, None)
    assert "line 1, column 2" in (tools_panel.parse_tools("[x]")[1] or "")
    assert "type" in (tools_panel.parse_tools('[{"type": "fn"}]')[1] or "")
    dup = tools_panel.dumps([tools_panel.GET_WEATHER, tools_panel.GET_WEATHER])
    assert "duplicates an earlier tool name" in (tools_panel.parse_tools(dup)[1] or "")
    tools, problem = tools_panel.parse_tools(tools_panel.dumps([tools_panel.GET_WEATHER]))
    assert problem is None and tools_panel.choice_options(tools) == ["auto", "none", "required", "get_weather"]
    assert tools_panel.choice_value("get_weather") == {"type": "function", "function": {"name": "get_weather"}}
    b = build_body("m", MESSAGES, {}, tools, tools_panel.choice_value("required"))
    assert b["tool_choice"] == "required" and check(b) is None
    assert "logprobs is not supported when tools are used" in (check({**b, "logprobs": True}) or "")


def test_call_arguments_are_checked_against_the_schema() -> None:
    tools = [tools_panel.GET_WEATHER]
    assert tools_panel.check_arguments(tools, "get_weather", '{"city": "Paris"}') == []
    assert tools_panel.check_arguments(tools, "get_weather", "{}") == ["missing required 'city'"]
    assert tools_panel.check_arguments(tools, "get_weather", '{"city": 3, "x": 1}') == [
        "'city' should be string, got 3",
        "unexpected argument 'x'",
    ]
    assert tools_panel.check_arguments(tools, "nope", "{}") == ["no tool named 'nope' was offered"]
    assert "not valid JSON" in tools_panel.check_arguments(tools, "get_weather", "{")[0]


def test_snippets_carry_the_exact_request() -> None:
    b = body(top_k=5, seed="1")
    curl = snippets.as_curl(b, "http://127.0.0.1:7860/")
    words = shlex.split(curl.replace("\\\n", " "))
    assert words[2] == "http://127.0.0.1:7860/v1/chat/completions" and json.loads(words[-1]) == b
    py = snippets.as_python(b, "http://127.0.0.1:7860/")
    compile(py, "snippet", "exec")
    assert "extra_body={'top_k': 5}" in py and "seed=1" in py


def test_speculative_is_sent_only_when_chosen() -> None:
    assert "speculative" not in request_fields(DEFAULTS)  # "server default": the server decides
    assert request_fields({**DEFAULTS, "speculative": "on"})["speculative"] is True
    assert request_fields({**DEFAULTS, "speculative": "off"})["speculative"] is False
