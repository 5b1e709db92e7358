"""One reply's statistics as the page and the notebooks show them: `ReplyView.stats()` (playground/client/reply.py)
reads them off the fold, from the engine's own numbers (usage and the per-token timeline), never browser clocks.

Each statistic's English name is its key (the `data-stat` attribute, the notebooks' label); the page shows it
and its meaning in the session's language (`lang`, playground/page/i18n.py)."""

from __future__ import annotations

import html

from playground.client.reply import ReplyStats
from playground.client.say import say

# English name -> (Chinese name, (English meaning, Chinese meaning)); also the names `not_provided` lists.
NAMES: dict[str, tuple[str, tuple[str, str]]] = {
    "prompt tokens": ("提示 token 数", ("tokens of the templated conversation", "套用对话模板后的 token 数")),
    "media tokens": (
        "媒体 token 数",
        (
            "of the prompt: the image, video and audio parts the model took itself",
            "提示中由模型自己读取的图像、视频和音频部分",
        ),
    ),
    "cached tokens": ("缓存 token 数", ("prompt tokens reused from the prefix cache", "从前缀缓存复用的提示 token")),
    "completion tokens": ("生成 token 数", ("tokens generated, reasoning included", "生成的 token，包括推理部分")),
    "reasoning tokens": ("推理 token 数", ("of those, inside the thinking block", "其中位于思考块内的部分")),
    "time to first token": (
        "首 token 时间",
        ("accepted → first token (preparation + queue + prefill)", "接受请求 → 第一个 token（准备 + 排队 + 预填充）"),
    ),
    "preparation": (
        "准备",
        ("validation, media loading or transcription, template, tokens", "校验、加载或转写媒体、套用模板、分词"),
    ),
    "queue wait": (
        "排队等待",
        ("handed to the engine → its first step for this request", "交给引擎 → 引擎为该请求执行第一步"),
    ),
    "prefill": ("预填充", ("the first step: prompt in, first token out", "第一步：读入提示，输出第一个 token")),
    "decode speed": ("解码速度", ("tokens after the first, over their time", "第一个之后的 token 数除以它们的用时")),
    "end to end": ("端到端", ("accepted → last token", "接受请求 → 最后一个 token")),
    "batch size (max)": (
        "批大小（最大）",
        ("most sequences decoded together with this one", "与本请求一同解码的最多序列数"),
    ),
    "speculative acceptance": (
        "推测接受率",
        ("n-gram drafts accepted / drafted (speculative decoding)", "被接受的多元组草稿 / 草稿总数（推测解码）"),
    ),
    "finish reason": ("结束原因", ("stop, length, tool_calls, …", "stop、length、tool_calls、…")),
    "quality": (
        "质量",
        (
            "the reply teacher-forced through a full-precision copy: top-1 agreement and mean KL per token",
            "将回复逐 token 送入全精度副本：top-1 一致率与每 token 平均 KL",
        ),
    ),
    "engine timeline": ("引擎时间线", ("", "")),
    "token ids": ("token id", ("", "")),
}
NOT_PROVIDED = ("not provided", "未提供")
STREAMING = ("streaming…", "生成中…")
BACKENDS = {"remote": "远程", "embedded": "内置引擎"}


def name(key: str, lang: str = "en") -> str:
    """A statistic's name as shown in `lang`."""
    return NAMES[key][0] if lang == "zh" and key in NAMES else key


def _ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1000:.2f} s" if value >= 10_000 else f"{value:.0f} ms"


def _n(value: int | None) -> str:
    return "–" if value is None else f"{value:,}"


def rows(s: ReplyStats, lang: str = "en") -> list[tuple[str, str, str]]:
    """(name, value, what it means) in display order, in `lang`; what the backend did not provide says so, not
    '–'."""
    return [(name(k, lang), v, why) for k, v, why in _keyed(s, lang)]


def _keyed(s: ReplyStats, lang: str) -> list[tuple[str, str, str]]:
    """(English name, value, meaning in `lang`)."""
    missing = say(NOT_PROVIDED, lang)
    return [(k, missing if k in s.not_provided else v, say(NAMES[k][1], lang)) for k, v in _values(s, lang)]


def _values(s: ReplyStats, lang: str) -> list[tuple[str, str]]:
    media = [] if s.media_tokens is None else [("media tokens", _n(s.media_tokens))]
    return [
        ("prompt tokens", _n(s.prompt_tokens)),
        *media,
        ("cached tokens", _n(s.cached_tokens)),
        ("completion tokens", _n(s.completion_tokens)),
        ("reasoning tokens", _n(s.reasoning_tokens)),
        ("time to first token", _ms(s.ttft_ms)),
        ("preparation", _ms(s.prepare_ms)),
        ("queue wait", _ms(s.queue_ms)),
        ("prefill", _ms(s.prefill_ms)),
        ("decode speed", "–" if s.decode_tps is None else f"{s.decode_tps:.1f} tok/s"),
        ("end to end", _ms(s.e2e_ms)),
        ("batch size (max)", _n(s.max_batch)),
        *_speculative(s),
        ("finish reason", s.finish_reason or (say(STREAMING, lang) if s.streaming else "–")),
        *([("quality", s.quality)] if s.quality else []),
    ]


def _speculative(s: ReplyStats) -> list[tuple[str, str]]:
    """The acceptance rate row, only for replies that ran with speculative decoding."""
    spec = s.speculative
    if spec is None:
        return []
    drafted, accepted = spec.get("drafted", 0), spec.get("accepted", 0)
    rate = f"{accepted / drafted:.0%}" if drafted else "–"
    return [("speculative acceptance", f"{rate} ({accepted:,} / {drafted:,})")]


def summary(s: ReplyStats, lang: str = "en") -> str:
    """One line for the transcript: tokens · speed · TTFT · total · finish."""
    parts = [f"{s.completion_tokens} tok"]
    if s.decode_tps is not None:
        parts.append(f"{s.decode_tps:.1f} tok/s")
    if s.ttft_ms is not None:
        parts.append(f"TTFT {_ms(s.ttft_ms)}")
    if s.e2e_ms is not None:
        parts.append(_ms(s.e2e_ms))
    parts.append(s.finish_reason or say(STREAMING, lang))
    return " · ".join(parts)


def markdown(s: ReplyStats, lang: str = "en") -> str:
    head = say(("| statistic | value |", "| 统计 | 值 |"), lang)
    return head + "\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v, _ in rows(s, lang))


def table_html(s: ReplyStats, caption: str | None = None, lang: str = "en") -> str:
    """The Stats tab's table; each value cell's `data-stat` is the statistic's English name in every language."""
    body = "".join(
        f'<tr title="{html.escape(why)}"><th>{html.escape(name(k, lang))}</th><td data-stat="{html.escape(k)}">'
        f"{html.escape(v)}</td></tr>"
        for k, v, why in _keyed(s, lang)
    )
    if caption is None:
        caption = say(
            ("this reply, streaming…", "本条回复，生成中…")
            if s.streaming
            else ("the selected reply · click any reply to inspect it", "所选回复 · 点击任意回复即可查看"),
            lang,
        )
    note = ""
    if s.not_provided:
        backend = BACKENDS.get(s.backend, s.backend) if lang == "zh" else s.backend
        missing = ("、" if lang == "zh" else ", ").join(name(k, lang) for k in s.not_provided)
        text = say(
            (
                "Not provided by the {backend} backend: {missing}. Times are when chunks arrived here (network "
                "included), not engine times.",
                "{backend}后端未提供：{missing}。时间是数据块到达此处的时刻（含网络），不是引擎时间。",
            ),
            lang,
            backend=backend,
            missing=missing,
        )
        note = f'<p class="pg-missing" data-stat="not provided">{html.escape(text)}</p>'
    return f'<table class="pg-stats"><caption>{caption}</caption>{body}</table>{note}'
