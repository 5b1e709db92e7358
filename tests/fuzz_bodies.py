"""Hypothesis strategies for chat-completion requests, shared by tests/engine/http/test_api_fuzz.py and bench/fuzz_api.py.

A generated request is (route, body bytes). A third of the bodies use only in-range values (most are valid and
run on the engine), a third put every field of §2.2 near and past its limits or give it the wrong JSON type, and
the rest are arbitrary JSON documents, truncated bodies and arbitrary bytes.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

MODEL = "SmolLM2-135M-Instruct"
ROUTES = {
    "v1": "/v1/chat/completions",
    "pangu_v2": "/api/v2/chat/completions",
    "pangu_v1": "/v1/p-1/deployments/d_1/chat/completions",
}

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
short_text = st.text(min_size=0, max_size=40)


def anything_or(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the field's own kind of value, sometimes any JSON value at all."""
    return st.one_of(strategy, strategy, strategy, json_values)


def number(lo: float, hi: float) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.floats(min_value=lo, max_value=hi), st.integers(int(lo) - 1, int(hi) + 1), st.sampled_from([lo, hi, 0])
    )


media_url = st.sampled_from(
    [
        "data:image/png;base64,iVBORw0KGgo=",
        "data:image/png;base64,@@@",
        "file:///etc/passwd",
        "https://example.com/a.png",
        "http://127.0.0.1/x.jpg",
        "AAAA",
        "x" * 4097,
    ]
)
part = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": anything_or(short_text)}),
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["image_url", "video_url", "audio_url"]),
            "image_url": anything_or(media_url | st.fixed_dictionaries({"url": media_url})),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("input_audio"),
            "input_audio": st.fixed_dictionaries({"data": short_text, "format": short_text}),
        }
    ),
    json_values,
)
tool_call = st.fixed_dictionaries(
    {
        "id": anything_or(short_text),
        "type": anything_or(st.just("function")),
        "function": anything_or(
            st.fixed_dictionaries(
                {
                    "name": anything_or(st.sampled_from(["f", "get weather!"])),
                    "arguments": anything_or(st.just('{"a": 1}')),
                }
            )
        ),
    },
)
message = st.fixed_dictionaries(
    {},
    optional={
        "role": anything_or(st.sampled_from(["system", "user", "assistant", "tool", "robot"])),
        "content": anything_or(short_text | st.lists(part, max_size=3)),
        "name": anything_or(short_text),
        "tool_calls": anything_or(st.lists(tool_call, max_size=2)),
        "tool_call_id": anything_or(short_text),
        "reasoning_content": anything_or(short_text),
    },
)
user_message = st.fixed_dictionaries({"role": st.just("user"), "content": st.text(min_size=1, max_size=40)})
tool = st.fixed_dictionaries(
    {
        "type": anything_or(st.just("function")),
        "function": anything_or(
            st.fixed_dictionaries(
                {"name": anything_or(st.sampled_from(["f", "g", "bad name"]))},
                optional={"parameters": json_values, "strict": json_values},
            )
        ),
    },
)
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "model": st.sampled_from([MODEL, MODEL, "nope", ""]),
    "stream": st.sampled_from([True, False, "true", "FALSE", "yes", 1]),
    "stream_options": st.fixed_dictionaries(
        {}, optional={"include_usage": st.booleans(), "continuous_usage_stats": st.booleans()}
    ),
    "temperature": number(-0.5, 2.5),
    "top_p": number(-0.1, 1.1),
    "top_k": st.integers(-3, 2**32),
    "seed": st.integers(-2, 2**65),
    "presence_penalty": number(-3, 3),
    "frequency_penalty": number(-3, 3),
    "repetition_penalty": number(-0.5, 2.5),
    "max_tokens": st.integers(-1, 2**32),
    "max_completion_tokens": st.integers(-1, 2**32),
    "n": st.integers(-1, 10),
    "best_of": st.integers(-1, 10),
    "use_beam_search": st.booleans(),
    "logprobs": st.booleans(),
    "top_logprobs": st.integers(-1, 25),
    "stop": short_text | st.lists(short_text, max_size=4),
    "stop_token_ids": st.lists(st.integers(-5, 2**40), max_size=4),
    "include_stop_str_in_output": st.booleans(),
    "skip_special_tokens": st.booleans(),
    "ignore_eos": st.booleans(),
    "chat_template": st.sampled_from(
        [
            "{{ messages[0]['content'] }}",
            "{% for %}",
            "/etc/passwd",
            "x.jinja",
            "",
            "{{ raise_exception('no') }}",
            "{{ ''.__class__ }}",
        ]
    ),
    "chat_template_kwargs": st.dictionaries(
        st.sampled_from(["enable_thinking", "thinking_budget", "messages", "x"]), json_values, max_size=2
    ),
    "tools": st.lists(tool, max_size=3),
    "tool_choice": st.sampled_from(["none", "auto", "required", "any"])
    | st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries({"name": short_text})}),
    "response_format": st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "json_schema", "x"])}),
    "moderation_config": st.fixed_dictionaries(
        {},
        optional={
            "black_glossary_names": anything_or(st.lists(short_text, max_size=2)),
            "question_moderation": anything_or(st.booleans()),
            "show_result": anything_or(st.booleans()),
        },
    ),
    "enable_search": st.booleans(),
    "user": short_text,
}
bodies = st.fixed_dictionaries(
    {"messages": st.one_of(st.lists(user_message, min_size=1, max_size=3), st.lists(message, max_size=4), json_values)},
    optional={name: anything_or(strategy) for name, strategy in FIELDS.items()},
)


# Values inside each field's documented range: bodies built only from these are mostly valid (the cross-field
# rules of §2.4 and the Pangu narrowing still refuse some), so they reach the template, the engine and the writers.
IN_RANGE: dict[str, st.SearchStrategy[Any]] = {
    "stream": st.sampled_from([True, False, "true", "false"]),
    "temperature": st.floats(0.05, 1.0),
    "top_p": st.floats(0.05, 1.0),
    "top_k": st.integers(-1, 100),
    "seed": st.integers(0, 2**64 - 1),
    "presence_penalty": st.floats(-2.0, 2.0),
    "frequency_penalty": st.floats(-2.0, 2.0),
    "repetition_penalty": st.floats(0.5, 2.0),
    "max_tokens": st.integers(1, 64),
    "n": st.integers(1, 2),
    "logprobs": st.booleans(),
    "top_logprobs": st.integers(0, 20),
    "stop": st.text(min_size=1, max_size=4) | st.lists(st.text(min_size=1, max_size=4), min_size=1, max_size=3),
    "stop_token_ids": st.lists(st.integers(0, 2**31), max_size=3),
    "include_stop_str_in_output": st.booleans(),
    "skip_special_tokens": st.booleans(),
    "ignore_eos": st.booleans(),
    "chat_template": st.just("{{ messages[0]['content'] }}"),
    "chat_template_kwargs": st.just({}),
    "response_format": st.just({"type": "text"}),
    "moderation_config": st.fixed_dictionaries(
        {},
        optional={
            "black_glossary_names": st.lists(short_text, max_size=2),
            "question_moderation": st.booleans(),
            "answer_moderation": st.booleans(),
            "show_result": st.booleans(),
        },
    ),
    "enable_search": st.booleans(),
    "user": short_text,
}
in_range_bodies = st.fixed_dictionaries(
    {"model": st.just(MODEL), "messages": st.lists(user_message, min_size=1, max_size=3)}, optional=IN_RANGE
)


def _encode(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _escaped(value: Any) -> bytes:
    """ASCII JSON: lone surrogates travel as valid `\\udXXX` escapes instead of invalid UTF-8 bytes."""
    return json.dumps(value).encode()


raw_bodies = st.one_of(
    in_range_bodies.map(_encode),
    in_range_bodies.map(_encode),
    in_range_bodies.map(_escaped),
    bodies.map(_encode),
    bodies.map(_escaped),
    json_values.map(_encode),
    st.binary(max_size=200),
    bodies.map(_encode).flatmap(lambda b: st.integers(0, max(0, len(b) - 1)).map(lambda i: b[:i])),  # truncated
)
requests = st.tuples(st.sampled_from(sorted(ROUTES)), raw_bodies)


STATUSES = {"v1": {200, 422}, "pangu_v2": {200, 400}, "pangu_v1": {200, 400}}
ERROR_KEYS = {
    "v1": {"error", "error_type"},
    "pangu_v2": {"error", "id"},
    "pangu_v1": {"error_code", "error_msg", "details"},
}
LEAKS = ("Traceback", 'File "', "site-packages", "pydantic", "<class", "<function", "root:x:0:0")


def problems(route: str, status: int, content_type: str, text: str) -> list[str]:
    """What is wrong with the answer to a fuzzed body (empty = fine): a 5xx, a status outside the route family's
    validation status, a leak (§6.5), a body not in the family's shape, a stream that did not end cleanly."""
    found = [f"status {status}"] if status not in STATUSES[route] else []
    found += [f"leak {leak!r}" for leak in LEAKS if leak in text]
    try:
        if status != 200:
            body = json.loads(text)
            if not isinstance(body, dict) or set(body) != ERROR_KEYS[route]:
                found.append("error body shape")
        elif content_type.startswith("text/event-stream"):
            terminator = "data:[DONE]\n\n" if route == "pangu_v1" else "data: [DONE]\n\n"
            if not text.endswith(terminator) or '"error' in text:
                found.append("stream did not end cleanly")
        elif json.loads(text).get("object") != "chat.completion":
            found.append("response object")
    except ValueError:
        found.append("not JSON")
    return found
