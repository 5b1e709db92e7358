"""The reply as tokens coloured by the engine's probability for each, with the top alternatives on hover; and the n>1
candidates side by side with their cumulative log-probabilities."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from engine.protocol.response import LogprobEntry
from playground.reply import ChoiceView, ReplyView


def _color(p: float) -> str:
    """Confident tokens stay clear; unlikely ones turn red (hue 0) through amber (hue 45)."""
    alpha = 0.08 + 0.6 * (1 - p)
    hue = 45 * p
    return f"hsla({hue:.0f}, 90%, 55%, {alpha:.2f})"


def _shown(token: str) -> str:
    return escape(token).replace("\n", "↵<br>") if token else '<span class="pg-special">∅</span>'


def tokens_html(entries: list[LogprobEntry]) -> str:
    if not entries:
        return ('<div class="pg-empty">Turn on <b>logprobs</b> (and top_logprobs for alternatives) in Sampling to '
                "see each token's probability here.</div>")  # fmt: skip
    spans = []
    for e in entries:
        p = math.exp(e.logprob)
        alts = "\n".join(f"{a.token!r}  {math.exp(a.logprob):.1%}" for a in e.top_logprobs)
        tip = f"{e.token!r}  p={p:.1%}  logprob={e.logprob:.3f}" + (f"\n— top alternatives —\n{alts}" if alts else "")
        spans.append(f'<span class="pg-tok" style="background:{_color(p)}" title="{escape(tip)}">'
                     f"{_shown(e.token)}</span>")  # fmt: skip
    low = sum(1 for e in entries if e.logprob < math.log(0.5))
    mean = sum(math.exp(e.logprob) for e in entries) / len(entries)
    head = (f'<div class="pg-note">{len(entries)} tokens · mean p {mean:.1%} · {low} below 50% · hover a token for '
            "its alternatives</div>")  # fmt: skip
    return head + '<div class="pg-heat">' + "".join(spans) + "</div>"


def chat_messages(c: ChoiceView) -> list[dict[str, Any]]:
    """The reply itself as a heatmap in the chat: Chatbot messages shown under the answer (none for now)."""
    return []


def candidates_html(view: ReplyView) -> str:
    if len(view.choices) < 2:
        return '<div class="pg-empty">Set <b>n</b> > 1 (with temperature > 0) to compare candidates here.</div>'
    cols = []
    ranked = sorted(view.choices.values(), key=lambda c: -(c.cumulative_logprob or -math.inf))
    for rank, c in enumerate(ranked):
        lp = c.cumulative_logprob
        score = "cumulative logprob: turn on logprobs" if lp is None else f"cumulative logprob {lp:.2f}"
        badge = " 🏆" if rank == 0 and lp is not None else ""
        cols.append(f'<div class="pg-cand"><div class="pg-note">choice {c.index}{badge} · {len(c.times_ms)} tokens · '
                    f"{escape(score)} · {escape(c.finish_reason or '…')}</div>"
                    f'<div class="pg-cand-text">{escape(c.content)}</div></div>')  # fmt: skip
    return '<div class="pg-cands">' + "".join(cols) + "</div>"
