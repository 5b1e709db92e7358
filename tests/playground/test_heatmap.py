"""The token heatmap's markup (playground/page/heatmap.py): the numbers tokens.js reads, the colour classes the page's
style defines (playground/client/heatmap.py), the chat's copy of it, the candidate cards, in English and Chinese; and
the notebooks' self-contained heatmap, the same tokens with their colours inline."""

from __future__ import annotations

import html
import json
import math
import re

from engine.protocol.response import ChatCompletionChunk, ChoiceLogprobs, ChunkChoice, Delta, LogprobEntry, TopLogprob
from playground.client import heatmap as tokens
from playground.client.reply import ChoiceView, ReplyView
from playground.page import heatmap


def entry(token: str, p: float, *alts: tuple[str, float]) -> LogprobEntry:
    top = [TopLogprob(token=t, logprob=math.log(q), bytes=[]) for t, q in alts]
    return LogprobEntry(token=token, logprob=math.log(p), bytes=[], top_logprobs=top)


def data(markup: str) -> list[dict]:
    """Every heatmap's JSON, as the script reads it (the hidden span's text)."""
    found = re.findall(r'<span class="pg-tokdata" hidden>(.*?)</span>', markup)
    return [json.loads(html.unescape(text)) for text in found]


def test_each_token_carries_its_probability_class_and_alternatives_with_the_chosen_ones_rank() -> None:
    entries = [
        entry("Paris", 0.905, ("Paris", 0.905), ("Rome", 0.082)),
        entry(" is", 0.3, ("was", 0.5), ("be", 0.1)),
        entry("!", 0.04),
    ]
    markup = heatmap.tokens_html(entries)
    assert re.findall(r'class="pg-tok (pg-p\d)"', markup) == ["pg-p9", "pg-p3", "pg-p0"]
    (d,) = data(markup)
    assert d["k"] == 2 and [t[0] for t in d["t"]] == ["Paris", " is", "!"]
    assert [t[2] for t in d["t"]] == [1, 0, 0]  # rank 1; not among the alternatives; no alternatives
    assert d["t"][0][3] == [["Paris", round(math.log(0.905), 4)], ["Rome", round(math.log(0.082), 4)]]
    assert d["l"]["rank"] == "rank {r} of the top 2" and d["l"]["notin"] == "not in the top 2"
    assert '<div class="pg-legend">' in markup and markup.count('class="pg-lg pg-p') == heatmap.BUCKETS
    assert "3 tokens · mean p 41.5% · 2 below 50%" in markup and "click or tap a token" in markup


def test_every_probability_class_has_a_colour_and_buckets_cover_zero_to_one() -> None:
    from playground.page.ui import CSS

    for b in range(tokens.BUCKETS):
        assert re.search(rf"\.pg-p{b} {{background:hsla\(", CSS), b
    assert [tokens.bucket(p) for p in (0.0, 0.0999, 0.1, 0.5, 0.95, 1.0)] == [0, 0, 1, 5, 9, 9]


def test_the_notebooks_heatmap_is_the_pages_tokens_with_their_colours_inline() -> None:
    entries = [entry("Paris", 0.905, ("Paris", 0.905), ("Rome", 0.082)), entry("\n", 0.3), entry("<b>", 0.04)]
    page, book = heatmap.heatmap_html(entries), tokens.heatmap_html(entries)
    classes = r'class="(pg-tok [^"]*)"'
    assert re.findall(classes, book) == re.findall(classes, page) == ["pg-tok pg-p9", "pg-tok pg-p3", "pg-tok pg-p0"]
    assert re.findall(r'title="([^"]*)"', book) == re.findall(r'title="([^"]*)"', page)
    colours = re.findall(r'style="background:([^"]*)"', book)
    assert colours == [tokens.COLOURS[9], tokens.COLOURS[3], tokens.COLOURS[0]]
    assert "pg-tokdata" not in book and "white-space: pre-wrap" in book and "&lt;b&gt;" in book


def test_markup_is_escaped_and_keeps_no_latex_pair_or_infinity() -> None:
    entries = [entry("<script>", 0.5), entry("$$", 0.5, ("$$", 0.5)), entry("\n", 0.5), entry("", 0.5)]
    entries.append(LogprobEntry(token="x", logprob=-math.inf, bytes=[]))
    markup = heatmap.tokens_html(entries)
    assert "<script>" not in markup and "&lt;script&gt;" in markup
    raw = re.search(r"hidden>(.*?)</span>", markup).group(1)
    assert "$" not in raw and "\\u0024\\u0024" in raw
    (d,) = data(markup)
    assert d["t"][1][0] == "$$" and d["t"][4][1] == heatmap.FLOOR
    assert "↵<br>" in markup and "∅" in markup
    assert "\n" not in heatmap.heatmap_html(entries, titles=False)  # the chat's: one line of raw HTML


def test_the_stats_panel_keeps_a_native_tooltip_for_a_page_without_the_script() -> None:
    markup = heatmap.tokens_html([entry("a", 0.5, *[(f"t{j}", 0.01) for j in range(8)])])
    tip = html.unescape(re.search(r'title="([^"]*)"', markup.split('class="pg-heat')[1]).group(1))
    assert tip.startswith("'a'  p=50.0%") and "'t4'  1.0%" in tip and "'t5'" not in tip and tip.endswith("+3")


def done_choice(n: int, *, finish: str | None = "length") -> ChoiceView:
    alts = [(f"alt{j}", 0.01) for j in range(20)]
    return ChoiceView(
        index=0, content="x" * n, logprobs=[entry(f"w{i}", 0.6, *alts) for i in range(n)], finish_reason=finish
    )


def test_chat_heatmap_is_one_collapsed_message_once_the_reply_is_final() -> None:
    assert heatmap.chat_messages(ChoiceView(index=0, content="hi", finish_reason="stop")) == []  # no logprobs
    assert heatmap.chat_messages(done_choice(5, finish=None)) == []  # still streaming
    assert heatmap.chat_messages(done_choice(5, finish=None), done=True) != []  # e.g. stopped by the user
    (msg,) = heatmap.chat_messages(done_choice(5))
    assert msg["role"] == "assistant" and msg["metadata"]["status"] == "done"
    assert msg["metadata"]["title"].startswith("◈ Tokens by probability · 5 tokens · mean p 60.0%")
    body = msg["content"]
    assert body.startswith("<div") and "\n" not in body  # one raw HTML block for the Chatbot's markdown
    assert "title=" not in body.split('class="pg-heat')[1]  # no native tooltips in the chat
    (d,) = data(body)
    assert len(d["t"]) == 5 and all(len(t[3]) == heatmap.CHAT_ALTS for t in d["t"])


def test_a_long_reply_keeps_the_chat_small_and_says_where_the_rest_is() -> None:
    (msg,) = heatmap.chat_messages(done_choice(2000))
    body = msg["content"]
    (d,) = data(body)
    assert len(d["t"]) == heatmap.CHAT_TOKENS and body.count('class="pg-tok ') == heatmap.CHAT_TOKENS
    assert f"The first {heatmap.CHAT_TOKENS} of 2,000 tokens" in body and "2000 tokens" in msg["metadata"]["title"]
    assert len(body.encode()) < 120_000, len(body.encode())


def test_chinese() -> None:
    markup = heatmap.tokens_html([entry("a", 0.5, ("a", 0.5))], lang="zh")
    assert "1 个 token · 平均 p 50.0%" in markup and "点击或轻触" in markup and "token 概率" in markup
    assert data(markup)[0]["l"]["rank"] == "在前 1 名中排第 {r}"
    assert "打开 <b>logprobs</b>" in heatmap.tokens_html([], lang="zh")
    (msg,) = heatmap.chat_messages(done_choice(3), lang="zh")
    assert msg["metadata"]["title"].startswith("◈ 按概率着色的 token · 3 个 token")
    assert "候选" in heatmap.candidates_html(ReplyView(), lang="zh")


def chunk(index: int, text: str, lp: float | None) -> ChatCompletionChunk:
    logprobs = ChoiceLogprobs(content=[LogprobEntry(token=text, logprob=lp, bytes=[])]) if lp is not None else None
    return ChatCompletionChunk(
        id="c",
        created=0,
        model="m",
        choices=[ChunkChoice(index=index, delta=Delta(content=text), logprobs=logprobs, finish_reason="stop")],
    )


def view(*lps: float | None) -> ReplyView:
    v = ReplyView()
    for i, lp in enumerate(lps):
        v.add(chunk(i, f"text{i}", lp))
    return v


def test_candidates_say_turn_on_logprobs_once_not_on_each_card() -> None:
    cands = heatmap.candidates_html(view(None, None, None))
    assert cands.count("turn on <b>logprobs</b>") == 1 and cands.count('class="pg-cand"') == 3
    assert "cumulative" not in cands.split('class="pg-cands"')[1] and "★" not in cands


def test_candidates_rank_by_cumulative_logprob_and_show_their_tokens_as_heatmaps() -> None:
    cands = heatmap.candidates_html(view(-3.0, -0.5, -1.0))
    order = [int(i) for i in re.findall(r"choice (\d)", cands)]
    assert order == [1, 2, 0] and cands.index("★") < cands.index("choice 2")
    assert "cumulative logprob -0.50 (-0.50 a token)" in cands and "turn on" not in cands
    assert len(data(cands)) == 3 and cands.count('class="pg-cand"') == 3
    zh = heatmap.candidates_html(view(-3.0, -0.5, -1.0), lang="zh")
    assert "候选 1 ★" in zh and "累计 logprob -0.50" in zh
