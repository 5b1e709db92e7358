"""Prompt sets and graded grids (issue 21, points 1 and 2): 8 prompts x 3 columns on the bundled model (two settings
of the embedded engine, and this same server reached by URL), graded, summarised, exported and re-opened; prompt
sets from JSONL and CSV with variables; the progress callback and cancel."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from typing import Any

import pytest

from playground.client import grid
from playground.client.backend import LocalBackend
from playground.client.remote import RemoteBackend

JSONL = "\n".join(
    json.dumps(r)
    for r in [
        {
            "user": "What is the capital of {{country}}? Answer with the city only.",
            "country": "France",
            "expected": "Paris",
        },
        {
            "user": "What is the capital of {{country}}? Answer with the city only.",
            "country": "Italy",
            "expected": "Rome",
        },
        {"user": "Name one colour of the sky.", "expected": "blue"},
        {"user": "Count from one to three in words.", "expected": "two"},
        {"system": "You reply in English.", "user": "Say hello.", "expected": "hello"},
        {"messages": [{"role": "user", "content": "Write the number {{n}} in digits."}], "n": "seven", "expected": "7"},
        {"user": 'Reply with a JSON object with a key "a" set to 1.'},
        {"user": "What is two plus two?", "expected": "4|four"},
    ]
)
GRADERS = [
    grid.GRADERS["contains"],
    grid.regex(),
    grid.GRADERS["valid_json"],
    grid.length(1, 400),
    grid.custom(lambda reply: not reply.isupper(), "not shouting"),
]


@pytest.fixture(scope="module")
def ran(service: Any, live: Any) -> grid.Grid:
    here, there = LocalBackend(service), RemoteBackend(live.url + "/v1")
    columns = [
        grid.Column("greedy", here, {"temperature": 0, "max_tokens": 16}),
        grid.Column("one word", here, {"temperature": 0, "max_tokens": 16, "system": "Answer in one word."}),
        grid.Column("by URL", there, {"temperature": 0, "max_tokens": 16}),
    ]
    seen: list[tuple[int, int]] = []
    out = grid.run_grid(
        grid.load_prompt_set(JSONL),
        columns,
        GRADERS,
        concurrency=6,
        on_progress=lambda done, total: seen.append((done, total)),
    )
    assert seen[-1] == (24, 24) and [d for d, _ in seen] == list(range(1, 25))
    return out


def test_every_cell_is_run_and_graded(ran: grid.Grid) -> None:
    assert len(ran.prompts) == 8 and ran.columns == ["greedy", "one word", "by URL"] and len(ran.cells) == 24
    for c in ran.cells:
        assert c.error is None and c.reply and c.completion_tokens > 0 and c.ttft_ms is not None
        assert set(c.grades) == {"contains", "regex", "valid_json", "length 1..400", "not shouting"}
        expected = ran.prompts[c.prompt].expected
        assert (c.grades["contains"] is None) == (expected is None)
        if expected is not None:
            assert c.grades["contains"] == (expected.lower() in c.reply.lower())
    # The embedded engine greedy, in-process and by URL: the same replies; the system prompt changes some.
    for i in range(8):
        assert ran.cell(i, "greedy").reply == ran.cell(i, "by URL").reply
    assert any(ran.cell(i, "greedy").reply != ran.cell(i, "one word").reply for i in range(8))
    assert ran.prompts[0].messages[-1]["content"].startswith("What is the capital of France?")
    assert ran.prompts[4].messages[0] == {"role": "system", "content": "You reply in English."}


def test_the_summary_row_per_column(ran: grid.Grid) -> None:
    rows = {r["column"]: r for r in ran.summary()}
    assert set(rows) == {"greedy", "one word", "by URL"}
    for name, r in rows.items():
        cells = [c for c in ran.cells if c.column == name]
        passed = [c.passed for c in cells if c.passed is not None]
        assert r["pass_rate"] == sum(passed) / len(passed) and r["errors"] == 0 and r["cells"] == 8
        assert r["median_ttft_ms"] > 0 and r["total_tokens"] == sum(
            c.completion_tokens + c.prompt_tokens for c in cells
        )
    assert rows["greedy"]["pass_rate"] == rows["by URL"]["pass_rate"]


def test_csv_and_json_export_and_a_saved_grid_reopens(ran: grid.Grid) -> None:
    table = list(csv.DictReader(io.StringIO(ran.to_csv())))
    assert len(table) == 24 and {"column", "reply", "ttft_ms", "grade:contains", "passed"} <= set(table[0])
    again = grid.Grid.from_json(ran.to_json())
    assert again.rows() == ran.rows() and again.summary() == ran.summary()
    assert again.settings["by URL"]["backend"].startswith("http://")
    with pytest.raises(ValueError, match="not a saved grid"):
        grid.Grid.from_json('{"format": "other"}')


def test_prompt_sets_from_csv_and_their_errors() -> None:
    rows = grid.load_prompt_set("user,city,expected\nWhere is {{city}}?,Lyon,France\n", fmt="csv")
    assert rows[0].messages == [{"role": "user", "content": "Where is Lyon?"}] and rows[0].expected == "France"
    with pytest.raises(grid.PromptSetError, match=r"line 2: no value for \{\{city\}\}"):
        grid.load_prompt_set('{"user": "x"}\n{"user": "Where is {{city}}?"}')
    with pytest.raises(grid.PromptSetError, match="line 1: not valid JSON"):
        grid.load_prompt_set("{nope")
    with pytest.raises(grid.PromptSetError, match="needs `messages`"):
        grid.load_prompt_set('{"expected": "x"}')
    with pytest.raises(grid.PromptSetError, match="no rows"):
        grid.load_prompt_set("", fmt="jsonl")


def test_graders_on_their_own() -> None:
    schema = grid.json_schema({"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}})
    assert schema('{"a": 1}', None) and not schema('{"a": "x"}', None) and not schema("no", None)
    assert schema('```json\n{"a": 2}\n```', None)  # a fenced block is still a JSON answer
    assert grid.exact(" Paris ", "Paris") and grid.exact("Paris.", "Paris") is False and grid.exact("x", None) is None
    assert grid.regex(r"^\d+$")("42", None) and grid.regex()("four", "4|four")
    assert grid.length(2, 3)("abc", None) and not grid.length(2, 3)("abcd", None)
    boom = grid.custom(lambda reply, expected: 1 / 0, "boom")
    assert boom("x", None) is False  # a custom grader that raises fails its cell, not the grid


def test_cancel_ends_the_cells_not_started(service: Any) -> None:
    here = LocalBackend(service)
    rows = grid.load_prompt_set([{"user": f"Say {w}."} for w in ("one", "two", "three", "four", "five", "six")])
    stop = asyncio.Event()

    def progress(done: int, total: int) -> None:
        if done == 1:
            stop.set()

    out = grid.run_grid(
        rows, [grid.Column("a", here, {"max_tokens": 4})], concurrency=1, on_progress=progress, cancel=stop
    )
    errors = [c.error for c in out.cells]
    assert errors[0] is None and errors[1:] == ["cancelled"] * 5
