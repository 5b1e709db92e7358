"""Tool calls (spec §8) end to end: the tiny Qwen3 that calls get_weather, through the openai SDK and raw SSE."""

from __future__ import annotations

import json
from typing import Any

import pytest

from demo_models.tiny_qwen import TOOLS, TWO_CITIES, WEATHER, WEATHER_ANSWER
from playground.client.tools_panel import SAVED_RESULTS
from tests.conftest import QWEN_MODEL, sse_events


def post(qwen_live, body: dict[str, Any]) -> Any:
    with qwen_live.client() as http:
        return http.post("/v1/chat/completions", json={"model": QWEN_MODEL, "max_tokens": 60, **body})


def sdk(qoai, body: dict[str, Any], max_tokens: int = 60) -> Any:
    extra = {k: body.pop(k) for k in ("chat_template_kwargs",) if k in body}
    return qoai.chat.completions.create(model=QWEN_MODEL, max_tokens=max_tokens, extra_body=extra, **body)


def test_a_tool_call_is_reported_with_an_id_and_finish_reason(qoai) -> None:
    r = sdk(qoai, WEATHER.request())
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_") and len(call.id) == 13
    assert choice.message.content == "\n\n"  # text before the first <tool_call>, untrimmed (§8.2 step 4)
    assert choice.message.model_extra["reasoning_content"] == "\nI should call the tool.\n"  # the SDK keeps it


def test_streamed_tool_call_deltas_fold_to_the_same_call(qwen_live) -> None:
    whole = post(qwen_live, WEATHER.request()).json()["choices"][0]
    r = post(qwen_live, WEATHER.request(stream=True))
    chunks = [e for e in sse_events(r.text) if e != "[DONE]" and e["choices"]]
    parts = [t for e in chunks for t in e["choices"][0]["delta"].get("tool_calls") or []]
    first = parts[0]
    assert first["index"] == 0 and first["type"] == "function" and first["function"]["name"] == "get_weather"
    assert first["id"].startswith("call_")
    arguments = "".join(p["function"].get("arguments") or "" for p in parts)
    assert json.loads(arguments) == json.loads(whole["message"]["tool_calls"][0]["function"]["arguments"])
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    content = "".join(e["choices"][0]["delta"].get("content") or "" for e in chunks)
    assert "<tool_call>" not in content and "get_weather" not in content


def test_two_calls_in_one_answer(qoai) -> None:
    r = sdk(qoai, TWO_CITIES.request(), 80)
    choice = r.choices[0]
    assert choice.message.content == "Let me check both.\n"
    cities = [json.loads(c.function.arguments)["city"] for c in choice.message.tool_calls]
    assert cities == ["Paris", "Tokyo"]
    assert len({c.id for c in choice.message.tool_calls}) == 2


def test_the_tool_result_turn_continues_the_conversation(qoai) -> None:
    r = sdk(qoai, WEATHER_ANSWER.request())
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == "\n\nIt is sunny and 22 °C in Paris."
    assert not r.choices[0].message.tool_calls


def test_tool_choice_none_renders_no_tools_and_parses_nothing(qwen_live) -> None:
    body = post(qwen_live, WEATHER.request(tool_choice="none")).json()
    choice = body["choices"][0]
    assert choice["message"]["tool_calls"] == [] and choice["finish_reason"] != "tool_calls"


def test_a_call_cut_off_by_max_tokens_is_plain_content(qwen_live) -> None:
    body = post(qwen_live, WEATHER.request(max_tokens=14)).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"]["tool_calls"] == []
    assert "<tool_call>" in choice["message"]["content"]


def test_named_tool_choice_is_forced(qwen_live) -> None:
    tools = TOOLS + [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    choice = {"type": "function", "function": {"name": "get_weather"}}
    body = post(qwen_live, WEATHER.request(tools=tools, tool_choice=choice)).json()
    calls = body["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_weather"]
    assert body["choices"][0]["finish_reason"] == "tool_calls"


def test_tool_messages_need_a_known_history(qwen_live) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "tool", "content": "x"}]
    r = post(qwen_live, {"messages": messages, "tools": TOOLS})
    assert r.status_code == 422, r.text


def test_required_tool_choice_constrains_a_model_that_would_not_call(qwen_live) -> None:
    from demo_models.tiny_qwen import MATH_NO_THINKING

    body = post(qwen_live, MATH_NO_THINKING.request(tools=TOOLS, tool_choice="required", max_tokens=120)).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert isinstance(json.loads(call["function"]["arguments"]), dict)


# ---- one chat, the documented flows in any order (issue 30, item 8) --------------------------------------------
# As the page sends them: the tools on every request, each reply sent back as the API returned its content, tool
# results typed (the page's saved one or another) and answered by call id.
SAVED = SAVED_RESULTS["get_weather"]  # the page's saved result: {"temperature": 22, "sky": "sunny"}
RAINY, CLOUDY = '{"temperature": 15, "sky": "rainy"}', '{"temperature": 9, "sky": "cloudy"}'  # typed ones
ORDERS = {
    "math_first": ["What is 2+2?", "Weather in Paris?", RAINY, "What is 2+2?", "Weather in Paris?", SAVED],
    "weather_first": [
        "Weather in Paris?",
        SAVED,
        "Weather in Paris?",
        CLOUDY,
        "What is 2+2?",
        "What is 2+2?",
        "Weather in Paris?",
    ],
}


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "no_thinking"])
@pytest.mark.parametrize("order", ORDERS)
def test_one_chat_holds_every_flow_in_any_order(qwen_live, order: str, thinking: bool) -> None:
    messages: list[dict[str, Any]] = []
    extra = {} if thinking else {"chat_template_kwargs": {"enable_thinking": False}}
    for step in ORDERS[order]:
        if step.startswith("{"):  # the tool result for the pending call
            call_id = messages[-1]["tool_calls"][0]["id"]
            messages.append({"role": "tool", "tool_call_id": call_id, "content": step})
        else:
            messages.append({"role": "user", "content": step})
        r = post(qwen_live, {"messages": messages, "tools": TOOLS, "temperature": 0, **extra})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        message = choice["message"]
        where = f"after {[m.get('content') for m in messages]}: {message}"
        assert bool(message.get("reasoning_content")) is thinking, where
        if step == "Weather in Paris?":
            assert choice["finish_reason"] == "tool_calls", where
            (call,) = message["tool_calls"]
            assert call["function"]["name"] == "get_weather", where
            assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}, where
        else:
            assert choice["finish_reason"] == "stop" and not message["tool_calls"], where
            answer = message["content"].strip()
            if step == "What is 2+2?":
                assert answer == "The answer is 4.", where
            elif step == SAVED:  # the page's saved get_weather result
                assert answer == "It is sunny and 22 °C in Paris.", where
            else:  # a typed result it was not trained on: an answer that points to it, never an empty one
                assert answer == "The tool answered for Paris; its result is above.", where
        sent = {"role": "assistant", "content": message["content"]}  # as the page sends it back
        if message["tool_calls"]:
            sent["tool_calls"] = message["tool_calls"]
        messages.append(sent)
