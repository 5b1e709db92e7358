"""The X-ray tab (issue 19, point 6): one reply's steps as the engine's scheduler ran them.

Per token of the reply, the engine step that made it (engine/core/step_log.py, via the reply's fold,
playground/client/reply.py `ChoiceView.steps`): how many rows shared the step (the token's `batch_size`), the other
requests in it by their short anonymous ids, the prompt tokens prefilled beside it, preemptions and prefix-cache
reuse its scheduling did, and its time against its floor (every weight and the KV its rows read, over the memory
bandwidth measured when the server started) with that floor's share of the step as a bar: how near the step came
to the physical limit. A remote backend's stream carries no step records: the tab says so.

The Server tab (playground/page/tabs/server_panel.py) draws the same records server-wide.
"""

from __future__ import annotations

import html
import statistics
from typing import Any

import gradio as gr

from playground.client.reply import ChoiceView, ReplyView
from playground.page.i18n import labels, say, t

# The labels this module shows, translated in the browser (playground/page/i18n.py `t`).
TEXTS = labels(
    __name__,
    {
        "tab_xray": ("◎ X-ray", "◎ 调度透视"),
        "xray_none_html": (
            '<div class="pg-xray-note" data-xray="none">Send a message: each engine step of its reply shows here, with '
            "what shared the step.</div>",
            '<div class="pg-xray-note" data-xray="none">发送一条消息：这里会逐步显示其回复的每个引擎步，以及同一步里还有什么。</div>',
        ),
    },
)

LIVE_ROWS = 40  # while a reply streams, its newest steps only (the whole table once it is done)

REMOTE = (
    "Not available from this backend: its stream carries no engine step records (the X-ray reads the "
    "embedded engine's).",
    "此后端不提供：它的流不携带引擎的步记录（调度透视读取的是内置引擎的记录）。",
)
OFF = (
    "The engine keeps no step records (`--step-log 0`): no X-ray for this reply.",
    "引擎未记录步信息（`--step-log 0`）：此回复没有调度透视。",
)
WAITING = ("Waiting for the first token…", "等待第一个 token…")
HELP = (
    "Floor: the bytes a step must read (every weight once, plus the KV its rows attend over) at the memory "
    "bandwidth measured when the server started; the bar is floor ÷ step time.",
    "下限：一步必须读取的字节（每个权重一次，加上各行注意力读取的 KV）按服务器启动时测得的内存带宽所需的时间；"
    "条形为 下限 ÷ 步耗时。",
)
LIVE = ("(streaming: the newest {n} steps)", "（生成中：最新的 {n} 步）")
# (English, Chinese, what the column says in full: its tooltip)
COLUMNS = (
    ("step", "步", "the engine's step number", "引擎步序号"),
    ("rows", "行数", "rows in the step: this token's batch_size", "该步的行数：即此 token 的 batch_size"),
    ("others", "同批请求", "the other requests in the step, by short anonymous id", "同一步中的其他请求（匿名短 id）"),
    ("prompt", "提示", "prompt tokens prefilled beside it (in how many chunks)", "同一步预填充的提示 token（分块数）"),
    ("pre.", "抢占", "requests preempted while scheduling the step", "调度该步时被抢占的请求"),
    ("prefix", "前缀", "prefix-cache blocks reused by requests admitted for it", "为该步接纳的请求复用的前缀缓存块"),
    ("ms / floor", "耗时 / 下限", "the step's time and its floor, ms", "步耗时与其下限（ms）"),
    ("limit", "极限", "floor ÷ time: the share of the physical limit", "下限 ÷ 耗时：达到物理极限的比例"),
)
SUMMARY = (
    "{steps} steps · median {median}% of the memory-bandwidth limit · {shared} shared with other requests "
    "({peers} distinct) · {prompting} beside prompt chunks · {preempted} preemptions · prefix reuse "
    "{blocks} blocks",
    "{steps} 步 · 物理极限占比中位数 {median}% · {shared} 步与其他请求同批（共 {peers} 个不同请求）· "
    "{prompting} 步旁有提示分块 · 抢占 {preempted} 次 · 前缀复用 {blocks} 块",
)


def summary(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The reply's x-ray in a few numbers (what the summary line says; the notebooks read it too)."""
    peers = {p for s in steps for p in s.get("peers") or []}
    return {
        "steps": len(steps),
        "median_pct": round(statistics.median(s["pct"] for s in steps), 1) if steps else 0.0,
        "shared": sum(1 for s in steps if s.get("peers")),
        "peers": len(peers),
        "prompting": sum(1 for s in steps if s.get("prompt_chunks")),
        "preempted": sum(s.get("preemptions", 0) for s in steps),
        "blocks": sum(s.get("prefix_blocks", 0) for s in steps),
    }


def _note(text: tuple[str, str], lang: str, kind: str) -> str:
    return f'<div class="pg-xray-note" data-xray="{kind}">{html.escape(say(text, lang))}</div>'


def _row(s: dict[str, Any]) -> str:
    peers = s.get("peers") or []
    shown = " ".join(f'<span class="pg-xray-id">{html.escape(str(p))}</span>' for p in peers[:8])
    if len(peers) > 8:
        shown += f" <small>+{len(peers) - 8}</small>"
    prompt = f"{s['prompt_tokens']} <small>({s['prompt_chunks']})</small>" if s.get("prompt_chunks") else "·"
    pct = float(s.get("pct") or 0.0)
    bar = (
        f'<div class="pg-xray-bar" title="{pct:.1f}%"><span style="width:{min(100.0, pct):.1f}%"></span></div>'
        f'<small class="pg-xray-pct">{pct:.0f}%</small>'
    )
    return (
        f'<tr data-step="{s["step"]}" data-rows="{s["rows"]}" data-peers="{len(peers)}">'
        f'<td>{s["step"]}</td><td class="pg-xray-rows">{s["rows"]}</td><td>{shown or "·"}</td><td>{prompt}</td>'
        f"<td>{s.get('preemptions') or '·'}</td><td>{s.get('prefix_blocks') or '·'}</td>"
        f'<td>{s["ms"]:.1f} / {s["floor_ms"]:.1f}</td><td><div class="pg-xray-gauge">{bar}</div></td></tr>'
    )


def choice_html(c: ChoiceView, lang: str = "en", backend: str = "embedded", live: bool = False) -> str:
    """One choice's x-ray: the summary line and a row per step (while `live`, the newest LIVE_ROWS)."""
    steps = c.steps
    if not steps:
        if backend != "embedded":
            return _note(REMOTE, lang, "remote")
        if c.token_ids:
            return _note(OFF, lang, "off")
        return _note(WAITING, lang, "waiting") if live else say(TEXTS["xray_none_html"], lang)
    sm = summary(steps)
    line = say(
        SUMMARY,
        lang,
        steps=sm["steps"],
        median=sm["median_pct"],
        shared=sm["shared"],
        peers=sm["peers"],
        prompting=sm["prompting"],
        preempted=sm["preempted"],
        blocks=sm["blocks"],
    )
    shown = steps[-LIVE_ROWS:] if live else steps
    head = "".join(
        f'<th title="{html.escape(say(col[2:], lang))}">{html.escape(say(col[:2], lang))}</th>' for col in COLUMNS
    )
    more = f" <small>{html.escape(say(LIVE, lang, n=LIVE_ROWS))}</small>" if live and len(steps) > LIVE_ROWS else ""
    own = f' data-own="{html.escape(c.xray_id)}"' if c.xray_id else ""
    return (
        f'<div class="pg-xray" data-xray="steps" data-steps="{len(steps)}" data-median="{sm["median_pct"]}"'
        f' data-shared="{sm["shared"]}"{own}>'
        f'<div class="pg-xray-summary">{html.escape(line)}{more}</div>'
        f'<div class="pg-xray-scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(_row(s) for s in shown)}</tbody></table></div>"
        f'<div class="pg-xray-help">{html.escape(say(HELP, lang))}</div></div>'
    )


def reply_html(reply: ReplyView | None, lang: str = "en", live: bool = False) -> str:
    """The tab for one reply (its first choice, as the statistics and the timeline show); None: no reply yet."""
    if reply is None:
        return say(TEXTS["xray_none_html"], lang)
    return choice_html(reply.first, lang, reply.backend, live)


def build() -> gr.HTML:
    """The tab's one component (inside `with gr.Tab(...)`); every chat event updates it
    (playground/page/chat_outputs.py)."""
    return gr.HTML(t("xray_none_html"), elem_id="pg-xray")  # in the browser's language until the first reply
