"""The per-token timeline as a small inline SVG: queue wait, prefill, every decode step, batch size per step and the
reasoning/answer boundary. Drawn here rather than with a plotting component so it re-renders cheaply ten times a
second while streaming, needs no JavaScript, and shows each token's numbers on hover."""

from __future__ import annotations

import math
from html import escape

from playground.client.reply import ChoiceView
from playground.page.i18n import say

W, H = 560, 230
NARROW = (270, 256)  # a half-panel column (an A/B side, ~230 px): drawn at about the Stats tab's scale, not shrunk
LEFT, RIGHT, TOP, BOTTOM = 46, 40, 30, 30
LANE_H = 12
MAX_POINTS = 1200  # beyond this, every k-th step is drawn (hover still names the token)

QUEUE, PREFILL, THINK, ANSWER, BATCH = "#9ca3af", "#3b82f6", "#a855f7", "#10b981", "#f59e0b"
PREPARE = "#64748b"


# Every visible string as its (English, Chinese) pair (playground.page.i18n.say).
EMPTY = ("Send a message to see each token's timing here.", "发送一条消息，即可在此查看每个 token 的耗时。")
ARIA = ("per-token timeline", "逐 token 时间线")
NAMES = {
    "prepare": ("prepare", "准备"),
    "queue": ("queue", "排队"),
    "prefill": ("prefill", "预填充"),
    "reasoning": ("reasoning", "推理"),
    "answer": ("answer", "回答"),
    "batch": ("batch", "批大小"),
    "first": ("to first token", "首 token 前"),
}
TIPS = {
    "prepare": ("preparation {ms} (media, template, tokens)", "准备 {ms}（媒体、模板、分词）"),
    "queue": ("queue wait {ms}", "排队等待 {ms}"),
    "prefill": ("prefill {ms}", "预填充 {ms}"),
    "first": (
        "first token after {ms} (queue, prefill and network, not split)",
        "{ms} 后收到首个 token（排队、预填充与网络，未拆分）",
    ),
    "decode": ("decode", "解码"),
    "wait": ("wait {ms} before token {i}", "第 {i} 个 token 前等待 {ms}"),
    "token": ("token {i}: {ms}", "第 {i} 个 token：{ms}"),
    "batch": (", batch {b}", "，批大小 {b}"),
    "waited": (", waited {ms}", "，等待 {ms}"),
    "ends": ("reasoning ends after token {i}", "推理在第 {i} 个 token 后结束"),
    "answer": ("answer →", "回答 →"),
}
Y_TITLE = {True: ("ms per decode step", "每个解码步耗时 (ms)"), False: ("ms between tokens", "token 间隔 (ms)")}
CAPTION = {
    True: (
        "dots: ms per decode step · line: batch size · x: time since the request was accepted",
        "圆点：每个解码步的耗时 · 折线：批大小 · 横轴：自请求被接受起的时间",
    ),
    False: (
        "dots: ms between tokens as they arrived here · x: time since the request was sent",
        "圆点：token 到达此处的间隔 · 横轴：自请求发出起的时间",
    ),
}
NICE_STEPS = (1, 2, 2.5, 5, 10)


def axis(value: float, ticks: int = 5) -> tuple[float, float]:
    """(end, step) of an axis from 0 that fits value: a round step (1, 2, 2.5 or 5 times a power of ten) giving
    at most `ticks` intervals, and the first multiple of it at or above value, so the data fills most of the axis
    (a 29 s reply gets 0-30 s, not 0-50 s)."""
    if value <= 0:
        return 1.0, 0.25
    raw = value / ticks
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in NICE_STEPS if m * power >= raw * (1 - 1e-9))
    return math.ceil(value / step - 1e-9) * step, step


def _ms(v: float) -> str:
    return f"{v:.1f} ms" if v < 100 else f"{v:.0f} ms"


def tick_label(v: float, end: float) -> str:
    """An x tick: in ms on a short axis, in seconds once it reaches 2 s."""
    return f"{v / 1000:g} s" if end >= 2000 else f"{v:g} ms"


def _width(text: str) -> int:
    """About how wide text is at the chart's 10 px font: CJK characters are about twice a Latin one."""
    return sum(10 if ord(ch) > 0x2E80 else 6 for ch in text)


def _lines(items: list[str], room: float, sep: str = " · ") -> list[str]:
    """items joined by sep into as few lines as fit `room` (in the chart's units), none split."""
    lines: list[str] = []
    for item in items:
        if lines and _width(lines[-1] + sep + item) <= room:
            lines[-1] += sep + item
        else:
            lines.append(item)
    return lines


def svg(c: ChoiceView, lang: str = "en", width: int = W, height: int = H) -> str:
    """The chart; `width` x `height`: its drawing's proportions (a narrow column, such as an A/B side, gets a
    narrower, taller one, so it is drawn at a readable size rather than shrunk); the legend and the caption wrap."""
    t, n = c.times_ms, len(c.times_ms)
    if not n:
        return f'<div class="pg-empty">{escape(say(EMPTY, lang))}</div>'
    span, xstep = axis(t[-1], 5 if width >= W else max(2, (width - LEFT - RIGHT) // 60))  # ticks ~60 apart or more

    def x(ms: float) -> float:
        return LEFT + pw * ms / span

    def tip(key: str, **values: object) -> str:
        return say(TIPS[key], lang, **values)

    boundary = c.reasoning_tokens if c.reasoning else 0
    steps = c.gaps_ms[1:]
    ymax, ystep = axis(max(steps, default=1.0), 4)
    # A stream without the engine's timeline (a remote server) gets no queue/prefill split and no batch line: its
    # times are arrivals here, so the split is not guessed.
    engine = c.engine_timeline
    batches, waits = (c.batch_sizes, c.queue_waits_us) if engine else ([], [])
    bmax = max(max(batches, default=1), 1)
    legend = [
        (PREPARE, "prepare"),
        (QUEUE, "queue"),
        (PREFILL, "prefill"),
        (THINK, "reasoning"),
        (ANSWER, "answer"),
        (BATCH, "batch"),
    ]
    if not engine:
        legend = [(PREFILL, "first"), (THINK, "reasoning"), (ANSWER, "answer")]
    spots, lx, ly = [], LEFT, 0  # each legend entry's place: a new row when the next one would pass the right edge
    for color, key in legend:
        name = say(NAMES[key], lang)
        if lx > LEFT and lx + 12 + _width(name) > width - 4:
            lx, ly = LEFT, ly + 14
        spots.append((color, name, lx, ly))
        lx += 22 + _width(name)
    caption = _lines(say(CAPTION[engine], lang).split(" · "), width - 8)
    top, low = TOP + ly, BOTTOM + 12 * (len(caption) - 1)
    pw, ph = width - LEFT - RIGHT, height - top - low - LANE_H - 10
    plot_top = top + LANE_H + 10
    out = [
        f'<svg class="pg-timeline" viewBox="0 0 {width} {height}" width="100%" role="img" '
        f'aria-label="{escape(say(ARIA, lang))}" xmlns="http://www.w3.org/2000/svg" font-size="10" '
        f'font-family="ui-sans-serif, system-ui, sans-serif">'
    ]
    for color, name, lx, ly in spots:
        out.append(
            f'<rect x="{lx}" y="{6 + ly}" width="9" height="9" fill="{color}"/>'
            f'<text x="{lx + 12}" y="{14 + ly}" fill="currentColor">{escape(name)}</text>'
        )

    # the lane: where the request's time went, step by step
    p0 = c.prepare_ms or 0.0
    q0 = p0 + (waits[0] / 1000 if waits else 0.0)
    lane = [
        (0.0, p0, PREPARE, tip("prepare", ms=_ms(p0))),
        (p0, q0, QUEUE, tip("queue", ms=_ms(q0 - p0))),
        (q0, t[0], PREFILL, tip("prefill", ms=_ms(t[0] - q0))),
    ]
    if not engine:
        lane = [(0.0, t[0], PREFILL, tip("first", ms=_ms(t[0])))]
    decode = tip("decode")
    run_start: float | None = None
    run_color = ""  # no run yet: differs from every colour, so the first step starts one
    for i in range(1, n):
        wait = waits[i] / 1000 if i < len(waits) else 0.0
        color = THINK if i < boundary else ANSWER
        if (x(wait) - x(0)) >= 1:  # a visible pause between steps: another request's prefill, a schedule gap
            if run_start is not None:
                lane.append((run_start, t[i - 1], run_color, decode))
            lane.append((t[i - 1], t[i - 1] + wait, QUEUE, tip("wait", ms=_ms(wait), i=i)))
            run_start, run_color = t[i - 1] + wait, color
        elif run_color != color:
            if run_start is not None:
                lane.append((run_start, t[i - 1], run_color, decode))
            run_start, run_color = t[i - 1], color
    if run_start is not None:
        lane.append((run_start, t[-1], run_color, decode))
    for a, b, color, text in lane:
        out.append(
            f'<rect x="{x(a):.1f}" y="{top}" width="{max(x(b) - x(a), 0.5):.1f}" height="{LANE_H}" '
            f'fill="{color}"><title>{escape(text)}</title></rect>'
        )

    # axes: x from 0 to a round end just past the last token, in ms or s; y in ms, its unit along it
    bottom = plot_top + ph
    out.append(
        f'<line x1="{LEFT}" y1="{bottom}" x2="{LEFT + pw}" y2="{bottom}" stroke="currentColor" '
        f'stroke-opacity="0.4"/><line x1="{LEFT}" y1="{plot_top}" x2="{LEFT}" y2="{bottom}" '
        f'stroke="currentColor" stroke-opacity="0.4"/>'
    )
    for k in range(round(span / xstep) + 1):
        v = k * xstep
        anchor = "end" if k and abs(v - span) < xstep / 2 else "middle"
        out.append(
            f'<line x1="{x(v):.1f}" y1="{bottom}" x2="{x(v):.1f}" y2="{bottom + 3}" stroke="currentColor" '
            f'stroke-opacity="0.4"/><text class="pg-xtick" x="{x(v) + (3 if anchor == "end" else 0):.1f}" '
            f'y="{bottom + 14}" text-anchor="{anchor}" fill="currentColor">{tick_label(v, span)}</text>'
        )
    for k in range(round(ymax / ystep) + 1):
        v = k * ystep
        y = bottom - ph * v / ymax
        out.append(
            f'<text class="pg-ytick" x="{LEFT - 4}" y="{y + 3:.1f}" text-anchor="end" fill="currentColor">{v:g}</text>'
        )
    out.append(
        f'<text class="pg-yunit" transform="translate(9 {plot_top + ph / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle" fill="currentColor">{escape(say(Y_TITLE[engine], lang))}</text>'
    )
    if engine:
        out.append(
            f'<text x="{LEFT + pw + 4}" y="{plot_top - 4}" fill="{BATCH}">{escape(say(NAMES["batch"], lang))}'
            f'</text><text x="{LEFT + pw + 4}" y="{plot_top + 8}" fill="{BATCH}">{bmax}</text>'
        )
    for k, line in enumerate(caption):
        out.append(
            f'<text class="pg-caption" x="{width / 2}" y="{height - 2 - 12 * (len(caption) - 1 - k)}" '
            f'text-anchor="middle" fill="currentColor">{escape(line)}</text>'
        )

    # batch size per step, as a step line on the right axis
    pts = []
    for i in range(n):
        b = batches[i] if i < len(batches) else 0
        y = bottom - ph * b / bmax
        if i:
            pts.append(f"{x(t[i - 1]):.1f},{y:.1f}")
        pts.append(f"{x(t[i]):.1f},{y:.1f}")
    if batches:
        out.append(
            f'<polyline points="{" ".join(pts)}" fill="none" stroke="{BATCH}" stroke-width="1.2" stroke-opacity="0.8"/>'
        )

    # every decode step: its duration, coloured by phase, with its numbers on hover
    stride = max(1, (n - 1) // MAX_POINTS + 1)
    for i in range(1, n, stride):
        y = bottom - ph * min(steps[i - 1] / ymax, 1.0)
        color = THINK if i < boundary else ANSWER
        text = tip("token", i=i + 1, ms=_ms(steps[i - 1]))
        if i < len(batches):
            text += tip("batch", b=batches[i])
        if i < len(waits):
            text += tip("waited", ms=_ms(waits[i] / 1000))
        out.append(
            f'<circle cx="{x(t[i]):.1f}" cy="{y:.1f}" r="2.2" fill="{color}"><title>{escape(text)}</title></circle>'
        )
    if c.reasoning and 0 < boundary < n:
        bx = x(t[boundary - 1])
        out.append(
            f'<line x1="{bx:.1f}" y1="{top}" x2="{bx:.1f}" y2="{bottom}" stroke="{THINK}" '
            f'stroke-dasharray="4 3"><title>{escape(tip("ends", i=boundary))}</title></line>'
            f'<text x="{bx + 3:.1f}" y="{plot_top + 10}" fill="{THINK}">{escape(tip("answer"))}</text>'
        )
    out.append("</svg>")
    return "".join(out)
