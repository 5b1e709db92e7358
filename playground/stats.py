"""One reply's statistics from the engine's own numbers: usage and the per-token timeline, never browser clocks."""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from playground.render import ReplyView


@dataclass
class ReplyStats:
    completion_tokens: int
    prompt_tokens: int | None = None  # known once the usage chunk arrived
    media_tokens: int | None = None  # of the prompt, what the model's own image / video / audio parts took
    cached_tokens: int | None = None
    reasoning_tokens: int = 0
    ttft_ms: float | None = None  # request accepted -> first token ready
    prepare_ms: float | None = None  # accepted -> handed to the engine: media loading or transcription, template
    queue_ms: float | None = None  # handed to the engine -> the first step started
    prefill_ms: float | None = None  # the first step itself
    decode_tps: float | None = None  # tokens after the first, over their time
    e2e_ms: float | None = None  # accepted -> last token ready
    max_batch: int = 0
    finish_reason: str | None = None
    streaming: bool = False
    backend: str = "embedded"
    not_provided: list[str] = field(default_factory=list)  # statistics this backend's stream does not carry


# What a stream must carry for each statistic that only an engine knows (a remote server's SSE has none of them).
ENGINE_ONLY = {"preparation": "queue_waits_us", "queue wait": "queue_waits_us", "prefill": "queue_waits_us", "batch size (max)": "batch_sizes",
               "token ids": "token_ids"}  # fmt: skip


def compute(view: ReplyView, index: int = 0) -> ReplyStats:
    c = view.choices.get(index) or view.first
    t = c.times_ms
    usage = view.usage_of(index)
    s = ReplyStats(completion_tokens=len(t), reasoning_tokens=c.reasoning_tokens, streaming=not view.done,
                   max_batch=max(c.batch_sizes, default=0))  # fmt: skip
    if usage is not None:
        s.prompt_tokens, s.cached_tokens = usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens
    if t:
        s.ttft_ms, s.e2e_ms = t[0], t[-1]
        if c.queue_waits_us:
            s.prepare_ms = c.prepare_ms
            s.queue_ms = c.queue_waits_us[0] / 1000
            s.prefill_ms = max(0.0, t[0] - (s.prepare_ms or 0.0) - s.queue_ms)
        if len(t) > 1 and t[-1] > t[0]:
            s.decode_tps = (len(t) - 1) / ((t[-1] - t[0]) / 1000)
    s.finish_reason = c.finish_reason or ("stopped" if view.stopped else "error" if view.error else None)
    s.backend = view.backend
    if view.media:
        s.media_tokens = sum(int(m.get("tokens") or 0) for m in view.media)
    if view.backend != "embedded" and t:
        s.not_provided = ["engine timeline"] + [name for name, attr in ENGINE_ONLY.items() if not getattr(c, attr)]
        if usage is not None and "prompt_tokens_details" not in usage.model_fields_set:  # vLLM sends null
            s.cached_tokens = None
            s.not_provided.append("cached tokens")
    return s


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
