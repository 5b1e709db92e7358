"""The reply as tokens coloured by the engine's probability for each, with a colour legend; a click or tap on a token
opens its alternatives (playground/page/static/tokens.js); and the n>1 candidates side by side with their cumulative
log-probabilities.

One markup serves the Stats panel (a gr.HTML) and the chat (a Chatbot message, which Gradio sanitizes: it keeps
class, style, title, tabindex, role and hidden but drops every data-* and aria-* attribute). So a heatmap is a
`.pg-heatmap` box of `<span class="pg-tok pg-pN">` tokens (N: the probability's tenth; the spans and their colours
are the notebooks' too: playground/client/heatmap.py) followed by one hidden `.pg-tokdata` span holding the numbers
as JSON: {"k": top-k, "l": the popover's labels in the session's language, "turn": the conversation turn the reply is (null: unknown, so no "continue with this"
buttons), "c": its choice index, "t": [[token, logprob, rank of the chosen token among the alternatives (1-based,
0: not among them), [[alternative, logprob], ...]], ...]}. A request with `sampler_logprobs` adds to each token its
candidates after the samplers and the chosen token's logprob there (null: forced, not sampled): [..., [[candidate,
logprob], ...], logprob]. The script finds a token's entry by its position in the box.
"""

from __future__ import annotations

import json
import math
from html import escape
from typing import Any

from engine.protocol.response import LogprobEntry
from playground.client.heatmap import BUCKETS, token_span, token_spans
from playground.client.reply import ChoiceView, ReplyView
from playground.page.i18n import say

CHAT_TOKENS = 600  # the chat's heatmap shows a long reply's first tokens only; the Stats panel shows them all
CHAT_ALTS = 5  # and at most this many alternatives per token
FLOOR = -9999.0  # a logprob of -inf, as JSON has no infinity

HINT = ("click or tap a token for its alternatives", "点击或轻触 token 查看候选")
LABELS = {
    "token": ("token {i}", "第 {i} 个 token"),
    "rank": ("rank {r} of the top {k}", "在前 {k} 名中排第 {r}"),
    "notin": ("not in the top {k}", "不在前 {k} 名内"),
    "chosen": ("chosen", "已选"),
    "noalts": ("no alternatives: set top_logprobs in Sampling", "没有候选：请在「采样」中设置 top_logprobs"),
    # the two columns of a request with sampler_logprobs
    "model": ("model", "模型"),
    "after": ("after samplers", "采样器之后"),
    "removed": ("removed", "已移除"),
    "lower": ("not in its top {k}", "不在其前 {k} 名内"),
    "forced": ("forced, not sampled", "强制插入，未经采样"),
    "how": (
        "after samplers: logit_bias, constraints and penalties, then temperature, top-k, top-p · greedy: the highest "
        "is taken",
        "采样器之后：先 logit_bias、约束与惩罚，再 temperature、top-k、top-p · 贪心：取最高者",
    ),
    "branch": ("↳ continue with this", "↳ 从这里继续"),
}


def _lp(x: float) -> float:
    return round(x, 4) if math.isfinite(x) else FLOOR


def rank(e: LogprobEntry) -> int:
    """The chosen token's place among its alternatives, 1-based; 0 when it is not among them."""
    return next((j + 1 for j, a in enumerate(e.top_logprobs) if a.token == e.token), 0)


def _row(e: LogprobEntry, alts: int | None) -> list[Any]:
    row = [e.token, _lp(e.logprob), rank(e), [[a.token, _lp(a.logprob)] for a in e.top_logprobs[:alts]]]
    if e.sampler_top_logprobs is not None:  # asked for: the candidates after the samplers too
        after = None if e.sampler_logprob is None else _lp(e.sampler_logprob)
        row += [[[a.token, _lp(a.logprob)] for a in e.sampler_top_logprobs[:alts]], after]
    return row


def _data(entries: list[LogprobEntry], lang: str, alts: int | None, turn: int | None = None, choice: int = 0) -> str:
    k = max((len(e.top_logprobs) for e in entries), default=0)
    labels = {name: say(text, lang, k=k, i="{i}", r="{r}") for name, text in LABELS.items()}
    rows = [_row(e, alts) for e in entries]
    data = {"k": k, "l": labels, "turn": turn, "c": choice, "t": rows}
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    # Escaped for HTML; `$` as \u0024 so that the chat's LaTeX pass finds no $$ pair in it.
    return escape(text.replace("$", "\\u0024"), quote=False)


def heatmap_html(
    entries: list[LogprobEntry],
    lang: str = "en",
    *,
    titles: bool = True,
    alts: int | None = None,
    turn: int | None = None,
    choice: int = 0,
    accepted: list[int] | None = None,
) -> str:
    """The tokens in their colours (playground/client/heatmap.py) plus their data; `titles`: native tooltips too (the
    Stats panel's, for a page without the script: tokens.js takes them off on hover); `alts`: keep that many; `turn`
    (the conversation turn of the reply) and `choice`: what a "continue with this" button names (none without);
    `accepted`: the tokens that were accepted speculative drafts, underlined."""
    spans = token_spans(entries, titles=titles, accepted=accepted)
    data = f'<span class="pg-tokdata" hidden>{_data(entries, lang, alts, turn, choice)}</span>'
    return f'<div class="pg-heat pg-heatmap" tabindex="0" role="group">{spans}{data}</div>'


SPEC_NOTE = (
    "Underlined: {k:,} tokens that were speculative drafts, accepted.",
    "带下划线：{k:,} 个被接受的推测草稿 token。",
)


def legend_html(lang: str = "en") -> str:
    chips = "".join(f'<span class="pg-lg pg-p{b}" title="{b * 10}–{b * 10 + 10}%"></span>' for b in range(BUCKETS))
    label = say(("token probability", "token 概率"), lang)
    return (
        f'<div class="pg-legend"><span class="pg-lg-label">{label}</span><span class="pg-lg-end">0%</span>'
        f'<span class="pg-lg-bar">{chips}</span><span class="pg-lg-end">100%</span></div>'
    )


def _summary(entries: list[LogprobEntry], lang: str) -> str:
    low = sum(1 for e in entries if e.logprob < math.log(0.5))
    mean = sum(math.exp(e.logprob) for e in entries) / len(entries)
    return say(
        ("{n} tokens · mean p {mean:.1%} · {low} below 50%", "{n} 个 token · 平均 p {mean:.1%} · {low} 个低于 50%"),
        lang,
        n=len(entries),
        mean=mean,
        low=low,
    )


def tokens_html(
    entries: list[LogprobEntry],
    lang: str = "en",
    *,
    turn: int | None = None,
    choice: int = 0,
    accepted: list[int] | None = None,
) -> str:
    if not entries:
        return (
            '<div class="pg-empty">'
            + say(
                (
                    "Turn on <b>logprobs</b> (and top_logprobs for alternatives) in "
                    "Sampling to see each token's probability here.",
                    "在「采样」中打开 <b>logprobs</b>（以及用于查看候选的 "
                    "top_logprobs），即可在这里看到每个 token 的概率。",
                ),
                lang,
            )
            + "</div>"
        )
    head = f'<div class="pg-note">{_summary(entries, lang)} · {say(HINT, lang)}</div>'
    body = heatmap_html(entries, lang, turn=turn, choice=choice, accepted=accepted)
    if accepted:
        body += f'<div class="pg-note pg-spec-note">{say(SPEC_NOTE, lang, k=len(accepted))}</div>'
    return head + legend_html(lang) + body


def chat_messages(
    c: ChoiceView, lang: str = "en", *, done: bool | None = None, turn: int | None = None
) -> list[dict[str, Any]]:
    """The reply itself as a heatmap in the chat: one collapsed message under the answer, once the reply is final
    (`done`; by default when the choice has its finish reason), so streaming re-renders carry none of it. A long
    reply shows its first CHAT_TOKENS tokens with CHAT_ALTS alternatives each, and no native tooltips."""
    if not c.logprobs or not (c.finish_reason is not None if done is None else done):
        return []
    shown = c.logprobs[:CHAT_TOKENS]
    body = legend_html(lang) + heatmap_html(
        shown, lang, titles=False, alts=CHAT_ALTS, turn=turn, choice=c.index, accepted=c.accepted
    )
    if c.accepted:
        body += f'<div class="pg-note pg-spec-note">{say(SPEC_NOTE, lang, k=len(c.accepted))}</div>'
    if len(shown) < len(c.logprobs):
        body += (
            '<div class="pg-note">'
            + say(
                (
                    "The first {k:,} of {n:,} tokens; all of them are in ▥ Stats.",
                    "仅显示前 {k:,} 个 token（共 {n:,} 个）；全部见「▥ 统计」。",
                ),
                lang,
                k=len(shown),
                n=len(c.logprobs),
            )
            + "</div>"
        )
    body += f'<div class="pg-note">{say(HINT, lang)}</div>'
    title = "◈ " + say(("Tokens by probability", "按概率着色的 token"), lang) + " · " + _summary(c.logprobs, lang)
    return [{"role": "assistant", "content": body, "metadata": {"title": title, "status": "done"}}]


def candidates_html(view: ReplyView, lang: str = "en") -> str:
    if len(view.choices) < 2:
        return (
            '<div class="pg-empty">'
            + say(
                (
                    "Set <b>n</b> > 1 (with temperature > 0) to compare candidates here.",
                    "把 <b>n</b> 设为大于 1（且 temperature > 0），即可在这里比较候选。",
                ),
                lang,
            )
            + "</div>"
        )
    ranked = sorted(view.choices.values(), key=lambda c: -(c.cumulative_logprob or -math.inf))
    scored = any(c.cumulative_logprob is not None for c in ranked)
    if scored:
        head = say(
            ("{n} candidates, best cumulative logprob first", "{n} 个候选，累计 logprob 最高的在前"),
            lang,
            n=len(ranked),
        )
    else:
        head = say(
            (
                "{n} candidates · turn on <b>logprobs</b> in Sampling to rank them by cumulative logprob",
                "{n} 个候选 · 在「采样」中打开 <b>logprobs</b> 即可按累计 logprob 排序",
            ),
            lang,
            n=len(ranked),
        )
    cols = []
    for place, c in enumerate(ranked):
        lp = c.cumulative_logprob
        facts = [
            say(("choice {i}", "候选 {i}"), lang, i=c.index) + (" ★" if place == 0 and lp is not None else ""),
            say(("{n} tokens", "{n} 个 token"), lang, n=len(c.times_ms)),
        ]
        if lp is not None:
            facts.append(
                say(
                    ("cumulative logprob {lp:.2f} ({per:.2f} a token)", "累计 logprob {lp:.2f}（每 token {per:.2f}）"),
                    lang,
                    lp=lp,
                    per=lp / len(c.logprobs),
                )
            )
        facts.append(escape(c.finish_reason or "…"))
        text = heatmap_html(c.logprobs, lang, choice=c.index) if c.logprobs else escape(c.content)
        cols.append(
            f'<div class="pg-cand"><div class="pg-note">{" · ".join(facts)}</div>'
            f'<div class="pg-cand-text">{text}</div></div>'
        )
    return f'<div class="pg-note">{head}</div><div class="pg-cands">' + "".join(cols) + "</div>"


# The quality meter's colour mode (engine/serving/quality.py): each token coloured by KL(reference ‖ served) at its
# position, on the probability scale's colours turned round (clear: the two models agree; red: they part), a
# token whose top-1 differs from the reference's outlined. KL edges per colour step, in nats.
KL_EDGES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)
DIFFERS_STYLE = "outline: 2px solid #7c3aed; outline-offset: -1px"
QUALITY_LABELS = {
    "q": ("{ref}: p {p} · KL {kl}", "{ref}：p {p} · KL {kl}"),
    "same": ("top-1 the same as {ref}'s", "top-1 与 {ref} 相同"),
    "differs": ("top-1 differs: {ref} picks {tok}", "top-1 不同：{ref} 选 {tok}"),
}


def kl_bucket(kl: float) -> int:
    return BUCKETS - 1 - sum(1 for edge in KL_EDGES if kl >= edge)


def quality_html(report: dict[str, Any], lang: str = "en") -> str:
    """The reply coloured by the quality meter's KL per token, its legend and summary; the popover (tokens.js) says
    each token's KL, its probability on the reference and whether the reference's top-1 is another token."""
    summary = escape(str(report.get("summary", "")))
    tokens = report.get("tokens") or []
    if not tokens:
        return f'<div class="pg-note pg-quality-note">{summary}</div>'
    ref = str(report.get("reference_precision") or "fp32")
    spans = [token_span(kl_bucket(t["kl"]), t["piece"], style=DIFFERS_STYLE if t["differs"] else "") for t in tokens]
    labels = {name: say(text, lang, k=0, i="{i}", r="{r}") for name, text in LABELS.items()}
    labels |= {name: say(text, lang, ref=ref, p="{p}", kl="{kl}", tok="{tok}") for name, text in QUALITY_LABELS.items()}
    labels["noalts"] = say(("teacher-forced on the served model", "在所服务的模型上逐 token 重算"), lang)
    data = {
        "k": 0,
        "l": labels,
        "turn": None,
        "c": 0,
        "t": [[t["piece"], _lp(t["logprob"]), 0, []] for t in tokens],
        "q": [[round(t["kl"], 6), t["differs"], t["reference_piece"], _lp(t["reference_logprob"])] for t in tokens],
    }
    text = escape(json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("$", "\\u0024"), quote=False)
    chips = "".join(f'<span class="pg-lg pg-p{kl_bucket(e)}" title="KL ≥ {e:g}"></span>' for e in (0.0, *KL_EDGES))
    legend = (
        f'<div class="pg-legend"><span class="pg-lg-label">{say(("KL against", "KL，对照"), lang)} {escape(ref)}'
        f'</span><span class="pg-lg-end">0</span><span class="pg-lg-bar">{chips}</span><span class="pg-lg-end">≥ 1'
        f"</span></div>"
    )
    outlined = say(("outlined: top-1 differs", "加框：top-1 不同"), lang)
    return (
        f'<div class="pg-note pg-quality-note">{summary} · {outlined}</div>{legend}'
        f'<div class="pg-heat pg-heatmap pg-quality" tabindex="0" role="group">{"".join(spans)}'
        f'<span class="pg-tokdata" hidden>{text}</span></div>'
    )
