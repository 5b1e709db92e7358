"""The Server tab (issue 19): the embedded engine's live state (KV pages in use, prefix-cache blocks and hit rate,
running and queued requests), refreshed every two seconds while the tab is open, and a button that empties the
prefix cache.

The numbers are the engine's cheap snapshot, the one `GET /server/state` and /metrics read (the service through
the page's request policy). The tab's Timer lives inside the tab, and Gradio mounts a tab's children only while
it is the selected one, so a page whose Server tab is not open asks nothing. The reset follows
`POST /reset_prefix_cache`'s rule: open when the server has no credentials at all; once it has any, it takes an
admin key (`--admin-keys`), typed here. A remote backend's state is not this page's to read."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine.serving.policy import RequestPolicy
from playground.i18n import say, t
from playground.session import Session

TICK_S = 2.0
RESET_TIMEOUT_S = 60

LOADING = ("The model is loading…", "模型加载中…")
REMOTE = ("Not available from this backend: the Server tab shows the embedded engine's state, and this session "
          "answers with a remote server (see the Backend tab).",
          "此后端不提供：服务器标签页显示的是内置引擎的状态，而本会话由远程服务器回答（见“后端”标签页）。")  # fmt: skip
DONE = ("✓ Prefix cache emptied: {blocks} blocks dropped.", "✓ 前缀缓存已清空：丢弃了 {blocks} 个块。")
NO_CACHE = ("This server runs without a prefix cache (`--prefix-cache-tokens 0`).",
            "此服务器未启用前缀缓存（`--prefix-cache-tokens 0`）。")  # fmt: skip
NOT_ADMIN = ("⚠️ Not reset: that is not an admin key (`--admin-keys`).",
             "⚠️ 未清空：这不是管理员密钥（`--admin-keys`）。")  # fmt: skip
NO_ADMIN = ("⚠️ Not reset: resetting needs an admin key, and this server has none (`--admin-keys`).",
            "⚠️ 未清空：清空需要管理员密钥，而此服务器没有配置（`--admin-keys`）。")  # fmt: skip
NOT_REMOTE = ("⚠️ Not reset: this session answers with a remote backend.", "⚠️ 未清空：本会话使用远程后端。")

# Row labels of the view: (English, Chinese).
ROWS = {
    "kv_pages": ("KV pages in use", "已用 KV 页"),
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


def needs_admin(settings: Any) -> bool:
    """Whether the reset takes an admin key: the server has credentials of any kind (as engine/http/auth.py's
    `any_credentials`), or admin keys."""
    return bool(settings.api_keys or settings.pangu_auth_tokens or settings.pangu_app_codes or settings.pangu_aksk
                or settings.admin_keys)  # fmt: skip


def is_admin(key: str, admin_keys: list[str]) -> bool:
    """`key` is one of `admin_keys`, compared in constant time over every one (as engine/http/auth.py `matches`)."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()
    found = False
    for secret in admin_keys:
        found |= hmac.compare_digest(digest, hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest())
    return found


def _bar(used: int, total: int) -> str:
    pct = 100 * used / total if total else 0.0
    return f'<div class="pg-srv-bar"><span style="width:{min(100.0, pct):.1f}%"></span></div>'


def _row(key: str, value: str, lang: str, bar: str = "") -> str:
    return (f'<tr><th>{html.escape(say(ROWS[key], lang))}</th>'
            f'<td data-srv="{key}">{value}</td><td class="pg-srv-gauge">{bar}</td></tr>')  # fmt: skip


def render(state: dict[str, Any] | None, lang: str, remote: bool = False) -> str:
    """The view of one snapshot (None: the model is loading)."""
    if remote:
        return f'<div class="pg-srv-note" data-srv="remote">{html.escape(say(REMOTE, lang))}</div>'
    if state is None:
        return f'<div class="pg-srv-note">{html.escape(say(LOADING, lang))}</div>'
    req, kv, pc = state["requests"], state["kv_cache"], state["prefix_cache"]
    rows = []
    if kv["pages_total"] is not None:
        rows.append(_row("kv_pages", f"{kv['pages_used']} / {kv['pages_total']}", lang,
                         _bar(kv["pages_used"], kv["pages_total"])))  # fmt: skip
    rows.append(_row("kv_tokens", f"{kv['tokens_used']} / {kv['tokens_capacity']}", lang,
                     _bar(kv["tokens_used"], kv["tokens_capacity"])))  # fmt: skip
    if pc.get("enabled"):
        rows.append(_row("prefix_blocks", f"{pc['blocks']} / {pc['capacity_blocks']}", lang,
                         _bar(pc["blocks"], pc["capacity_blocks"])))  # fmt: skip
        tokens = say(("{hit} of {query} prompt tokens", "{query} 个提示 token 中的 {hit} 个"), lang,
                     hit=pc["hit_tokens"], query=pc["query_tokens"])  # fmt: skip
        rows.append(_row("hit_rate", f"{100 * pc['hit_rate']:.1f}% <small>({tokens})</small>", lang))
        rows.append(_row("hit_lookups", f"{pc['hit_lookups']} / {pc['lookups']}", lang))
    else:
        rows.append(_row("prefix_blocks", html.escape(say(("off", "未启用"), lang)), lang))
    rows += [_row("running", f"{req['running']}", lang), _row("waiting", f"{req['waiting']}", lang),
             _row("in_flight", f"{req['in_flight']}", lang), _row("preemptions", f"{state['preemptions']}", lang),
             _row("steps", f"{state['steps']}", lang)]  # fmt: skip
    return f'<table class="pg-srv">{"".join(rows)}</table>'


class ServerHandlers:
    """The tab's two events over the page's request policy."""

    def __init__(self, policy: RequestPolicy) -> None:
        self.policy = policy

    def snapshot(self) -> dict[str, Any] | None:
        """As `GET /server/state` answers (engine/http/server_routes.py server_state), None while loading."""
        svc = self.policy.get_service()
        if svc is None:
            return None
        state = svc.engine.snapshot()
        state["requests"] |= {"in_flight": self.policy.admission.in_flight}
        return state

    def view(self, session: Session) -> str:
        return render(None if session.remote else self.snapshot(), session.lang, session.remote)

    async def reset(self, key: str, session: Session) -> tuple[str, str]:
        """Empty the prefix cache (the engine does it between two steps): the note, and the view after it."""
        lang, settings = session.lang, self.policy.settings
        svc = self.policy.get_service()
        if session.remote:
            return say(NOT_REMOTE, lang), self.view(session)
        if svc is None:
            return say(LOADING, lang), self.view(session)
        if needs_admin(settings):
            if not settings.admin_keys:
                return say(NO_ADMIN, lang), self.view(session)
            if not is_admin((key or "").strip(), settings.admin_keys):
                return say(NOT_ADMIN, lang), self.view(session)
        if svc.engine.prefix_cache is None:
            return say(NO_CACHE, lang), self.view(session)
        dropped = await asyncio.wait_for(asyncio.wrap_future(svc.engine.reset_prefix_cache()), RESET_TIMEOUT_S)
        return say(DONE, lang, blocks=dropped), self.view(session)


@dataclass(eq=False)
class ServerTab:
    view: gr.HTML
    key: gr.Textbox
    reset: gr.Button
    note: gr.Markdown
    timer: gr.Timer
    tab: Any  # the enclosing gr.Tab: selecting it shows the numbers at once, not at the first tick

    def wire(self, policy: RequestPolicy, session: gr.State) -> None:
        """The timer's refresh, and the reset button (the `/reset_prefix_cache` endpoint of the page's API)."""
        h = ServerHandlers(policy)
        refresh = {"api_name": False, "show_progress": "hidden", "queue": False}
        self.timer.tick(h.view, session, self.view, **refresh)
        if isinstance(self.tab, gr.Tab):
            self.tab.select(h.view, session, self.view, **refresh)
        self.reset.click(h.reset, [self.key, session], [self.note, self.view], api_name="reset_prefix_cache",
                         show_progress="hidden")  # fmt: skip


def build(policy: RequestPolicy) -> ServerTab:
    """The tab's components (inside `with gr.Tab(...)`): the numbers, the key box when the reset needs one, the
    button and its note."""
    admin = needs_admin(policy.settings)
    tab = gr.context.Context.block
    gr.Markdown(t("server_help"))
    view = gr.HTML(render(None, "en"), elem_id="pg-server")
    with gr.Row(equal_height=False, elem_id="pg-server-actions"):
        key = gr.Textbox(label=t("admin_key"), type="password", visible=admin, scale=2, elem_id="pg-server-key",
                         info=t("admin_key_help") if admin else None)  # fmt: skip
        reset = gr.Button(t("reset_prefix_cache"), variant="secondary", size="sm", scale=1,
                          elem_id="pg-server-reset")  # fmt: skip
    note = gr.Markdown("", elem_id="pg-server-note")
    timer = gr.Timer(TICK_S)
    return ServerTab(view=view, key=key, reset=reset, note=note, timer=timer, tab=tab)
