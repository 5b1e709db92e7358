"""The per-token timeline as a small inline SVG: queue wait, prefill, every decode step, batch size per step and the
reasoning/answer boundary. Drawn here rather than with a plotting component so it re-renders cheaply ten times a
second while streaming, needs no JavaScript, and shows each token's numbers on hover."""

from __future__ import annotations

from html import escape

from playground.reply import ChoiceView

W, H = 560, 230
LEFT, RIGHT, TOP, BOTTOM = 46, 40, 30, 30
LANE_H = 12
MAX_POINTS = 1200  # beyond this, every k-th step is drawn (hover still names the token)

QUEUE, PREFILL, THINK, ANSWER, BATCH = "#9ca3af", "#3b82f6", "#a855f7", "#10b981", "#f59e0b"
PREPARE = "#64748b"


def _nice(value: float) -> float:
    """A round axis maximum at or above value."""
    if value <= 0:
        return 1.0
    step = 10 ** len(str(int(value))) / 10 if value >= 1 else 0.1
    for m in (1, 2, 2.5, 5, 10):
        if m * step >= value:
            return m * step
    return 10 * step


def _ms(v: float) -> str:
    return f"{v:.1f} ms" if v < 100 else f"{v:.0f} ms"


def svg(c: ChoiceView) -> str:
    t, n = c.times_ms, len(c.times_ms)
    if not n:
        return '<div class="pg-empty">Send a message to see each token\'s timing here.</div>'
    span = _nice(t[-1])
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM - LANE_H - 10
    plot_top = TOP + LANE_H + 10

    def x(ms: float) -> float:
        return LEFT + pw * ms / span

    boundary = c.reasoning_tokens if c.reasoning else 0
    steps = c.gaps_ms[1:]
    ymax = _nice(max(steps, default=1.0))
    # A stream without the engine's timeline (a remote server) gets no queue/prefill split and no batch line: its
    # times are arrivals here, so the split is not guessed.
    engine = c.engine_timeline
    batches, waits = (c.batch_sizes, c.queue_waits_us) if engine else ([], [])
    bmax = max(max(batches, default=1), 1)
    out = [f'<svg class="pg-timeline" viewBox="0 0 {W} {H}" width="100%" role="img" '
           f'aria-label="per-token timeline" xmlns="http://www.w3.org/2000/svg" font-size="10" '
           f'font-family="ui-sans-serif, system-ui, sans-serif">']  # fmt: skip
    legend = [
        (PREPARE, "prepare"),
        (QUEUE, "queue"),
        (PREFILL, "prefill"),
        (THINK, "reasoning"),
        (ANSWER, "answer"),
        (BATCH, "batch"),
    ]
    if not engine:
        legend = [(PREFILL, "to first token"), (THINK, "reasoning"), (ANSWER, "answer")]
    lx = LEFT
    for color, name in legend:
        out.append(f'<rect x="{lx}" y="6" width="9" height="9" fill="{color}"/>'
                   f'<text x="{lx + 12}" y="14" fill="currentColor">{name}</text>')  # fmt: skip
        lx += 22 + 6 * len(name)

    # the lane: where the request's time went, step by step
    p0 = c.prepare_ms or 0.0
    q0 = p0 + (waits[0] / 1000 if waits else 0.0)
    lane = [
        (0.0, p0, PREPARE, f"preparation {_ms(p0)} (media, template, tokens)"),
        (p0, q0, QUEUE, f"queue wait {_ms(q0 - p0)}"),
        (q0, t[0], PREFILL, f"prefill {_ms(t[0] - q0)}"),
    ]
    if not engine:
        lane = [(0.0, t[0], PREFILL, f"first token after {_ms(t[0])} (queue, prefill and network, not split)")]
    run_start, run_color = None, None
    for i in range(1, n):
        wait = waits[i] / 1000 if i < len(waits) else 0.0
        color = THINK if i < boundary else ANSWER
        if (x(wait) - x(0)) >= 1:  # a visible pause between steps: another request's prefill, a schedule gap
            if run_start is not None:
                lane.append((run_start, t[i - 1], run_color, "decode"))
            lane.append((t[i - 1], t[i - 1] + wait, QUEUE, f"wait {_ms(wait)} before token {i}"))
            run_start, run_color = t[i - 1] + wait, color
        elif run_color != color:
            if run_start is not None:
                lane.append((run_start, t[i - 1], run_color, "decode"))
            run_start, run_color = t[i - 1], color
    if run_start is not None:
        lane.append((run_start, t[-1], run_color, "decode"))
    for a, b, color, tip in lane:
        out.append(f'<rect x="{x(a):.1f}" y="{TOP}" width="{max(x(b) - x(a), 0.5):.1f}" height="{LANE_H}" '
                   f'fill="{color}"><title>{escape(tip)}</title></rect>')  # fmt: skip

    # axes
    bottom = plot_top + ph
    out.append(f'<line x1="{LEFT}" y1="{bottom}" x2="{LEFT + pw}" y2="{bottom}" stroke="currentColor" '
               f'stroke-opacity="0.4"/><line x1="{LEFT}" y1="{plot_top}" x2="{LEFT}" y2="{bottom}" '
               f'stroke="currentColor" stroke-opacity="0.4"/>')  # fmt: skip
    for frac in (0, 0.5, 1):
        out.append(f'<text x="{x(span * frac):.1f}" y="{bottom + 14}" text-anchor="middle" fill="currentColor">'
                   f"{_ms(span * frac)}</text>")  # fmt: skip
        y = bottom - ph * frac
        out.append(f'<text x="{LEFT - 4}" y="{y + 3:.1f}" text-anchor="end" fill="currentColor">'
                   f"{ymax * frac:g}</text>")  # fmt: skip
    if not engine:
        out.append(f'<text x="{LEFT + pw / 2}" y="{H - 2}" text-anchor="middle" fill="currentColor">'
                   f"dots: ms between tokens as they arrived here · x: time since the request was sent</text>")  # fmt: skip
    else:
        out.append(f'<text x="{LEFT + pw + 4}" y="{plot_top - 4}" fill="{BATCH}">batch</text>'
                   f'<text x="{LEFT + pw + 4}" y="{plot_top + 8}" fill="{BATCH}">{bmax}</text>'
                   f'<text x="{LEFT + pw / 2}" y="{H - 2}" text-anchor="middle" fill="currentColor">'
                   f"dots: ms per decode step · line: batch size · x: time since the request was accepted</text>")  # fmt: skip

    # batch size per step, as a step line on the right axis
    pts = []
    for i in range(n):
        b = batches[i] if i < len(batches) else 0
        y = bottom - ph * b / bmax
        if i:
            pts.append(f"{x(t[i - 1]):.1f},{y:.1f}")
        pts.append(f"{x(t[i]):.1f},{y:.1f}")
    if batches:
        out.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="{BATCH}" stroke-width="1.2" '
                   f'stroke-opacity="0.8"/>')  # fmt: skip

    # every decode step: its duration, coloured by phase, with its numbers on hover
    stride = max(1, (n - 1) // MAX_POINTS + 1)
    for i in range(1, n, stride):
        y = bottom - ph * min(steps[i - 1] / ymax, 1.0)
        color = THINK if i < boundary else ANSWER
        tip = f"token {i + 1}: {_ms(steps[i - 1])}"
        if i < len(batches):
            tip += f", batch {batches[i]}"
        if i < len(waits):
            tip += f", waited {_ms(waits[i] / 1000)}"
        out.append(f'<circle cx="{x(t[i]):.1f}" cy="{y:.1f}" r="2.2" fill="{color}"><title>{tip}</title></circle>')
    if c.reasoning and 0 < boundary < n:
        bx = x(t[boundary - 1])
        out.append(f'<line x1="{bx:.1f}" y1="{TOP}" x2="{bx:.1f}" y2="{bottom}" stroke="{THINK}" '
                   f'stroke-dasharray="4 3"><title>reasoning ends after token {boundary}</title></line>'
                   f'<text x="{bx + 3:.1f}" y="{plot_top + 10}" fill="{THINK}">answer →</text>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)
