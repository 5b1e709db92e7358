"""The prompt's progress in the chat while a long prompt is read (issue 19, point 3): a bar under the pending reply,
with how many tokens are done, how many came from the prefix cache, and an estimate of the time left, from the
`prompt_progress` chunks the embedded engine streams (llama.cpp's shape). Gone once the first token arrives.

The estimate is the rate between the first and the latest report (the engine's own clock, so the page's update
throttle does not skew it); with one report only, its tokens over the time since the request was accepted (which
includes the queue, so it errs long).
"""

from __future__ import annotations

from engine.protocol.response import PromptProgressInfo
from playground.client.reply import ReplyView
from playground.page.i18n import say

READING = ("Reading the prompt: {done:,} of {total:,} tokens", "正在读取提示：{done:,} / {total:,} 个 token")
CACHED = ("{n:,} from the prefix cache", "{n:,} 个来自前缀缓存")
LEFT = ("about {s} left", "约剩 {s}")
READ = (
    "Prompt read: {total:,} tokens, waiting for the first token",
    "提示已读完：{total:,} 个 token，等待第一个 token",
)


def seconds_left(reports: list[PromptProgressInfo]) -> float | None:
    """Seconds until the prompt is read at the rate seen so far; None when there is no rate yet."""
    last = reports[-1]
    left = last.total - last.processed
    if left <= 0:
        return 0.0
    first = reports[0]
    if len(reports) > 1 and last.time_ms > first.time_ms and last.processed > first.processed:
        rate = (last.processed - first.processed) / (last.time_ms - first.time_ms)
    elif last.time_ms > 0 and last.processed > last.cache:
        rate = (last.processed - last.cache) / last.time_ms
    else:
        return None
    return left / rate / 1000


def _duration(s: float, lang: str) -> str:
    if s < 1:
        return "<1 s"
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min"


def progress_html(reply: ReplyView, lang: str = "en") -> str | None:
    """The bar for a reply still reading its prompt; None once it has a token, is done, or has no reports."""
    if not reply.progress or reply.done or reply.first.times_ms:
        return None
    p = reply.progress[-1]
    share = p.processed / p.total if p.total else 1.0
    if p.processed >= p.total:
        line = say(READ, lang, total=p.total)
    else:
        facts = [say(READING, lang, done=p.processed, total=p.total)]
        if p.cache:
            facts.append(say(CACHED, lang, n=p.cache))
        left = seconds_left(reply.progress)
        if left is not None:
            facts.append(say(LEFT, lang, s=_duration(left, lang)))
        line = " · ".join(facts)
    cache = p.cache / p.total if p.total else 0.0
    return (
        f'<div class="pg-progress" title="{share:.0%}"><span class="pg-progress-cache" style="width:{cache:.1%}">'
        f'</span><span class="pg-progress-done" style="width:{max(0.0, share - cache):.1%}"></span></div>'
        f'<div class="pg-note pg-progress-note">{line}</div>'
    )
