"""The Grid tab (issue 21, point 4): a prompt set against several columns, graded, on the page; the notebooks drive
the same module (playground/client/grid.py).

The prompt set is JSONL or CSV, typed or uploaded; each column is a JSON object of request fields with an optional
`name`, `url` (a remote backend, allowed as the Backend tab allows it: `--remote-backend-urls` on a public bind),
`model`, `api_key` and `system`. The embedded engine's cells go through the page's own request policy as this
browser's requests, with the API's limits; at most GRID_CONCURRENCY at once and MAX_CELLS a run. The tab shows a
progress bar while the grid runs (Cancel ends the cells not started), then the summary per column and a table of
the cells, with CSV and JSON downloads; a saved JSON re-opens.
"""

from __future__ import annotations

import asyncio
import html
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from playground.client import grid
from playground.page.chat import ChatHandlers
from playground.page.i18n import labels, say, t
from playground.page.persist import READ_UPLOAD
from playground.page.session import Session, caller
from playground.page.tabs.backend_panel import REMOTE, chosen_backend

# The labels this module shows, translated in the browser (playground/page/i18n.py `t`).
TEXTS = labels(
    __name__,
    {
        "tab_grid": ("▦ Grid", "▦ 网格"),
        "grid_help": (
            "Many prompts against several columns, graded: a prompt set (JSONL or CSV: `user` text with "
            "`{{variables}}` from the row, or `messages`; optional `system` and `expected`), columns of request "
            "fields (optional `name`, and `url`, `model`, `api_key` for a remote server), graders. The same "
            "module runs in the notebooks (`playground/client/grid.py`).",
            "多个提示对多列设置并评分：提示集（JSONL 或 CSV：带 `{{variables}}` 变量的 `user` 文本，或 `messages`；可选 "
            "`system` 与 `expected`）、由请求字段组成的列（可选 `name`，以及远程服务器的 `url`、`model`、"
            "`api_key`）、评分器。notebook 使用同一模块（`playground/client/grid.py`）。",
        ),
        "grid_prompts": ("Prompt set (JSONL or CSV)", "提示集（JSONL 或 CSV）"),
        "grid_columns": ("Columns (JSON array)", "列（JSON 数组）"),
        "grid_graders": ("Graders", "评分器"),
        "grader_exact": ("exact match", "完全匹配"),
        "grader_contains": ("contains the expected answer", "包含期望答案"),
        "grader_regex": ("matches the expected answer as a regex", "按正则匹配期望答案"),
        "grader_valid_json": ("valid JSON", "有效的 JSON"),
        "grid_run": ("▶ Run grid", "▶ 运行网格"),
        "grid_cancel": ("Cancel", "取消"),
        "grid_reopen": ("Open a saved grid", "打开保存的网格"),
        "grid_csv": ("⬇ CSV", "⬇ 导出 CSV"),
        "grid_json": ("⬇ JSON", "⬇ 导出 JSON"),
    },
)

GRID_CONCURRENCY = 8  # under the per-client default (32) and the engine's batch, with room for the chat
MAX_CELLS = 400
MAX_COLUMNS = 6
TICK_S = 0.3

EXAMPLE_PROMPTS = "\n".join(
    json.dumps(r, ensure_ascii=False)
    for r in [
        {
            "user": "What is the capital of {{country}}? Answer with the city only.",
            "country": "France",
            "expected": "Paris",
        },
        {
            "user": "What is the capital of {{country}}? Answer with the city only.",
            "country": "Japan",
            "expected": "Tokyo",
        },
        {"user": "What is two plus two?", "expected": "4|four"},
        {"user": 'Reply with a JSON object with a key "ok" set to true.'},
    ]
)
EXAMPLE_COLUMNS = json.dumps(
    [
        {"name": "greedy", "temperature": 0, "max_tokens": 24},
        {"name": "creative", "temperature": 1.0, "seed": 1, "max_tokens": 24},
    ],
    indent=1,
)

RUNNING = ("Running: {done} of {total} cells", "运行中：{done} / {total} 个单元格")
FINISHED = ("{n} cells in {s:.1f} s", "{n} 个单元格，用时 {s:.1f} 秒")
CANCELLED = ("Cancelled: {n} cells not run", "已取消：{n} 个单元格未运行")
NO_COLUMNS = (
    "Columns must be a JSON array of objects (request fields, with an optional name and url).",
    "列必须是对象组成的 JSON 数组（请求字段，可选 name 和 url）。",
)
TOO_MANY = (
    "{cells} cells is more than a page's grid takes ({max}); use the notebook for bigger sets.",
    "{cells} 个单元格超过页面网格的上限（{max}）；更大的集合请用 notebook。",
)
TOO_MANY_COLUMNS = ("At most {max} columns.", "最多 {max} 列。")
NOT_A_GRID = ("Not a saved grid: {why}", "不是保存的网格：{why}")
HEADS = {
    "column": ("column", "列"),
    "pass_rate": ("pass rate", "通过率"),
    "median_ttft_ms": ("median TTFT", "TTFT 中位数"),
    "median_tokens_per_s": ("median tok/s", "tok/s 中位数"),
    "total_tokens": ("tokens", "token 数"),
    "errors": ("errors", "错误"),
}
PROMPT_HEAD = ("prompt", "提示")
EXPECTED_HEAD = ("expected", "期望")


@dataclass
class GridTab:
    prompts: gr.Code
    columns: gr.Code
    graders: gr.CheckboxGroup
    run: gr.Button
    cancel: gr.Button
    progress: gr.HTML
    result: gr.HTML
    csv: gr.DownloadButton
    json: gr.DownloadButton
    reopen: gr.UploadButton

    def wire(self, h: ChatHandlers, session: gr.State) -> None:
        handlers = GridHandlers(h)
        outs = [self.progress, self.result, self.csv, self.json]
        self.run.click(
            handlers.run,
            [self.prompts, self.columns, self.graders, session],
            outs,
            api_name="grid",
            concurrency_id="grid",
            concurrency_limit=4,
            show_progress="hidden",
        )
        self.cancel.click(handlers.cancel, session, None, api_name=False, queue=False)  # type: ignore[arg-type]
        # The browser reads the file it uploaded; the server gets its text, never a path (playground/page/persist.py).
        text = gr.Textbox(visible="hidden")
        read = self.reopen.upload(None, self.reopen, text, js=READ_UPLOAD, api_name=False, queue=False)  # type: ignore[arg-type]
        read.then(handlers.reopen, [text, session], outs, api_name=False)


def grid_tab() -> GridTab:
    gr.Markdown(t("grid_help"))
    prompts = gr.Code(EXAMPLE_PROMPTS, language="json", label=t("grid_prompts"), lines=6, elem_id="pg-grid-prompts")
    columns = gr.Code(EXAMPLE_COLUMNS, language="json", label=t("grid_columns"), lines=5, elem_id="pg-grid-columns")
    graders = gr.CheckboxGroup(
        [(t("grader_" + k), k) for k in ("exact", "contains", "regex", "valid_json")],
        value=["contains"],
        label=t("grid_graders"),
        elem_id="pg-grid-graders",
    )
    with gr.Row():
        run = gr.Button(t("grid_run"), variant="primary", size="sm", elem_id="pg-grid-run")
        cancel = gr.Button(t("grid_cancel"), size="sm", elem_id="pg-grid-cancel")
        reopen = gr.UploadButton(t("grid_reopen"), file_types=[".json"], size="sm", elem_id="pg-grid-reopen")  # type: ignore[arg-type]
    progress = gr.HTML("", elem_id="pg-grid-progress")
    result = gr.HTML("", elem_id="pg-grid-result")
    with gr.Row():
        csv_file = gr.DownloadButton(t("grid_csv"), visible=False, size="sm", elem_id="pg-grid-csv")  # type: ignore[arg-type]
        json_file = gr.DownloadButton(t("grid_json"), visible=False, size="sm", elem_id="pg-grid-json")  # type: ignore[arg-type]
    return GridTab(prompts, columns, graders, run, cancel, progress, result, csv_file, json_file, reopen)


def bar_html(done: int, total: int, line: str) -> str:
    share = done / total if total else 1.0
    return (
        f'<div class="pg-progress" title="{share:.0%}"><span class="pg-progress-done" style="width:{share:.1%}">'
        f'</span></div><div class="pg-note pg-progress-note">{html.escape(line)}</div>'
    )


def _num(v: Any, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def result_html(g: grid.Grid, lang: str) -> str:
    """The summary per column, then one row per prompt with each column's reply and its grades."""
    heads = "".join(f"<th>{say(HEADS[k], lang)}</th>" for k in HEADS)
    rows = "".join(
        f"<tr><td>{html.escape(s['column'])}</td><td>{_num(s['pass_rate'], '.0%')}</td>"
        f"<td>{_num(s['median_ttft_ms'], '.0f')} ms</td><td>{_num(s['median_tokens_per_s'], '.1f')}</td>"
        f"<td>{s['total_tokens']:,}</td><td>{s['errors']}</td></tr>"
        for s in g.summary()
    )
    summary = f'<table class="pg-grid-summary"><tr>{heads}</tr>{rows}</table>'
    cols = "".join(f"<th>{html.escape(c)}</th>" for c in g.columns)
    body = []
    for i, p in enumerate(g.prompts):
        cells = []
        for name in g.columns:
            c = g.cell(i, name)
            mark = {True: "pg-pass", False: "pg-fail", None: ""}[c.passed]
            badges = " ".join(
                f'<span class="pg-grade {"pg-pass" if v else "pg-fail"}" title="{html.escape(k)}">'
                f"{'✓' if v else '✗'} {html.escape(k)}</span>"
                for k, v in c.grades.items()
                if v is not None
            )
            text = html.escape(c.error) if c.error else html.escape(c.reply[:300])
            timing = f'<span class="pg-note">{_num(c.ttft_ms, ".0f")} ms · {c.completion_tokens} tok</span>'
            cells.append(f'<td class="{mark}"><div class="pg-grid-reply">{text}</div>{badges} {timing}</td>')
        expected = html.escape(p.expected) if p.expected else "–"
        body.append(
            f"<tr><td>{html.escape(p.title)}<div class='pg-note'>{say(EXPECTED_HEAD, lang)}: {expected}"
            f"</div></td>{''.join(cells)}</tr>"
        )
    table = f'<table class="pg-grid-cells"><tr><th>{say(PROMPT_HEAD, lang)}</th>{cols}</tr>{"".join(body)}</table>'
    return summary + table


class GridHandlers:
    def __init__(self, h: ChatHandlers) -> None:
        self.h = h

    async def columns(self, text: str, session: Session) -> list[grid.Column]:
        try:
            specs = json.loads(text or "[]")
        except json.JSONDecodeError as exc:
            raise ValueError(f"{say(NO_COLUMNS, session.lang)} ({exc.msg})") from None
        if not isinstance(specs, list) or not specs or not all(isinstance(s, dict) for s in specs):
            raise ValueError(say(NO_COLUMNS, session.lang))
        if len(specs) > MAX_COLUMNS:
            raise ValueError(say(TOO_MANY_COLUMNS, session.lang, max=MAX_COLUMNS))
        out = []
        for i, spec in enumerate(specs):
            params = dict(spec)
            name = str(params.pop("name", None) or f"column {i + 1}")
            url, model, key = params.pop("url", None), params.pop("model", None), params.pop("api_key", None)
            if url:
                backend = await chosen_backend(
                    REMOTE, str(url), str(key or ""), str(model or ""), self.h.page, session.lang
                )
            else:
                backend = self.h.local(session)
                if model:
                    params["model"] = model
            out.append(grid.Column(name, backend, params))  # type: ignore[arg-type]
        return out

    async def run(
        self, prompts_text: str, columns_text: str, graders: list[str], session: Session, request: gr.Request
    ) -> Any:
        lang = session.lang
        hidden = (gr.update(visible=False), gr.update(visible=False))
        try:
            rows = grid.load_prompt_set(prompts_text or "")
            columns = await self.columns(columns_text, session)
        except (ValueError, grid.PromptSetError, OSError) as exc:
            yield ("", f'<div class="pg-note">⚠️ {html.escape(str(exc))}</div>', *hidden)
            return
        except Exception as exc:  # a remote server that cannot be reached: its error, not a crash
            yield ("", f'<div class="pg-note">⚠️ {html.escape(type(exc).__name__ + ": " + str(exc))}</div>', *hidden)
            return
        total = len(rows) * len(columns)
        if total > MAX_CELLS:
            yield ("", f'<div class="pg-note">⚠️ {say(TOO_MANY, lang, cells=total, max=MAX_CELLS)}</div>', *hidden)
            return
        chosen = [grid.GRADERS[g] for g in graders or [] if g in grid.GRADERS]
        done = [0]
        cancel = session.grid_cancel = asyncio.Event()
        loop = asyncio.get_running_loop()
        began = loop.time()
        task = asyncio.ensure_future(
            grid.arun_grid(
                rows,
                columns,
                chosen,
                concurrency=GRID_CONCURRENCY,
                cancel=cancel,
                ctx=caller(request, "grid", self.h.policy),
                on_progress=lambda n, _total: done.__setitem__(0, n),
            )
        )
        try:
            while not task.done():
                yield (bar_html(done[0], total, say(RUNNING, lang, done=done[0], total=total)), gr.skip(), *hidden)
                await asyncio.wait([task], timeout=TICK_S)
            result = task.result()
        finally:
            if not task.done():  # the page went away: the cells not started are not started
                cancel.set()
            session.grid_cancel = None
        skipped = sum(c.error == "cancelled" for c in result.cells)
        line = say(CANCELLED, lang, n=skipped) if skipped else say(FINISHED, lang, n=total, s=loop.time() - began)
        folder = Path(tempfile.mkdtemp(prefix="playground-grid-"))
        (folder / "grid.csv").write_text(result.to_csv(), encoding="utf-8")
        (folder / "grid.json").write_text(result.to_json(), encoding="utf-8")
        yield (
            bar_html(total - skipped, total, line),
            result_html(result, lang),
            gr.update(value=str(folder / "grid.csv"), visible=True),
            gr.update(value=str(folder / "grid.json"), visible=True),
        )

    @staticmethod
    def cancel(session: Session) -> None:
        if session.grid_cancel is not None:
            session.grid_cancel.set()

    @staticmethod
    def reopen(text: str, session: Session) -> Any:
        """A saved grid's JSON text (the browser read the uploaded file) back into the tab."""
        if not text:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip()
        try:
            g = grid.Grid.from_json(text)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return (
                "",
                f'<div class="pg-note">⚠️ {say(NOT_A_GRID, session.lang, why=html.escape(str(exc)))}</div>',
                gr.update(visible=False),
                gr.update(visible=False),
            )
        return "", result_html(g, session.lang), gr.update(visible=False), gr.update(visible=False)
