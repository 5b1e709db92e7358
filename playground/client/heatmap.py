"""The one token heatmap renderer: each token of a reply shaded by the engine's probability for it, with a native
tooltip of its probability and top alternatives.

A token is `<span class="pg-tok pg-pN">` (N: the probability's tenth, its colour one of COLOURS). The page
(playground/page/heatmap.py) adds its popover data, legend and branch buttons around these spans and colours the
classes by `colour_css()` (part of the page's style sheet); the notebooks' `heatmap_html` is self-contained, so its
spans carry their colours inline (a notebook has no page CSS).
"""

from __future__ import annotations

import math
from html import escape

from engine.protocol.response import LogprobEntry

BUCKETS = 10  # colour classes pg-p0 (p < 10%) .. pg-p9 (p >= 90%)
# Per tenth of probability: red and strong for an unlikely token, nearly clear for a certain one.
COLOURS = (
    "hsla(2, 90%, 55%, .65)",
    "hsla(7, 90%, 55%, .59)",
    "hsla(11, 90%, 55%, .53)",
    "hsla(16, 90%, 55%, .47)",
    "hsla(20, 90%, 55%, .41)",
    "hsla(25, 90%, 55%, .35)",
    "hsla(29, 90%, 55%, .29)",
    "hsla(34, 90%, 55%, .23)",
    "hsla(38, 90%, 55%, .17)",
    "hsla(43, 90%, 55%, .11)",
)
TIP_ALTS = 5  # the native tooltip's alternatives per token

# Accepted speculative drafts (engine/core/speculative.py): underlined. Inline, as the chat's sanitiser keeps `style`.
SPEC_CLASS = "pg-spec"
SPEC_STYLE = "text-decoration: underline 2px #0284c7; text-underline-offset: 3px"
BOX_STYLE = "white-space: pre-wrap; line-height: 1.6"  # the notebooks' box, without the page's .pg-heatmap rule


def bucket(p: float) -> int:
    return min(BUCKETS - 1, max(0, int(p * BUCKETS)))


def colour_css() -> str:
    """The colour classes' rules, for a page's style sheet."""
    return "\n".join(f".pg-p{b} {{background:{c}}}" for b, c in enumerate(COLOURS))


def shown(token: str) -> str:
    """A token's text as HTML: escaped, a newline as ↵ and a line break, an empty token as ∅."""
    if not token:
        return '<span class="pg-special">∅</span>'
    return escape(token).replace("\r", "").replace("\n", "↵<br>")


def tip(e: LogprobEntry) -> str:
    """The native tooltip: the token's probability and logprob, and its first TIP_ALTS alternatives."""
    alts = "\n".join(f"{a.token!r}  {math.exp(a.logprob):.1%}" for a in e.top_logprobs[:TIP_ALTS])
    more = len(e.top_logprobs) - TIP_ALTS
    text = f"{e.token!r}  p={math.exp(e.logprob):.1%}  logprob={e.logprob:.3f}"
    if e.sampler_logprob is not None:
        text += f"  ·  after samplers p={math.exp(e.sampler_logprob):.1%}"
    return text + (f"\n— top alternatives —\n{alts}" if alts else "") + (f"\n+{more}" if more > 0 else "")


def token_span(b: int, token: str, *, classes: str = "", style: str = "", title: str = "", inline: bool = False) -> str:
    """One token in colour class `b`; `inline`: its colour in its own style too."""
    if inline:
        style = f"background:{COLOURS[b]}" + (f"; {style}" if style else "")
    attrs = (f' style="{style}"' if style else "") + (f' title="{escape(title)}"' if title else "")
    return f'<span class="pg-tok pg-p{b}{classes}"{attrs}>{shown(token)}</span>'


def token_spans(
    entries: list[LogprobEntry], *, titles: bool = True, accepted: list[int] | None = None, inline: bool = False
) -> str:
    """The tokens in their colours; `titles`: native tooltips too; `accepted`: the indices of accepted speculative
    drafts, underlined; `inline`: colours in each span's style (for output without the page's CSS)."""
    drafted = set(accepted or ())
    return "".join(
        token_span(
            bucket(math.exp(e.logprob)),
            e.token,
            classes=f" {SPEC_CLASS}" if i in drafted else "",
            style=SPEC_STYLE if i in drafted else "",
            title=tip(e) if titles else "",
            inline=inline,
        )
        for i, e in enumerate(entries)
    )


def heatmap_html(entries: list[LogprobEntry]) -> str:
    """The reply with each token shaded by its probability (red: unlikely, clear: near certain), self-contained for a
    notebook. Hovering a token shows its probability and the alternatives the engine reported (`top_logprobs`)."""
    return f'<div class="pg-heatmap" style="{BOX_STYLE}">{token_spans(entries, inline=True)}</div>'
