"""`POST /tokenize` and `POST /detokenize` (issue 19) on the live servers: vLLM's request and response shapes, the
ids being the ones chat prefills (its `usage.prompt_tokens`, with tools, thinking and media), the `details`
extension only when asked, and the chat routes' auth, body cap and validation (422 with the /v1 body, never 500).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests import media_samples as ms
from tests.api_helpers import assert_422, assert_v1_error, ok, user
from tests.conftest import MODEL, QWEN_MODEL, VL, extra_server

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

HI = [user("Hello there")]
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
VLLM_KEYS = {"count", "max_model_len", "tokens", "token_strs"}


def tokenize(http: httpx.Client, **body: Any) -> dict[str, Any]:
    return ok(http.post("/tokenize", json=body))


def prompt_tokens(http: httpx.Client, model: str, **body: Any) -> int:
    """What chat counts for the same messages: one generated token, then its usage."""
    answer = ok(http.post("/v1/chat/completions", json={"model": model, "max_tokens": 1, "temperature": 0, **body}))
    return answer["usage"]["prompt_tokens"]


# ---- shapes ------------------------------------------------------------------------------------------------------


def test_prompt_form_answers_vllms_shape(http: httpx.Client) -> None:
    out = tokenize(http, prompt="Hello there, world")
    assert set(out) == VLLM_KEYS and out["token_strs"] is None
    assert out["count"] == len(out["tokens"]) > 2 and all(isinstance(i, int) for i in out["tokens"])
    card = ok(http.get(f"/v1/models/{MODEL}"))
    assert out["max_model_len"] == card["max_model_len"]
    named = tokenize(http, model=MODEL, prompt="Hello there, world", return_token_strs=True)
    assert named["tokens"] == out["tokens"]
    assert len(named["token_strs"]) == named["count"] and all(isinstance(s, str) for s in named["token_strs"])
    assert ok(http.post("/detokenize", json={"tokens": out["tokens"]})) == {"prompt": "Hello there, world"}


def test_chat_form_counts_what_chat_prefills(http: httpx.Client) -> None:
    out = tokenize(http, messages=HI)
    assert set(out) == VLLM_KEYS
    assert out["count"] == prompt_tokens(http, MODEL, messages=HI)
    system = [{"role": "system", "content": "Be brief."}, *HI]
    assert tokenize(http, messages=system)["count"] == prompt_tokens(http, MODEL, messages=system)
    # the template wrote the special tokens; asking the tokenizer for its own again can only add some
    assert tokenize(http, messages=HI, add_special_tokens=True)["count"] >= out["count"]


def test_without_the_generation_prompt_and_continuing_the_final_message(http: httpx.Client) -> None:
    """vLLM's two other renderings: the conversation alone, and an open-ended final assistant message (the
    prefix a continuation from a chosen token starts from)."""
    full = tokenize(http, messages=HI, return_details=True)["details"]["text"]
    bare = tokenize(http, messages=HI, add_generation_prompt=False, return_details=True)["details"]["text"]
    assert full.startswith(bare) and full[len(bare) :] == "<|im_start|>assistant\n"
    partial = [*HI, {"role": "assistant", "content": "General Kenobi"}]
    out = tokenize(
        http, messages=partial, add_generation_prompt=False, continue_final_message=True, return_details=True
    )
    text = out["details"]["text"]
    assert text == full + "General Kenobi" and out["count"] == len(out["tokens"])  # no end-of-turn after it


def test_details_are_the_rendered_text_and_marked_tokens(http: httpx.Client) -> None:
    out = tokenize(http, messages=HI, return_details=True)
    d = out["details"]
    assert "<|im_start|>user" in d["text"] and "Hello there" in d["text"]
    assert d["text"].endswith("<|im_start|>assistant\n")  # the generation prompt chat renders
    assert len(d["pieces"]) == len(d["special"]) == out["count"]
    assert d["characters"] == len(d["text"]) and d["media"] == [] and d["media_tokens"] == 0
    marked = {p for p, s in zip(d["pieces"], d["special"]) if s}
    assert {"<|im_start|>", "<|im_end|>"} <= marked and d["special_count"] == sum(d["special"]) > 0
    assert not any(s for p, s in zip(d["pieces"], d["special"]) if "Hello" in p)
    assert ok(http.post("/detokenize", json={"tokens": out["tokens"]}))["prompt"] == d["text"]


def test_thinking_and_tools_render_as_chat_renders_them(qwen_live: Any) -> None:
    with qwen_live.client() as http:
        messages = [user("What is the weather in Paris?")]
        for kwargs in ({"enable_thinking": False}, {"enable_thinking": True}):
            out = tokenize(http, messages=messages, chat_template_kwargs=kwargs, return_details=True)
            assert out["count"] == prompt_tokens(http, QWEN_MODEL, messages=messages, chat_template_kwargs=kwargs)
        off = tokenize(http, messages=messages, chat_template_kwargs={"enable_thinking": False}, return_details=True)
        assert off["details"]["text"].endswith("<think>\n\n</think>\n\n")  # Qwen3's "thinking off" prefill
        marked = [p for p, s in zip(off["details"]["pieces"], off["details"]["special"]) if s]
        assert "<think>" in marked and "</think>" in marked  # added tokens, not the tokenizer's "special" ones
        tools = tokenize(http, messages=messages, tools=[TOOL], return_details=True)
        assert "get_weather" in tools["details"]["text"] and tools["count"] > off["count"]
        assert "<tool_call>" in [p for p, s in zip(tools["details"]["pieces"], tools["details"]["special"]) if s]
        assert tools["count"] == prompt_tokens(http, QWEN_MODEL, messages=messages, tools=[TOOL])
        # the extension's tool_choice renders as chat's: "none" leaves the tools out
        assert tokenize(http, messages=messages, tools=[TOOL], tool_choice="none")["count"] < tools["count"]


def test_media_placeholders_are_expanded_as_for_the_model(vl_live: Any) -> None:
    image = {"type": "image_url", "image_url": ms.data_url("image/png", ms.image_bytes("PNG", (64, 48)))}
    messages = [user([image, {"type": "text", "text": "Describe the picture."}])]
    with vl_live.client() as http:
        out = tokenize(http, messages=messages, return_details=True)
        assert out["count"] == prompt_tokens(http, VL, messages=messages)
    (span,) = out["details"]["media"]
    assert span["type"] == "image" and (span["message"], span["part"]) == (0, 0) and span["count"] > 1
    assert out["tokens"][span["start"] : span["start"] + span["count"]] == [span["token"]] * span["count"]
    assert out["details"]["text"].count(span["piece"]) == 1  # one placeholder in the text, `count` in the ids
    assert out["details"]["media_tokens"] == span["count"]


# ---- validation: 422 with the /v1 body, never 500 ----------------------------------------------------------------

INVALID_TOKENIZE: list[tuple[str, Any, list[str]]] = [
    ("not-object", ["hi"], ["JSON object"]),
    ("neither", {"model": MODEL}, ["'prompt' or 'messages'"]),
    ("both", {"prompt": "a", "messages": HI}, ["either"]),
    ("prompt-number", {"prompt": 5}, ["prompt", "string"]),
    ("prompt-array", {"prompt": ["a"]}, ["prompt"]),
    ("add-special-string", {"prompt": "a", "add_special_tokens": "yes"}, ["add_special_tokens", "boolean"]),
    ("token-strs-number", {"prompt": "a", "return_token_strs": 1}, ["return_token_strs"]),
    ("model-unknown", {"model": "nope", "prompt": "a"}, ["Model not found"]),
    ("model-empty", {"model": "", "prompt": "a"}, ["model"]),
    ("messages-empty", {"messages": []}, ["messages"]),
    ("messages-string", {"messages": "hi"}, ["messages"]),
    ("role-robot", {"messages": [{"role": "robot", "content": "hi"}]}, ["role"]),
    ("content-empty", {"messages": [user("")]}, ["content"]),
    (
        "image-on-text-model",
        {"messages": [user([{"type": "image_url", "image_url": "data:image/png;base64,iVBO"}])]},
        ["image"],
    ),
    ("both-prompts", {"messages": HI, "continue_final_message": True}, ["continue_final_message"]),
    (
        "continue-a-user-message",
        {"messages": HI, "continue_final_message": True, "add_generation_prompt": False},
        ["final assistant message"],
    ),
    ("reserved-kwarg", {"messages": HI, "chat_template_kwargs": {"messages": []}}, ["reserved"]),
    ("thinking-string", {"messages": HI, "chat_template_kwargs": {"enable_thinking": "yes"}}, ["enable_thinking"]),
    ("tools-duplicate", {"messages": HI, "tools": [TOOL, TOOL]}, ["duplicates"]),
    (
        "tool-choice-unknown",
        {"messages": HI, "tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "x"}}},
        ["tool_choice"],
    ),
    ("template-raises", {"messages": HI, "chat_template": "{{ raise_exception('no thanks') }}"}, ["no thanks"]),
    ("template-path", {"messages": HI, "chat_template": "/etc/passwd"}, ["paths are not allowed"]),
]


@pytest.mark.parametrize("body,fragments", [c[1:] for c in INVALID_TOKENIZE], ids=[c[0] for c in INVALID_TOKENIZE])
def test_invalid_tokenize_bodies_are_422(http: httpx.Client, body: Any, fragments: list[str]) -> None:
    assert_422(http.post("/tokenize", json=body), *fragments)


INVALID_DETOKENIZE: list[tuple[str, Any, list[str]]] = [
    ("not-object", [1, 2], ["JSON object"]),
    ("missing", {"model": MODEL}, ["tokens"]),
    ("string", {"tokens": "1 2"}, ["tokens", "array"]),
    ("string-item", {"tokens": [1, "2"]}, ["tokens[1]", "integer"]),
    ("float-item", {"tokens": [1, 2.0]}, ["tokens[1]"]),
    ("bool-item", {"tokens": [True]}, ["tokens[0]"]),
    ("negative", {"tokens": [1, -1]}, ["tokens[1]", "got -1"]),
    ("past-vocab", {"tokens": [10**9]}, ["tokens[0]", "1000000000"]),
    ("huge", {"tokens": [10**30]}, ["tokens[0]"]),
    ("model-unknown", {"model": "nope", "tokens": [1]}, ["Model not found"]),
]


@pytest.mark.parametrize("body,fragments", [c[1:] for c in INVALID_DETOKENIZE], ids=[c[0] for c in INVALID_DETOKENIZE])
def test_invalid_detokenize_bodies_are_422(http: httpx.Client, body: Any, fragments: list[str]) -> None:
    assert_422(http.post("/detokenize", json=body), *fragments)


@pytest.mark.parametrize("path", ["/tokenize", "/detokenize"])
def test_undecodable_bodies_are_422(http: httpx.Client, path: str) -> None:
    json_type = {"content-type": "application/json"}
    assert_422(http.post(path, content=b'{"prompt": ', headers=json_type), "not valid JSON")
    assert_422(http.post(path, content=b'{"prompt": "\xff"}', headers=json_type), "UTF-8")
    assert_422(http.post(path, content=b'{"prompt": "\\ud800"}', headers=json_type), "surrogate")
    assert_v1_error(http.get(path), 405)


@pytest.mark.parametrize("path", ["/tokenize", "/detokenize"])
def test_bodies_over_the_limit_are_413(http: httpx.Client, settings: Any, path: str) -> None:
    limit = settings.max_request_length_mb << 20
    head, tail = b'{"prompt": "', b'"}'
    body = head + b"a" * (limit + 1 - len(head) - len(tail)) + tail
    json_type = {"content-type": "application/json"}
    assert_v1_error(http.post(path, content=body, headers=json_type), 413)
    chunks = (body[i : i + (256 << 10)] for i in range(0, len(body), 256 << 10))  # no Content-Length: counted
    assert_v1_error(http.post(path, content=chunks, headers=json_type), 413)


def test_a_prompt_longer_than_the_model_is_counted_not_refused(http: httpx.Client) -> None:
    out = tokenize(http, prompt="word " * 9000)
    assert out["count"] > out["max_model_len"]  # vLLM's answer: the client compares count and max_model_len
    assert_422(
        http.post("/v1/chat/completions", json={"model": MODEL, "messages": [user("word " * 9000)]}), "token length"
    )


# ---- auth and loading ------------------------------------------------------------------------------------------


def test_keys_guard_both_routes(settings: Any, service: Any) -> None:
    with extra_server(settings, service, api_keys=["sk-tok-1"], ui=False) as http:
        for path, body in (("/tokenize", {"prompt": "hi"}), ("/detokenize", {"tokens": [1]})):
            assert_v1_error(http.post(path, json=body), 401, "Missing credentials")
            assert_v1_error(http.post(path, json=body, headers={"Authorization": "Bearer wrong"}), 401, "Invalid")
            r = http.post(path, json={"prompt": 5}, headers={"Authorization": "Bearer wrong"})
            assert_v1_error(r, 401)  # credentials are checked before the body is
            assert "sk-tok-1" not in r.text
            ok(http.post(path, json=body, headers={"Authorization": "Bearer sk-tok-1"}))


def test_while_the_model_loads_both_routes_are_503(settings: Any) -> None:
    with extra_server(settings, None, ui=False) as http:
        assert_v1_error(http.post("/tokenize", json={"prompt": "hi"}), 503)
        assert_v1_error(http.post("/detokenize", json={"tokens": [1]}), 503)


def test_the_prompt_view_asks_a_remote_backend_for_its_tokenize(live: Any, http: httpx.Client, media_http: str) -> None:
    """The page's Prompt view on a remote backend: that server's /tokenize when it has one (this app at another
    address), "not available" (None) when it has none (a plain HTTP server)."""
    import asyncio
    from types import SimpleNamespace

    from playground.client.remote import RemoteBackend, remote_tokenize
    from playground.page.tabs.prompt_view import tokenize_body

    body = tokenize_body({"model": MODEL, "messages": HI, "max_tokens": 3})
    assert "max_tokens" not in body  # only what renders the prompt
    out = asyncio.run(remote_tokenize(RemoteBackend(live.url + "/v1"), body))
    assert out is not None and out["tokens"] == tokenize(http, messages=HI)["tokens"]
    assert "Hello there" in out["details"]["text"]
    assert asyncio.run(remote_tokenize(SimpleNamespace(url=media_http), body)) is None
