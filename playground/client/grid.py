"""Prompt sets and graded grids (issue 21, points 1 and 2): many prompts against several columns, each a backend +
model + settings, every cell graded; the page's Grid tab and the notebooks drive this one module.

- A **prompt set** is JSONL (one object a line: `messages`, or a `user` text, with `{{variables}}` filled from the
  row's other keys, an optional `system` and `expected`) or CSV (a `user` or `prompt` column, `expected`, the rest
  variables); `load_prompt_set` reads either, from text or a file.
- A **column** is a backend (the embedded engine, or any OpenAI-compatible server by URL) and request fields.
- Cells run through the one request runner of grids and sweeps (`playground/client/batch.py` `arun`): each through
  its backend's normal path (the embedded engine's policy, as the API's requests), at most `concurrency` at once,
  with a progress callback and a cancel event.
- **Graders** check a cell's reply: exact, contains and regex against the expected answer, valid JSON, JSON-schema
  validity (jsonschema), length bounds, or any Python function `(reply, expected) -> bool`. A grade is None where it
  does not apply (no expected answer).
- A **Grid** holds the cells (reply, TTFT, tokens/s, tokens, grades, error) and answers a summary row per column
  (pass rate, median TTFT, median tokens/s, total tokens); it exports to CSV and JSON, and a saved JSON re-opens.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from playground.client.backend import ChatBackend, run_sync
from playground.client.batch import arun
from playground.client.result import ChatResult

VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
RESERVED = {"messages", "user", "prompt", "system", "expected"}
MAX_PROMPTS = 1000  # a prompt set bigger than this is a benchmark, not a grid: refused with a clear message


class PromptSetError(ValueError):
    """A prompt set that cannot be read: the row and the reason."""


@dataclass
class PromptRow:
    messages: list[dict[str, Any]]
    expected: str | None = None
    variables: dict[str, Any] = field(default_factory=dict)

    @property
    def title(self) -> str:
        text = next((m.get("content") for m in reversed(self.messages) if m.get("role") == "user"), "")
        return str(text)[:80]


def fill(template: str, values: dict[str, Any], where: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise PromptSetError(f"{where}: no value for {{{{{m.group(1)}}}}}")
        return str(values[m.group(1)])

    return VARIABLE.sub(one, template)


def row_of(obj: dict[str, Any], where: str) -> PromptRow:
    if not isinstance(obj, dict):
        raise PromptSetError(f"{where}: expected an object, got {type(obj).__name__}")
    values = {k: v for k, v in obj.items() if k not in RESERVED}
    expected = obj.get("expected")
    expected = None if expected in (None, "") else fill(str(expected), values, where)
    if "messages" in obj:
        messages = obj["messages"]
        if not isinstance(messages, list) or not messages:
            raise PromptSetError(f"{where}: messages must be a non-empty array")
        out = [
            {**m, "content": fill(m["content"], values, where)} if isinstance(m.get("content"), str) else m
            for m in messages
        ]
        return PromptRow(out, expected, values)
    text = obj.get("user", obj.get("prompt"))
    if not isinstance(text, str) or not text.strip():
        raise PromptSetError(f"{where}: needs `messages`, or a `user` (or `prompt`) text")
    messages = [{"role": "user", "content": fill(text, values, where)}]
    if obj.get("system"):
        messages.insert(0, {"role": "system", "content": fill(str(obj["system"]), values, where)})
    return PromptRow(messages, expected, values)


def load_prompt_set(source: str | Path | Iterable[dict[str, Any]], fmt: str | None = None) -> list[PromptRow]:
    """Rows from JSONL or CSV text, a file path (the suffix says which), or a list of row objects."""
    if not isinstance(source, (str, Path)):
        rows = [row_of(obj, f"row {i + 1}") for i, obj in enumerate(source)]
        return _bounded(rows)
    text = str(source)
    if isinstance(source, Path) or (len(text) < 4096 and "\n" not in text and Path(text).is_file()):
        path = Path(source)
        fmt = fmt or path.suffix.lstrip(".").lower()
        text = path.read_text(encoding="utf-8")
    fmt = fmt or ("jsonl" if text.lstrip().startswith(("{", "[")) else "csv")
    if fmt == "csv":
        reader = csv.DictReader(io.StringIO(text))
        rows = [row_of(dict(r), f"line {i + 2}") for i, r in enumerate(reader)]
    elif fmt in ("jsonl", "json"):
        stripped = text.strip()
        if stripped.startswith("["):  # a JSON array of rows is accepted too
            try:
                objs = json.loads(stripped)
            except json.JSONDecodeError as exc:
                raise PromptSetError(f"not valid JSON: {exc.msg} (line {exc.lineno})") from None
            rows = [row_of(o, f"row {i + 1}") for i, o in enumerate(objs)]
        else:
            rows = []
            for i, line in enumerate(text.splitlines()):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise PromptSetError(f"line {i + 1}: not valid JSON ({exc.msg})") from None
                rows.append(row_of(obj, f"line {i + 1}"))
    else:
        raise PromptSetError(f"unknown prompt set format {fmt!r}: use jsonl or csv")
    return _bounded(rows)


def _bounded(rows: list[PromptRow]) -> list[PromptRow]:
    if not rows:
        raise PromptSetError("the prompt set has no rows")
    if len(rows) > MAX_PROMPTS:
        raise PromptSetError(f"the prompt set has {len(rows)} rows; a grid takes at most {MAX_PROMPTS}")
    return rows


# ---- graders ----------------------------------------------------------------------------------------------------
Check = Callable[[str, str | None], bool | None]


@dataclass(frozen=True)
class Grader:
    name: str
    check: Check

    def __call__(self, reply: str, expected: str | None) -> bool | None:
        try:
            return self.check(reply, expected)
        except Exception:  # a custom function that raises fails the cell, not the grid
            return False


def exact(reply: str, expected: str | None) -> bool | None:
    return None if expected is None else reply.strip() == expected.strip()


def contains(reply: str, expected: str | None) -> bool | None:
    return None if expected is None else expected.strip().lower() in reply.lower()


def regex(pattern: str | None = None) -> Grader:
    """The reply matches `pattern`, or (None) the row's expected answer read as a pattern."""

    def check(reply: str, expected: str | None) -> bool | None:
        p = pattern if pattern is not None else expected
        return None if p is None else re.search(p, reply) is not None

    return Grader(f"regex {pattern}" if pattern else "regex", check)


def _json_of(reply: str) -> Any:
    text = reply.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.S)  # a fenced block is still a JSON answer
    return json.loads(fenced.group(1) if fenced else text)


def valid_json(reply: str, expected: str | None = None) -> bool:
    try:
        _json_of(reply)
    except ValueError:
        return False
    return True


def json_schema(schema: dict[str, Any]) -> Grader:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)

    def check(reply: str, expected: str | None) -> bool:
        try:
            return validator.is_valid(_json_of(reply))
        except ValueError:
            return False

    return Grader("json_schema", check)


def length(min_chars: int = 0, max_chars: int | None = None) -> Grader:
    def check(reply: str, expected: str | None) -> bool:
        n = len(reply.strip())
        return n >= min_chars and (max_chars is None or n <= max_chars)

    return Grader(f"length {min_chars}..{'' if max_chars is None else max_chars}", check)


def custom(fn: Callable[..., Any], name: str | None = None) -> Grader:
    """Any Python function of (reply, expected) -> truthy; one of (reply) also works."""

    def check(reply: str, expected: str | None) -> bool:
        try:
            return bool(fn(reply, expected))
        except TypeError:
            return bool(fn(reply))

    return Grader(name or str(getattr(fn, "__name__", "custom")), check)


GRADERS: dict[str, Grader] = {
    "exact": Grader("exact", exact),
    "contains": Grader("contains", contains),
    "regex": regex(),
    "valid_json": Grader("valid_json", valid_json),
}


# ---- the grid ---------------------------------------------------------------------------------------------------
@dataclass
class Column:
    name: str
    backend: ChatBackend
    params: dict[str, Any] = field(default_factory=dict)  # request fields: temperature, max_tokens, system, ...


@dataclass
class Cell:
    prompt: int
    column: str
    reply: str = ""
    ttft_ms: float | None = None
    tokens_per_s: float | None = None
    completion_tokens: int = 0
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    grades: dict[str, bool | None] = field(default_factory=dict)
    error: str | None = None

    @property
    def passed(self) -> bool | None:
        """All applicable grades pass (None: no grade applied)."""
        known = [g for g in self.grades.values() if g is not None]
        return None if not known and self.error is None else (self.error is None and all(known))


@dataclass
class Grid:
    prompts: list[PromptRow]
    columns: list[str]
    cells: list[Cell]
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)  # column -> its backend and request fields

    def cell(self, prompt: int, column: str) -> Cell:
        return next(c for c in self.cells if c.prompt == prompt and c.column == column)

    def summary(self) -> list[dict[str, Any]]:
        out = []
        for name in self.columns:
            cells = [c for c in self.cells if c.column == name]
            graded = [c.passed for c in cells if c.passed is not None]
            ttft = [c.ttft_ms for c in cells if c.ttft_ms is not None]
            tps = [c.tokens_per_s for c in cells if c.tokens_per_s is not None]
            out.append(
                {
                    "column": name,
                    "cells": len(cells),
                    "errors": sum(c.error is not None for c in cells),
                    "pass_rate": sum(graded) / len(graded) if graded else None,
                    "median_ttft_ms": statistics.median(ttft) if ttft else None,
                    "median_tokens_per_s": statistics.median(tps) if tps else None,
                    "total_tokens": sum(c.completion_tokens + (c.prompt_tokens or 0) for c in cells),
                }
            )
        return out

    def rows(self) -> list[dict[str, Any]]:
        """One flat row per cell: the table CSV and DataFrames are made of."""
        out = []
        for c in self.cells:
            row = {
                "prompt": c.prompt,
                "title": self.prompts[c.prompt].title,
                "column": c.column,
                "expected": self.prompts[c.prompt].expected,
                **{k: v for k, v in asdict(c).items() if k not in ("prompt", "column", "grades")},
            }
            row |= {f"grade:{k}": v for k, v in c.grades.items()}
            row["passed"] = c.passed
            out.append(row)
        return out

    def to_csv(self) -> str:
        rows = self.rows()
        keys = list(dict.fromkeys(k for r in rows for k in r))
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue()

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": "llm-playground/grid@1",
                "columns": self.columns,
                "settings": self.settings,
                "prompts": [asdict(p) for p in self.prompts],
                "cells": [asdict(c) for c in self.cells],
                "summary": self.summary(),
            },
            ensure_ascii=False,
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> Grid:
        doc = json.loads(text)
        if doc.get("format") != "llm-playground/grid@1":
            raise ValueError("not a saved grid (format llm-playground/grid@1)")
        return cls(
            [PromptRow(**p) for p in doc["prompts"]],
            list(doc["columns"]),
            [Cell(**c) for c in doc["cells"]],
            dict(doc.get("settings") or {}),
        )

    def frame(self) -> Any:
        """The cells as a DataFrame (pandas: the notebooks' table)."""
        import pandas as pd

        return pd.DataFrame(self.rows())

    def summary_frame(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.summary())

    def plot(self) -> Any:
        """Each column's pass rate, and its distribution of time to first token (matplotlib, for notebooks)."""
        import matplotlib.pyplot as plt

        summary = self.summary()
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
        left.bar([s["column"] for s in summary], [s["pass_rate"] or 0 for s in summary])
        left.set_ylim(0, 1)
        left.set_title("pass rate")
        ttft = [[c.ttft_ms for c in self.cells if c.column == name and c.ttft_ms is not None] for name in self.columns]
        right.boxplot(ttft, tick_labels=self.columns)
        right.set_title("time to first token (ms)")
        fig.tight_layout()
        plt.close(fig)  # shown once, as the cell's value, not again by the inline backend
        return fig


def _cell(prompt: int, column: str, row: PromptRow, result: ChatResult | str, graders: list[Grader]) -> Cell:
    if isinstance(result, str):
        return Cell(prompt, column, error=result)
    s = result.stats()
    cell = Cell(
        prompt,
        column,
        result.reply,
        s["ttft_ms"],
        s["tokens_per_s"],
        result.completion_tokens,
        s["prompt_tokens"],
        result.finish_reason,
    )
    cell.grades = {g.name: g(result.reply, row.expected) for g in graders}
    return cell


async def arun_grid(
    prompts: list[PromptRow],
    columns: list[Column],
    graders: Iterable[Grader] = (),
    *,
    concurrency: int = 8,
    on_progress: Callable[[int, int], None] | None = None,
    cancel: asyncio.Event | None = None,
    ctx: Any = None,
) -> Grid:
    """Every prompt in every column, at most `concurrency` requests at once; `on_progress(done, total)` after each
    cell; once `cancel` is set, the cells not started yet end as "cancelled". `ctx`: who asks (the page's caller,
    for the embedded policy's per-client limit, metrics and access line; None: a notebook)."""
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        raise ValueError(f"column names must differ, got {names}")
    graders = list(graders)
    jobs = []
    for row in prompts:
        for col in columns:
            params = dict(col.params)
            system = params.pop("system", None)
            messages = ([{"role": "system", "content": system}] if system else []) + row.messages
            jobs.append((col.backend, messages, params))
    results = await arun(jobs, concurrency=concurrency, on_done=on_progress, cancel=cancel, ctx=ctx)
    cells = []
    for k, result in enumerate(results):
        i, j = divmod(k, len(columns))
        cells.append(_cell(i, columns[j].name, prompts[i], result, graders))
    settings = {c.name: {"backend": c.backend.url or "embedded", "model": c.backend.model, **c.params} for c in columns}
    return Grid(prompts, names, cells, settings)


def run_grid(prompts: list[PromptRow], columns: list[Column], graders: Iterable[Grader] = (), **kw: Any) -> Grid:
    return run_sync(arun_grid(prompts, columns, graders, **kw))
