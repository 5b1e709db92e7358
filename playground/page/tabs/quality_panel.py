"""The Stats tab's quality meter (engine/serving/quality.py): "⚖ Quality vs fp32" teacher-forces the selected reply
through a full-precision copy of its model and keeps the report on the reply, so the Stats table gets its summary
row ("top-1 agreement 97.6% · mean KL 0.012 against fp32") and the Tokens heatmap its KL colour mode, whose
popover says each token's KL and whether the reference's top-1 is another token.

The reference (the model's `@fp32` pool entry) loads on first use, which is an administrator's action once
credentials are set: the admin key typed beside the model picker, as for a pick. Embedded engine only: a remote
backend's logits are not ours to read. Also the page's `/quality` endpoint (gradio_client)."""

from __future__ import annotations

import dataclasses
import html
from typing import Any

import gradio as gr

from engine.protocol.errors import ApiError
from engine.serving.quality import REFERENCE, measure_request
from playground.client.backend import LocalBackend
from playground.page.i18n import say
from playground.page.session import base_url_of, caller

NO_REPLY = ("Select a finished reply first.", "请先选择一条已完成的回复。")
REMOTE = (
    "The quality meter reads the embedded engine's logits; this session talks to a remote backend.",
    "质量评估读取内置引擎的 logits；此会话连接的是远程后端。",
)
MEASURING = ("measuring against {ref}…", "正在对照 {ref} 评估…")


async def measure(h: Any, conv: Any, session: Any, admin_key: str | None, request: gr.Request) -> tuple[Any, ...]:
    """(note, stats table, heatmap) for the selected reply, its report kept on it."""
    lang = session.lang
    turn = conv.selected_reply()
    skip = (gr.skip(), gr.skip())
    if turn is None or turn.reply is None or not turn.reply.done or not turn.request:
        return (_note(say(NO_REPLY, lang)), *skip)
    if not isinstance(h.backend(session), LocalBackend):
        return (_note(say(REMOTE, lang)), *skip)
    policy = h.policy
    ctx = caller(request, "quality", policy)
    pool = policy.models
    if pool is not None and pool.admin((admin_key or "").strip() or None):  # as a pick: an admin may load it
        ctx = dataclasses.replace(ctx, may_load=True)
    try:
        report = await measure_request(policy, ctx, turn.request, turn.reply.first.token_ids)
    except ApiError as exc:
        return (_note("⚠️ " + exc.message), *skip)
    turn.reply.quality = report.as_json()
    panels = h.out.panels(turn, base_url_of(request), conv=conv, lang=lang)
    return _note(report.summary()), panels[h.out.stats], panels[h.out.heat]


def _note(text: str) -> str:
    return f'<div class="pg-note" data-quality>{html.escape(text)}</div>'


def wire(h: Any, tab: Any, conv: gr.State, session: gr.State, admin_key: gr.Textbox | None) -> None:
    async def run(conv: Any, session: Any, admin_key: str | None, request: gr.Request) -> tuple[Any, ...]:
        return await measure(h, conv, session, admin_key, request)

    tab.quality.click(
        lambda sess: _note(say(MEASURING, sess.lang, ref=REFERENCE)),
        session,
        tab.quality_note,
        api_name=False,
        queue=False,
        show_progress="hidden",
    ).then(
        run,
        [conv, session, admin_key or gr.State(None)],
        [tab.quality_note, tab.stats, tab.heat],
        api_name="quality",
        concurrency_id="chat",
        show_progress="hidden",
    )
