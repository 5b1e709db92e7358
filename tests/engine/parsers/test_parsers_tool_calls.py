"""Tool-call parsers (spec §8): the non-stream result of §8.2 / §8.6, and streams that fold to the same calls."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest

from engine.parsers import ParsedDelta, ToolCallEvent, fold, make_parser, new_call_id, select_parser

ID = re.compile(r"^call_[A-Za-z0-9]{8}$")
PARIS = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOKYO = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Asia/Tokyo", "h24": true}}\n</tool_call>'


def run(name: str, chunks: list[str], streaming: bool) -> tuple[list[ParsedDelta], Any]:
    parser = make_parser(name, streaming=streaming)
    deltas = [parser.feed(c) for c in chunks]
    deltas.append(parser.finish())
    return deltas, parser


def non_stream(text: str, name: str = "hermes") -> tuple[str, list[dict[str, str]], bool]:
    deltas, parser = run(name, [text], streaming=False)
    assert not any(deltas[:-1]), "a non-streaming parser emits nothing before finish()"
    content, calls = fold(deltas)
    return content, calls, parser.called


def splits(text: str):
    """Every way to cut the text in two, then one character at a time, then in threes."""
    for i in range(len(text) + 1):
        yield [text[:i], text[i:]]
    yield list(text)
    yield [text[i : i + 3] for i in range(0, len(text), 3)]


# (case id, model output, expected content, expected calls as (name, arguments text)), all with calls (§8.2).
VALID = [
    ("one call", PARIS, "", [("get_weather", '{"city": "Paris"}')]),
    (
        "compact json",
        '<tool_call>{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>',
        "",
        [("get_weather", '{"city": "Paris"}')],
    ),
    (
        "two calls in order",
        PARIS + "\n" + TOKYO,
        "",
        [("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "Asia/Tokyo", "h24": true}')],
    ),
    ("text before", "Let me check.\n\n" + PARIS, "Let me check.\n\n", [("get_weather", '{"city": "Paris"}')]),
    ("text after is dropped", PARIS + "\nDone, I think.", "", [("get_weather", '{"city": "Paris"}')]),
    (
        "text between is dropped",
        "A" + PARIS + " and then " + TOKYO + " z",
        "A",
        [("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "Asia/Tokyo", "h24": true}')],
    ),
    (
        "whitespace around json",
        '<tool_call> \n\t{"name": "f", "arguments": {"a": 1}}  \n\n</tool_call>',
        "",
        [("f", '{"a": 1}')],
    ),
    (
        "unicode kept unescaped",
        '<tool_call>{"name": "查询", "arguments": {"城市": "北京", "e": "\\u00e9"}}</tool_call>',
        "",
        [("查询", '{"城市": "北京", "e": "é"}')],
    ),
    ("empty object", '<tool_call>{"name": "now", "arguments": {}}</tool_call>', "", [("now", "{}")]),
    ("empty object with spaces", '<tool_call>{"name": "now", "arguments": { \n }}</tool_call>', "", [("now", "{}")]),
    (
        "string arguments pass through",
        '<tool_call>{"name": "f", "arguments": "{\\"x\\": [1, 2]}"}</tool_call>',
        "",
        [("f", '{"x": [1, 2]}')],
    ),
    (
        "arguments before name",
        '<tool_call>{"arguments": {"q": "a}b{c"}, "name": "search"}</tool_call>',
        "",
        [("search", '{"q": "a}b{c"}')],
    ),
    (
        "nested and escaped",
        '<tool_call>{"name": "f", "arguments": {"a": {"b": [1, {"c": "x\\"}y"}]}, "n": null}}</tool_call>',
        "",
        [("f", '{"a": {"b": [1, {"c": "x\\"}y"}]}, "n": null}')],
    ),
    (
        "tags inside strings",
        '<tool_call>{"name": "echo", "arguments": {"s": "<tool_call> and <b>"}}</tool_call>',
        "",
        [("echo", '{"s": "<tool_call> and <b>"}')],
    ),
    (
        "extra keys are ignored",
        '<tool_call>{"id": 7, "name": "f", "arguments": {"a": 1.5e3}, "x": [1]}</tool_call>',
        "",
        [("f", '{"a": 1500.0}')],
    ),
]

# Outputs that report no call: the non-stream content is the text unchanged (§8.2 step 2, deviation: untrimmed).
INVALID = [
    ("no block", "The answer is 4."),
    ("almost a tag", "a <tool_cal> b <tool_call"),
    ("malformed json", '<tool_call>\n{"name": "f", "arguments": {"a": }}\n</tool_call>'),
    ("missing name", '<tool_call>{"arguments": {"a": 1}}</tool_call>'),
    ("name not a string", '<tool_call>{"name": 3, "arguments": {}}</tool_call>'),
    ("missing arguments", '<tool_call>{"name": "f"}</tool_call>'),
    ("null arguments", '<tool_call>{"name": "f", "arguments": null}</tool_call>'),
    ("list arguments", '<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>'),
    ("NaN is not JSON", '<tool_call>{"name": "f", "arguments": {"a": NaN}}</tool_call>'),
    ("not an object", "<tool_call>[1, 2]</tool_call>"),
    ("text after json inside block", '<tool_call>{"name": "f", "arguments": {}} oops</tool_call>'),
    ("unclosed block (max_tokens)", 'Sure. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa'),
    ("one bad block spoils all", PARIS + '<tool_call>{"name": "g", "arguments": {"a": 1}</tool_call>'),
    ("leading space", "  " + '<tool_call>{"name": "f", "arguments": {"a": 1}</tool_call>  '),
]


@pytest.mark.parametrize(("text", "content", "calls"), [c[1:] for c in VALID], ids=[c[0] for c in VALID])
def test_non_stream_reports_each_block_as_a_call(text: str, content: str, calls: list[tuple[str, str]]) -> None:
    got_content, got_calls, called = non_stream(text)
    assert got_content == content
    assert [(c["name"], c["arguments"]) for c in got_calls] == calls
    assert called
    assert all(ID.match(c["id"]) for c in got_calls)
    assert len({c["id"] for c in got_calls}) == len(got_calls)


@pytest.mark.parametrize("text", [c[1] for c in INVALID], ids=[c[0] for c in INVALID])
def test_non_stream_without_a_valid_call_keeps_the_text(text: str) -> None:
    assert non_stream(text) == (text, [], False)


@pytest.mark.parametrize(("text", "content", "calls"), [c[1:] for c in VALID], ids=[c[0] for c in VALID])
def test_stream_folds_to_the_non_stream_calls_at_every_cut(text: str, content: str, calls: list) -> None:
    for chunks in splits(text):
        deltas, parser = run("hermes", chunks, streaming=True)
        got_content, got_calls = fold(deltas)
        assert got_content == content, chunks
        assert parser.called, chunks
        assert [c["name"] for c in got_calls] == [name for name, _ in calls], chunks
        for call, (_, arguments) in zip(got_calls, calls):
            assert json.loads(call["arguments"]) == json.loads(arguments), chunks  # parsed JSON, not whitespace
            assert ID.match(call["id"])
        assert "<tool_call>" not in got_content and "</tool_call>" not in got_content


@pytest.mark.parametrize("text", [c[1] for c in INVALID], ids=[c[0] for c in INVALID])
def test_stream_of_an_output_without_calls_never_reports_a_call(text: str) -> None:
    for chunks in splits(text):
        deltas, parser = run("hermes", chunks, streaming=True)
        assert not parser.called, chunks
        content, calls = fold(deltas)
        if not calls:  # nothing was sent as a call, so everything stayed content, like the non-stream result
            assert content == text, chunks


def test_stream_events_come_in_order_name_first_then_argument_fragments() -> None:
    deltas, _ = run("hermes", list("Hi " + PARIS + TOKYO), streaming=True)
    events = [e for d in deltas for e in d.tool_calls]
    for index in (0, 1):
        mine = [e for e in events if e.index == index]
        assert mine[0].id and mine[0].name and mine[0].arguments is None  # id + name alone, once
        assert all(e.id is None and e.name is None and e.arguments for e in mine[1:])
    assert [e.index for e in events] == sorted(e.index for e in events)
    # As written by the model (the stream does not re-serialise).
    assert "".join(e.arguments or "" for e in events if e.index == 1) == '{"tz": "Asia/Tokyo", "h24": true}'


def test_stream_sends_the_name_and_arguments_before_the_block_closes() -> None:
    parser = make_parser("hermes", streaming=True, id_factory=lambda: "call_fixed00")
    assert parser.feed("Let me check.") == ParsedDelta("Let me check.")
    assert parser.feed("\n<tool_") == ParsedDelta("\n")  # could be a tag: held back
    assert parser.feed('call>\n{"name": "get_w') == ParsedDelta()
    assert parser.feed('eather", "arguments": {"ci') == ParsedDelta(
        "", (ToolCallEvent(0, id="call_fixed00", name="get_weather"), ToolCallEvent(0, arguments='{"ci'))
    )
    assert parser.feed('ty": "Paris"}}\n</tool') == ParsedDelta("", (ToolCallEvent(0, arguments='ty": "Paris"}'),))
    assert parser.feed("_call> bye") == ParsedDelta()
    assert parser.finish() == ParsedDelta() and parser.called


def test_held_back_text_is_released_when_it_turns_out_not_to_be_a_tag() -> None:
    parser = make_parser("hermes", streaming=True)
    assert parser.feed("a <tool") == ParsedDelta("a ")
    assert parser.feed("s> b <") == ParsedDelta("<tools> b ")
    assert parser.finish() == ParsedDelta("<") and not parser.called


def test_stream_cut_off_after_the_name_went_out_does_not_finish_as_tool_calls() -> None:
    text = 'Sure. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa'
    deltas, parser = run("hermes", [text], streaming=True)
    assert fold(deltas)[1][0]["name"] == "get_weather"
    assert not parser.called  # finish_reason stays length: the half-written call is not a call


def test_cut_off_second_block_is_not_a_call() -> None:
    text = PARIS + '<tool_call>\n{"name": "get_time", "argu'
    assert [c["name"] for c in non_stream(text)[1]] == ["get_weather"]
    deltas, parser = run("hermes", [text], streaming=True)
    assert [c["name"] for c in fold(deltas)[1]] == ["get_weather", "get_time"]
    assert not parser.called  # the stream already promised a second call, which never came: length, not tool_calls
    deltas, parser = run("hermes", [PARIS + "<tool_call>\n"], streaming=True)
    assert [c["name"] for c in fold(deltas)[1]] == ["get_weather"] and parser.called


def test_stream_cut_off_before_the_name_is_plain_content() -> None:
    text = 'Sure. <tool_call>\n{"na'
    deltas, parser = run("hermes", [text], streaming=True)
    assert fold(deltas) == (text, []) and not parser.called


def test_stream_block_malformed_when_it_closes_finishes_as_stop() -> None:
    text = '<tool_call>{"name": "f", "arguments": {"a": 1}, }</tool_call> more'
    deltas, parser = run("hermes", [text], streaming=True)
    assert fold(deltas)[1][0]["name"] == "f"  # sent before it could be known to be malformed (§8.5)
    assert not parser.called


def test_string_arguments_stream_as_the_string_itself() -> None:
    text = '<tool_call>{"name": "f", "arguments": "{\\"x\\": \\"é\\"}"}</tool_call>'
    deltas, parser = run("hermes", list(text), streaming=True)
    assert fold(deltas)[1][0]["arguments"] == '{"x": "é"}' and parser.called


def test_empty_object_is_sent_as_one_fragment() -> None:
    deltas, _ = run("hermes", list('<tool_call>{"name": "now", "arguments": {  }}</tool_call>'), streaming=True)
    assert [e.arguments for d in deltas for e in d.tool_calls if e.arguments] == ["{}"]


def test_non_stream_arguments_use_default_separators() -> None:
    text = '<tool_call>{"name":"f","arguments":{"a":[1,2],"b":{"c":"d"}}}</tool_call>'
    assert non_stream(text)[1][0]["arguments"] == '{"a": [1, 2], "b": {"c": "d"}}'


def test_ids_come_from_the_factory_and_the_default_looks_like_openai() -> None:
    ids = iter(["call_a", "call_b"])
    parser = make_parser("qwen3", streaming=False, id_factory=lambda: next(ids))
    parser.feed(PARIS + TOKYO)
    assert [e.id for e in parser.finish().tool_calls] == ["call_a", "call_b"]
    made = {new_call_id() for _ in range(200)}
    assert len(made) == 200 and all(ID.match(i) for i in made)


@pytest.mark.parametrize("name", ["hermes", "qwen3", "qwen3_moe", "qwen2_5"])
def test_aliases_are_the_hermes_parser(name: str) -> None:
    assert non_stream(PARIS, name)[1][0]["name"] == "get_weather"


# ---- ChatGLM3 (§8.6) -------------------------------------------------------------------------------------------

GLM_CALL = 'get_weather\n```python\ntool_call(city="Paris")\n```'
GLM_CALL2 = "get_time\n ```python\ntool_call(tz='Asia/Tokyo', h24=True, hours=[1, -2], opts={'a': None})\n```"

GLM_CASES = [
    ("one call", GLM_CALL, "", [("get_weather", '{"city": "Paris"}')]),
    (
        "two segments",
        GLM_CALL + "<|assistant|>" + GLM_CALL2,
        "",
        [
            ("get_weather", '{"city": "Paris"}'),
            ("get_time", '{"tz": "Asia/Tokyo", "h24": true, "hours": [1, -2], "opts": {"a": null}}'),
        ],
    ),
    ("leading marker", "<|assistant|>" + GLM_CALL, "", [("get_weather", '{"city": "Paris"}')]),
    ("no arguments", "now\n```python\ntool_call()\n```", "", [("now", "{}")]),
    (
        "stops at the first segment that is not a call",
        GLM_CALL + "<|assistant|>\nIt is sunny." + "<|assistant|>" + GLM_CALL2,
        "",
        [("get_weather", '{"city": "Paris"}')],
    ),
    ("plain answer", "\nThe answer is 4.", "\nThe answer is 4.", []),
    (
        "not literal",
        'f\n```python\ntool_call(city=input("x"))\n```',
        'f\n```python\ntool_call(city=input("x"))\n```',
        [],
    ),
    ("positional argument", 'f\n```python\ntool_call("Paris")\n```', 'f\n```python\ntool_call("Paris")\n```', []),
    ("other function", 'f\n```python\nprint(city="x")\n```', 'f\n```python\nprint(city="x")\n```', []),
    ("set is not JSON", "f\n```python\ntool_call(a={1})\n```", "f\n```python\ntool_call(a={1})\n```", []),
    ("no fence", 'f\ntool_call(city="x")', 'f\ntool_call(city="x")', []),
    ("unicode", '查询天气\n```python\ntool_call(城市="北京")\n```', "", [("查询天气", '{"城市": "北京"}')]),
]


@pytest.mark.parametrize(("text", "content", "calls"), [c[1:] for c in GLM_CASES], ids=[c[0] for c in GLM_CASES])
@pytest.mark.parametrize("streaming", [False, True])
def test_chatglm3_is_buffered_and_emitted_at_the_end(text: str, content: str, calls: list, streaming: bool) -> None:
    deltas, parser = run("chatglm3", list(text), streaming=streaming)
    assert not any(deltas[:-1])
    last = deltas[-1]
    assert (last.content, [(e.name, e.arguments) for e in last.tool_calls]) == (content, calls)
    assert all(ID.match(e.id or "") for e in last.tool_calls)
    assert parser.called == bool(calls)


# ---- selection (§8.1) ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "template", "model_type", "specials", "expected"),
    [
        ("auto", "...<tool_call>\n{...}\n</tool_call>...", "qwen3", set(), "hermes"),
        ("auto", "{{ messages }}", "qwen3", {"<tool_call>"}, None),  # the template decides, not the vocabulary
        ("auto", None, "chatglm", {"<|observation|>", "<|assistant|>"}, "chatglm3"),
        ("auto", "[gMASK]<sop>{{ messages }}", "ChatGLM", {"<|observation|>"}, "chatglm3"),
        ("auto", None, "chatglm", {"<|assistant|>"}, None),
        ("auto", None, "llama", {"<|observation|>"}, None),
        ("auto", None, None, set(), None),
        ("none", "<tool_call>", "qwen3", set(), None),
        ("hermes", None, None, set(), "hermes"),
        ("qwen3_moe", None, None, set(), "hermes"),
        ("qwen2_5", None, None, set(), "hermes"),
        ("chatglm3", None, "qwen3", set(), "chatglm3"),
    ],
)
def test_select_parser(setting: str, template: str | None, model_type: str | None, specials: set, expected) -> None:
    assert select_parser(setting, template, model_type, specials) == expected


def test_unknown_parser_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown tool-call parser"):
        select_parser("mistral", None, None, set())
    with pytest.raises(ValueError):
        make_parser("nope", streaming=True)


def test_every_registered_parser_folds_to_its_non_stream_result() -> None:
    texts = [c[1] for c in VALID + GLM_CASES]
    for name, text in itertools.product(["hermes", "chatglm3"], texts):
        stream_content, stream_calls = fold(run(name, [text], streaming=True)[0])
        content, calls, _ = non_stream(text, name)
        assert stream_content == content
        assert [(c["name"], json.loads(c["arguments"])) for c in stream_calls] == [
            (c["name"], json.loads(c["arguments"])) for c in calls
        ]
