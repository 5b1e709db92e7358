"""Reasoning content (spec §7) end to end: the tiny Qwen3 that thinks, through the real server and clients."""

from __future__ import annotations

from typing import Any

from demo_models.tiny_qwen import MATH, MATH_NO_THINKING, WEATHER_ANSWER
from tests.conftest import QWEN_MODEL, sse_events


def post(qwen_live, body: dict[str, Any]) -> Any:
    with qwen_live.client() as http:
        return http.post("/v1/chat/completions", json={"model": QWEN_MODEL, "max_tokens": 40, **body})


def test_reasoning_is_split_from_the_answer(qwen_live) -> None:
    r = post(qwen_live, MATH.request())
    assert r.status_code == 200, r.text
    body = r.json()
    message = body["choices"][0]["message"]
    assert message["reasoning_content"] == "\nTwo plus two is four.\n"
    assert message["content"] == "\n\nThe answer is 4."
    assert body["choices"][0]["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] >= 2
    assert usage["completion_tokens"] > usage["completion_tokens_details"]["reasoning_tokens"]


def test_stream_parts_concatenate_to_the_non_stream_answer(qwen_live) -> None:
    whole = post(qwen_live, MATH.request()).json()
    r = post(qwen_live, MATH.request(stream=True, stream_options={"include_usage": True}))
    events = [e for e in sse_events(r.text) if e != "[DONE]"]
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    assert (reasoning, content) == (
        whole["choices"][0]["message"]["reasoning_content"],
        whole["choices"][0]["message"]["content"],
    )
    # all reasoning deltas come before all content deltas (§7.7)
    kinds = [("r" if d.get("reasoning_content") else "") + ("c" if d.get("content") else "") for d in deltas]
    flat = "".join(k for k in kinds if k)
    assert flat == "r" * flat.count("r") + "c" * flat.count("c") or "rc" in flat
    assert "<think>" not in reasoning + content and "</think>" not in reasoning + content
    assert events[-1]["usage"]["completion_tokens_details"] == whole["usage"]["completion_tokens_details"]


def test_enable_thinking_false_answers_directly_without_a_split(qwen_live) -> None:
    body = post(qwen_live, MATH_NO_THINKING.request()).json()
    message = body["choices"][0]["message"]
    assert message["content"] == "The answer is 4."
    assert "reasoning_content" not in message
    assert "completion_tokens_details" not in body["usage"]


def test_max_tokens_inside_reasoning_leaves_the_answer_empty(qwen_live) -> None:
    body = post(qwen_live, MATH.request(max_tokens=3)).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] == "" and choice["message"]["reasoning_content"]
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 3


def test_stop_string_inside_reasoning_is_kept_in_reasoning(qwen_live) -> None:
    body = post(qwen_live, MATH.request(stop=["two is"])).json()
    choice = body["choices"][0]
    assert choice["message"]["reasoning_content"] == "\nTwo plus two is"
    assert choice["message"]["content"] == ""
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", "two is")


def test_thinking_budget_forces_the_end_of_reasoning(qwen_live) -> None:
    kwargs = {"enable_thinking": True, "thinking_budget": 2}
    body = post(qwen_live, MATH.request(chat_template_kwargs=kwargs, max_tokens=60)).json()
    message = body["choices"][0]["message"]
    early = qwen_live.settings.thinking_early_stop_text.split("</think>")[0]
    assert message["reasoning_content"].endswith(early)
    assert len(message["reasoning_content"]) < len("\nTwo plus two is four.\n") + len(early)
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] > 2


def test_reasoning_in_history_is_accepted(qwen_live) -> None:
    r = post(qwen_live, WEATHER_ANSWER.request())
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "\n\nIt is sunny and 22 °C in Paris."


def test_enable_reasoning_false_turns_the_split_off(qwen_live) -> None:
    from engine.protocol.request import parse_chat_request
    from engine.serving.reasoning import ReasoningPolicy

    req = parse_chat_request({"model": QWEN_MODEL, **MATH.request()}, "v1")
    svc = qwen_live.service
    assert svc.reasoning.plan(req).split  # the server's default (auto) splits this model's output
    off = ReasoningPolicy(svc.tokenizer, "qwen3", qwen_live.settings.serving.replace(enable_reasoning="false"))
    plan = off.plan(req)
    assert not plan.split and plan.think_ids is None and plan.thinking is True  # the template still thinks
    assert svc.reasoning.available and not off.available  # what the page's header badge shows


def test_beam_search_splits_each_beam(qwen_live) -> None:
    body = post(qwen_live, MATH.request(use_beam_search=True, n=2, best_of=2)).json()
    assert len(body["choices"]) == 2
    for choice in body["choices"]:  # beams differ, and each is split on its own: no think tag left in either part
        message = choice["message"]
        assert not any(
            tag in (message[part] or "") for tag in ("<think>", "</think>") for part in ("content", "reasoning_content")
        ), message
    best = body["choices"][0]["message"]
    assert best["reasoning_content"].endswith(" plus two is four.\n")
    assert best["content"].startswith("\n\nThe answer is 4")
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] >= 2


def test_n_choices_each_carry_their_own_split(qwen_live) -> None:
    r = post(qwen_live, MATH.request(n=2, temperature=0.01, seed=1, stream=True))
    events = [e for e in sse_events(r.text) if e != "[DONE]" and e["choices"]]
    closing = [e for e in events if e["choices"][0]["finish_reason"]]
    assert sorted(e["choices"][0]["index"] for e in closing) == [0, 1]
    for e in closing:
        assert e["usage"]["completion_tokens_details"]["reasoning_tokens"] >= 2
