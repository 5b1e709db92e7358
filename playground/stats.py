"""One reply's statistics as the page and the notebooks show them: `ReplyView.stats()` (playground/reply.py) reads
them off the fold, from the engine's own numbers (usage and the per-token timeline), never browser clocks."""

from __future__ import annotations

import html

from playground.reply import ReplyStats


def _ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1000:.2f} s" if value >= 10_000 else f"{value:.0f} ms"


def _n(value: int | None) -> str:
    return "–" if value is None else f"{value:,}"


def rows(s: ReplyStats) -> list[tuple[str, str, str]]:
    """(label, value, what it means) in display order; what the backend did not provide says so, not '–'."""
    out = _rows(s)
    if not s.not_provided:
        return out
    return [(k, "not provided", why) if k in s.not_provided else (k, v, why) for k, v, why in out]


def _rows(s: ReplyStats) -> list[tuple[str, str, str]]:
    media = [] if s.media_tokens is None else [("media tokens", _n(s.media_tokens), "of the prompt: the image, "
                                                 "video and audio parts the model took itself")]  # fmt: skip
    return [
        ("prompt tokens", _n(s.prompt_tokens), "tokens of the templated conversation"),
        *media,
        ("cached tokens", _n(s.cached_tokens), "prompt tokens reused from the prefix cache"),
        ("completion tokens", _n(s.completion_tokens), "tokens generated, reasoning included"),
        ("reasoning tokens", _n(s.reasoning_tokens), "of those, inside the thinking block"),
        ("time to first token", _ms(s.ttft_ms), "accepted → first token (preparation + queue + prefill)"),
        ("preparation", _ms(s.prepare_ms), "validation, media loading or transcription, template, tokens"),
        ("queue wait", _ms(s.queue_ms), "handed to the engine → its first step for this request"),
        ("prefill", _ms(s.prefill_ms), "the first step: prompt in, first token out"),
        ("decode speed", "–" if s.decode_tps is None else f"{s.decode_tps:.1f} tok/s", "tokens after the first, "
         "over their time"),
        ("end to end", _ms(s.e2e_ms), "accepted → last token"),
        ("batch size (max)", _n(s.max_batch), "most sequences decoded together with this one"),
        ("finish reason", s.finish_reason or ("streaming…" if s.streaming else "–"), "stop, length, tool_calls, …"),
    ]  # fmt: skip


def summary(s: ReplyStats) -> str:
    """One line for the transcript: tokens · speed · TTFT · total · finish."""
    parts = [f"{s.completion_tokens} tok"]
    if s.decode_tps is not None:
        parts.append(f"{s.decode_tps:.1f} tok/s")
    if s.ttft_ms is not None:
        parts.append(f"TTFT {_ms(s.ttft_ms)}")
    if s.e2e_ms is not None:
        parts.append(_ms(s.e2e_ms))
    parts.append(s.finish_reason or "streaming…")
    return " · ".join(parts)


def markdown(s: ReplyStats) -> str:
    return "| statistic | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v, _ in rows(s))


def table_html(s: ReplyStats, caption: str | None = None) -> str:
    body = "".join(
        f'<tr title="{html.escape(why)}"><th>{html.escape(k)}</th><td data-stat="{html.escape(k)}">'
        f"{html.escape(v)}</td></tr>"
        for k, v, why in rows(s)
    )
    if caption is None:
        caption = "this reply, streaming…" if s.streaming else "the selected reply · click any reply to inspect it"
    note = ""
    if s.not_provided:
        note = (f'<p class="pg-missing" data-stat="not provided">Not provided by the {html.escape(s.backend)} '
                f"backend: {html.escape(', '.join(s.not_provided))}. Times are when chunks arrived here "
                "(network included), not engine times.</p>")  # fmt: skip
    return f'<table class="pg-stats"><caption>{caption}</caption>{body}</table>{note}'
