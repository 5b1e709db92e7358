"""The Server tab (issue 19): the embedded engine's live state (KV pages in use, prefix-cache blocks and hit rate,
running and queued requests), refreshed every two seconds while the tab is open, and a button that empties the
prefix cache.

The numbers are the engine's cheap snapshot, the one `GET /server/state` and /metrics read (the service through
the page's request policy). The tab's Timer lives inside the tab, and Gradio mounts a tab's children only while
it is the selected one, so a page whose Server tab is not open asks nothing. The reset follows
`POST /reset_prefix_cache`'s rule: open when the server has no credentials at all; once it has any, it takes an
admin key (`--admin-keys`), typed here. A remote backend's state is not this page's to read.

Under the numbers, the scheduler x-ray server-wide (issue 19, point 6): the engine's steps of the last
STEPS_WINDOW_S seconds as a strip, rows per step above and each step's share of the memory-bandwidth limit below,
from the engine's step log (engine/core/step_log.py) through the service, the records `GET /server/steps` lists.
A remote backend that is another instance of this app answers that route, and its strip is drawn from it; any
other backend does not ("not available from this backend")."""

from __future__ import annotations

import html
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr
import httpx

from engine.serving.operations import NoAdminKey, NotAdmin, ServerOperations
from engine.serving.policy import RequestPolicy
from engine.serving.rights import admin_needed
from playground.page.i18n import labels, say, t
from playground.page.session import Session

# The labels this module shows, translated in the browser (playground/page/i18n.py `t`).
TEXTS = labels(
    __name__,
    {
        "tab_server": ("▭ Server", "▭ 服务器"),
        "server_help": (
            "The embedded engine's live state, refreshed every two seconds while this tab is open: the same numbers as "
            "`GET /server/state` and `/metrics`.",
            "内置引擎的实时状态，本标签页打开时每两秒刷新一次：与 `GET /server/state` 和 `/metrics` 的数字相同。",
        ),
        "admin_key": ("admin key", "管理员密钥"),
        "admin_key_help": (
            "This server has credentials: resetting the prefix cache takes one of its admin keys.",
            "此服务器配置了凭据：清空前缀缓存需要它的一个管理员密钥。",
        ),
        "reset_prefix_cache": ("⌫ Reset prefix cache", "⌫ 清空前缀缓存"),
    },
)

TICK_S = 2.0
STEPS_WINDOW_S = 30.0  # the strip's reach back (the step log holds minutes on a CPU: engine/core/step_log.py)
STRIP_BINS = 150  # the strip's columns: 0.2 s each, however many steps ran (one rect per column, not per step)
REMOTE_TIMEOUT_S = 5.0

LOADING = ("The model is loading…", "模型加载中…")
REMOTE = (
    "Not available from this backend: the Server tab shows the embedded engine's state, and this session "
    "answers with a remote server (see the Backend tab).",
    "此后端不提供：服务器标签页显示的是内置引擎的状态，而本会话由远程服务器回答（见“后端”标签页）。",
)
DONE = ("✓ Prefix cache emptied: {blocks} blocks dropped.", "✓ 前缀缓存已清空：丢弃了 {blocks} 个块。")
NO_CACHE = (
    "This server runs without a prefix cache (`--prefix-cache-tokens 0`).",
    "此服务器未启用前缀缓存（`--prefix-cache-tokens 0`）。",
)
NOT_ADMIN = (
    "⚠️ Not reset: that is not an admin key (`--admin-keys`).",
    "⚠️ 未清空：这不是管理员密钥（`--admin-keys`）。",
)
NO_ADMIN = (
    "⚠️ Not reset: resetting needs an admin key, and this server has none (`--admin-keys`).",
    "⚠️ 未清空：清空需要管理员密钥，而此服务器没有配置（`--admin-keys`）。",
)
NOT_REMOTE = ("⚠️ Not reset: this session answers with a remote backend.", "⚠️ 未清空：本会话使用远程后端。")
STEPS_TITLE = ("Engine steps, last {s} s", "引擎步，最近 {s} 秒")
STEPS_REMOTE_TITLE = ("Engine steps of {url}, last {s} s", "{url} 的引擎步，最近 {s} 秒")
STEPS_NONE = ("No engine step in the last {s} s: send a message.", "最近 {s} 秒没有引擎步：发送一条消息。")
STEPS_OFF = ("The engine keeps no step records (`--step-log 0`).", "引擎未记录步信息（`--step-log 0`）。")
STEPS_NA = ("Engine steps: not available from this backend ({why}).", "引擎步：此后端不提供（{why}）。")
STEPS_SUMMARY = (
    "{n} steps · busy {busy}% of the time · rows per step: median {rows}, max {max_rows} · median "
    "{pct}% of the limit · {shared} steps shared · {preempted} preemptions · bandwidth {bw} GB/s "
    "(measured at start)",
    "{n} 步 · {busy}% 的时间在运行步 · 每步行数：中位数 {rows}，最多 {max_rows} · 物理极限占比中位数 "
    "{pct}% · {shared} 步多请求同批 · 抢占 {preempted} 次 · 带宽 {bw} GB/s（启动时测得）",
)
STRIP_ROWS = ("rows", "行数")
STRIP_PCT = ("% of limit", "极限占比")

# Row labels of the view: (English, Chinese).
ROWS = {
    "kv_pages": ("KV pages in use", "已用 KV 页"),
    "window_pages": ("Sliding-window KV pages in use", "已用滑动窗口 KV 页"),
    "kv_tokens": ("KV tokens reserved", "已预留 KV token"),
    "prefix_blocks": ("Prefix-cache blocks", "前缀缓存块"),
    "hit_rate": ("Prefix-cache hit rate", "前缀缓存命中率"),
    "hit_lookups": ("Prompts that hit", "命中的提示"),
    "running": ("Running requests", "运行中的请求"),
    "waiting": ("Queued requests", "排队的请求"),
    "in_flight": ("In flight (admitted)", "处理中（已接纳）"),
    "preemptions": ("Preemptions", "抢占次数"),
    "steps": ("Engine steps", "引擎步数"),
}


def _bar(used: int, total: int) -> str:
    pct = 100 * used / total if total else 0.0
    return f'<div class="pg-srv-bar"><span style="width:{min(100.0, pct):.1f}%"></span></div>'


def _row(key: str, value: str, lang: str, bar: str = "") -> str:
    return (
        f"<tr><th>{html.escape(say(ROWS[key], lang))}</th>"
        f'<td data-srv="{key}">{value}</td><td class="pg-srv-gauge">{bar}</td></tr>'
    )


def local_steps(ops: ServerOperations, svc: Any, seconds: float = STEPS_WINDOW_S) -> dict[str, Any] | None:
    """The embedded engine's step records of the last `seconds`, as `GET /server/steps` lists them (read through
    the server's operations, not over HTTP); None while the model loads. `svc`: the service a session talks to."""
    return ops.steps(seconds, service=svc) if svc is not None else None


async def remote_steps(backend: Any, seconds: float = STEPS_WINDOW_S) -> dict[str, Any] | str:
    """A remote backend's `GET /server/steps`: its JSON, or why there is none (what the strip then says)."""
    url, headers = getattr(backend, "url", None), getattr(backend, "headers", None) or {}
    if not url:
        return "no URL"
    if not getattr(backend, "allows", lambda u: True)(f"{url}/server/steps"):
        return "outside the allowed base URL"
    try:
        async with httpx.AsyncClient(timeout=REMOTE_TIMEOUT_S, headers=headers) as client:
            r = await client.get(f"{url}/server/steps", params={"seconds": seconds})
    except httpx.HTTPError as exc:
        return type(exc).__name__
    if r.status_code != 200:
        return f"HTTP {r.status_code}"
    try:
        doc = r.json()
    except ValueError:
        return "not JSON"
    return doc if isinstance(doc, dict) and isinstance(doc.get("steps"), list) else "no step records"


def strip_svg(steps: list[dict[str, Any]], lang: str, seconds: float = STEPS_WINDOW_S) -> str:
    """Rows per step (top) and share of the limit (bottom) over the last `seconds`, newest on the right, binned
    into STRIP_BINS columns: a column's rows are its largest step's, its share the time-weighted mean."""
    w, top_h, gap, pct_h, left = 600, 56, 14, 44, 34
    plot = w - left
    rows_max = max([int(s.get("rows") or 0) for s in steps] + [1])
    bins: list[list[float]] = [[0, 0.0, 0.0] for _ in range(STRIP_BINS)]  # max rows, ms x pct, ms
    for s in steps:
        age = float(s.get("age_ms") or 0.0) / 1000
        i = STRIP_BINS - 1 - int(age / seconds * STRIP_BINS)
        if 0 <= i < STRIP_BINS:
            b, ms = bins[i], float(s.get("ms") or 0.0)
            b[0] = max(b[0], int(s.get("rows") or 0))
            b[1] += ms * float(s.get("pct") or 0.0)
            b[2] += ms
    bw = plot / STRIP_BINS
    parts = []
    for i, (rows, weighted, ms) in enumerate(bins):
        if not ms:
            continue
        x = left + i * bw
        h = top_h * rows / rows_max
        parts.append(f'<rect class="pg-strip-rows" x="{x:.1f}" y="{top_h - h:.1f}" width="{bw:.2f}" height="{h:.1f}"/>')
        pct = min(100.0, weighted / ms)
        ph = pct_h * pct / 100
        y0 = top_h + gap + pct_h
        parts.append(
            f'<rect class="pg-strip-pct" x="{x:.1f}" y="{y0 - ph:.1f}" width="{bw:.2f}" height="{ph:.1f}">'
            f"<title>{pct:.0f}%</title></rect>"
        )
    h_all = top_h + gap + pct_h + 14
    axis = (
        f'<text class="pg-strip-label" x="{left - 4}" y="10" text-anchor="end">{rows_max}</text>'
        f'<text class="pg-strip-label" x="{left - 4}" y="{top_h}" text-anchor="end">0</text>'
        f'<text class="pg-strip-label" x="{left - 4}" y="{top_h + gap + 8}" text-anchor="end">100%</text>'
        f'<text class="pg-strip-label" x="{left - 4}" y="{top_h + gap + pct_h}" text-anchor="end">0</text>'
        f'<text class="pg-strip-name" x="{left + 3}" y="10">{html.escape(say(STRIP_ROWS, lang))}</text>'
        f'<text class="pg-strip-name" x="{left + 3}" y="{top_h + gap + 8}">{html.escape(say(STRIP_PCT, lang))}'
        f"</text>"
        f'<line class="pg-strip-axis" x1="{left}" x2="{w}" y1="{top_h}" y2="{top_h}"/>'
        f'<line class="pg-strip-axis" x1="{left}" x2="{w}" y1="{top_h + gap + pct_h}" y2="{top_h + gap + pct_h}"/>'
        f'<text class="pg-strip-label" x="{left}" y="{h_all - 2}">−{seconds:g} s</text>'
        f'<text class="pg-strip-label" x="{w}" y="{h_all - 2}" text-anchor="end">0 s</text>'
    )
    return (
        f'<svg class="pg-strip" viewBox="0 0 {w} {h_all}" role="img" data-steps="{len(steps)}" '
        f'preserveAspectRatio="none">{axis}{"".join(parts)}</svg>'
    )


def steps_html(
    doc: dict[str, Any] | str | None, lang: str, url: str | None = None, seconds: float = STEPS_WINDOW_S
) -> str:
    """The strip and its summary for one /server/steps answer (a str: why the backend gave none; None: loading)."""
    if doc is None:
        return ""
    if isinstance(doc, str):
        return f'<div class="pg-srv-note" data-steps="na">{html.escape(say(STEPS_NA, lang, why=doc))}</div>'
    if not doc.get("enabled"):
        return f'<div class="pg-srv-note" data-steps="off">{html.escape(say(STEPS_OFF, lang))}</div>'
    title = (
        say(STEPS_REMOTE_TITLE, lang, url=url, s=f"{seconds:g}") if url else say(STEPS_TITLE, lang, s=f"{seconds:g}")
    )
    steps = doc["steps"]
    head = f'<div class="pg-steps-title">{html.escape(title)}</div>'
    if not steps:
        note = html.escape(say(STEPS_NONE, lang, s=f"{seconds:g}"))
        return f'<div class="pg-steps" data-steps="0">{head}<div class="pg-srv-note">{note}</div></div>'
    rows = [int(s.get("rows") or 0) for s in steps]
    busy = min(100.0, 100 * sum(float(s.get("ms") or 0.0) for s in steps) / 1000 / seconds)
    roof = doc.get("roofline") or {}
    line = say(
        STEPS_SUMMARY,
        lang,
        n=len(steps),
        busy=f"{busy:.0f}",
        rows=f"{statistics.median(rows):g}",
        max_rows=max(rows),
        pct=f"{statistics.median(float(s.get('pct') or 0.0) for s in steps):.0f}",
        shared=sum(1 for s in steps if len(s.get("requests") or []) > 1),
        preempted=sum(int(s.get("preemptions") or 0) for s in steps),
        bw=roof.get("bandwidth_gbs", "?"),
    )
    return (
        f'<div class="pg-steps" data-steps="{len(steps)}" data-max-rows="{max(rows)}">{head}'
        f'{strip_svg(steps, lang, seconds)}<div class="pg-steps-summary">{html.escape(line)}</div></div>'
    )


def render(state: dict[str, Any] | None, lang: str, remote: bool = False) -> str:
    """The view of one snapshot (None: the model is loading)."""
    if remote:
        return f'<div class="pg-srv-note" data-srv="remote">{html.escape(say(REMOTE, lang))}</div>'
    if state is None:
        return f'<div class="pg-srv-note">{html.escape(say(LOADING, lang))}</div>'
    req, kv, pc = state["requests"], state["kv_cache"], state["prefix_cache"]
    rows = []
    if kv["pages_total"] is not None:
        rows.append(
            _row(
                "kv_pages", f"{kv['pages_used']} / {kv['pages_total']}", lang, _bar(kv["pages_used"], kv["pages_total"])
            )
        )
    if "window_pages_total" in kv:
        rows.append(
            _row(
                "window_pages",
                f"{kv['window_pages_used']} / {kv['window_pages_total']}",
                lang,
                _bar(kv["window_pages_used"], kv["window_pages_total"]),
            )
        )
    rows.append(
        _row(
            "kv_tokens",
            f"{kv['tokens_used']} / {kv['tokens_capacity']}",
            lang,
            _bar(kv["tokens_used"], kv["tokens_capacity"]),
        )
    )
    if pc.get("enabled"):
        rows.append(
            _row(
                "prefix_blocks",
                f"{pc['blocks']} / {pc['capacity_blocks']}",
                lang,
                _bar(pc["blocks"], pc["capacity_blocks"]),
            )
        )
        tokens = say(
            ("{hit} of {query} prompt tokens", "{query} 个提示 token 中的 {hit} 个"),
            lang,
            hit=pc["hit_tokens"],
            query=pc["query_tokens"],
        )
        rows.append(_row("hit_rate", f"{100 * pc['hit_rate']:.1f}% <small>({tokens})</small>", lang))
        rows.append(_row("hit_lookups", f"{pc['hit_lookups']} / {pc['lookups']}", lang))
    else:
        rows.append(_row("prefix_blocks", html.escape(say(("off", "未启用"), lang)), lang))
    rows += [
        _row("running", f"{req['running']}", lang),
        _row("waiting", f"{req['waiting']}", lang),
        _row("in_flight", f"{req['in_flight']}", lang),
        _row("preemptions", f"{state['preemptions']}", lang),
        _row("steps", f"{state['steps']}", lang),
    ]
    return f'<table class="pg-srv">{"".join(rows)}</table>'


class ServerHandlers:
    """The tab's two events over the page's request policy."""

    def __init__(self, policy: RequestPolicy, service_of: Callable[[Session], Any] | None = None) -> None:
        self.policy = policy
        self.ops = ServerOperations(policy)  # the same actions and admin check as the API's /server/* routes
        self.service_of = service_of  # the service a session talks to (its picked model); None: the current one

    def service(self, session: Session | None) -> Any:
        if self.service_of is not None and session is not None:
            return self.service_of(session)
        return self.policy.get_service()

    def snapshot(self, session: Session | None = None) -> dict[str, Any] | None:
        """As `GET /server/state` answers, None while loading."""
        svc = self.service(session)
        return self.ops.state(svc) if svc is not None else None

    async def view(self, session: Session) -> str:
        """The numbers, and under them the strip of recent steps (a remote backend's from its /server/steps)."""
        lang = session.lang
        if session.remote:
            backend = session.backend
            steps = steps_html(await remote_steps(backend), lang, url=getattr(backend, "url", None))
            return render(None, lang, True) + steps
        svc = self.service(session)
        return render(self.snapshot(session), lang) + steps_html(local_steps(self.ops, svc), lang)

    async def reset(self, key: str, session: Session) -> tuple[str, str]:
        """Empty the prefix cache (the engine does it between two steps): the note, and the view after it."""
        lang = session.lang
        svc = self.service(session)
        if session.remote:
            return say(NOT_REMOTE, lang), await self.view(session)
        if svc is None:
            return say(LOADING, lang), await self.view(session)
        try:
            done = await self.ops.reset_prefix_cache((key or "").strip(), svc)
        except NoAdminKey:
            return say(NO_ADMIN, lang), await self.view(session)
        except NotAdmin:
            return say(NOT_ADMIN, lang), await self.view(session)
        note = say(DONE, lang, blocks=done["blocks_dropped"]) if done["reset"] else say(NO_CACHE, lang)
        return note, await self.view(session)


@dataclass(eq=False)
class ServerTab:
    view: gr.HTML
    key: gr.Textbox
    reset: gr.Button
    note: gr.Markdown
    timer: gr.Timer
    tab: Any  # the enclosing gr.Tab: selecting it shows the numbers at once, not at the first tick

    def wire(
        self, policy: RequestPolicy, session: gr.State, service_of: Callable[[Session], Any] | None = None
    ) -> None:
        """The timer's refresh, and the reset button (the `/reset_prefix_cache` endpoint of the page's API), on the
        engine of the model the session talks to (`service_of`)."""
        h = ServerHandlers(policy, service_of)
        refresh: dict[str, Any] = {"api_name": False, "show_progress": "hidden", "queue": False}
        self.timer.tick(h.view, session, self.view, **refresh)
        if isinstance(self.tab, gr.Tab):
            self.tab.select(h.view, session, self.view, **refresh)
        self.reset.click(
            h.reset, [self.key, session], [self.note, self.view], api_name="reset_prefix_cache", show_progress="hidden"
        )


def build(policy: RequestPolicy) -> ServerTab:
    """The tab's components (inside `with gr.Tab(...)`): the numbers, the key box when the reset needs one, the
    button and its note."""
    admin = admin_needed(policy.settings)
    tab = gr.context.Context.block
    gr.Markdown(t("server_help"))
    view = gr.HTML(render(None, "en"), elem_id="pg-server")
    with gr.Row(equal_height=False, elem_id="pg-server-actions"):
        key = gr.Textbox(
            label=t("admin_key"),
            type="password",
            visible=admin,
            scale=2,
            elem_id="pg-server-key",
            info=t("admin_key_help") if admin else None,
        )
        reset = gr.Button(t("reset_prefix_cache"), variant="secondary", size="sm", scale=1, elem_id="pg-server-reset")
    note = gr.Markdown("", elem_id="pg-server-note")
    timer = gr.Timer(TICK_S)
    return ServerTab(view=view, key=key, reset=reset, note=note, timer=timer, tab=tab)
