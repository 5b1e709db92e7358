"""Samplers, before and after (issue 19, point 4), in a real browser: the Sampling tab's "samplers before/after"
box asks `sampler_logprobs`, the page's check line explains what it needs, and a token clicked in the Stats heatmap
shows the model's candidates and what the samplers left of them side by side. The "continue with this" buttons of
a heatmap that knows its turn, and what a click writes.

Screenshots (prefix "samp-") go to $PLAYGROUND_SHOTS (default <tmp>/playground-shots)."""

from __future__ import annotations

import html
import json
import math
import re
import time
from pathlib import Path
from typing import Any

import pytest

from engine.protocol.response import LogprobEntry, TopLogprob
from playground.client.heatmap import colour_css
from playground.client.reply import ChoiceView
from playground.page import heatmap
from tests.browser_helpers import (
    FINISHED_JS,
    NEEDS_CHROMIUM,
    check_says,
    expect_check_clear,
    open_page,
    open_tab,
    send,
    set_number,
    shot,
    sync_api,
)
from tests.conftest import chat

LAYER = "browser"  # what this module's own fixtures or bodies need (tests/conftest.py)

pytestmark = NEEDS_CHROMIUM

PROMPT = "Name a colour of the sky."
POP = "#pg-tokpop"
SEED = 17
PLAYGROUND = Path(heatmap.__file__).parent / "static"

# What the open popover shows, column by column: each row's token, class names and percentage.
POPOVER_JS = """(sel) => { const p = document.querySelector(sel); const r = p.getBoundingClientRect();
  const rows = (col) => [...p.querySelectorAll(col + ' li.pg-alt')].map(li => ({alt: li.dataset.alt, j: li.dataset.j,
    chosen: li.classList.contains('pg-alt-chosen'), removed: li.classList.contains('pg-alt-removed'),
    lower: li.classList.contains('pg-alt-lower'), p: li.querySelector('.pg-alt-p').textContent,
    button: !!li.querySelector('.pg-branch')}));
  return {text: p.innerText, two: p.classList.contains('pg-tokpop-two'), box: [r.left, r.top, r.right, r.bottom],
          heads: [...p.querySelectorAll('.pg-tokpop-colhead')].map(h => h.textContent),
          model: rows('.pg-col-model'), after: rows('.pg-col-after'), plain: rows('')}; }"""


def popover(page: Any) -> dict[str, Any]:
    page.wait_for_selector(POP, state="visible")
    return page.evaluate(POPOVER_JS, POP)


def percent(text: str) -> float:
    return 0.0 if text.startswith("<") else float(text.rstrip("%"))


def sampler_settings(page: Any) -> None:
    """temperature 0.8, top_k 3, a seed, 8 tokens; logprobs with 5 alternatives and the samplers' view; on the way,
    the check line explains what the box needs while logprobs is off."""
    open_tab(page, "Sampling")
    set_number(page, "temperature", 0.8)
    set_number(page, "top_k", 3)
    set_number(page, "max_tokens", 8)
    page.locator("#pg-seed textarea, #pg-seed input").first.fill(str(SEED))
    if not page.locator("#pg-logprobs").is_visible():
        page.get_by_role("button", name="Candidates and log-probabilities").click()
    box = page.locator("#pg-sampler_logprobs")
    sync_api.expect(box).to_contain_text("samplers before/after")
    box.locator("input[type=checkbox]").check()
    check = page.locator("#pg-check")
    sync_api.expect(check).to_contain_text(
        "sampler_logprobs requires logprobs to be true and top_logprobs of at least 1"
    )
    sync_api.expect(box).to_have_class(re.compile("pg-fault"))  # the box at fault, outlined
    shot(page, "samp-1-check-line-explains")
    page.locator("#pg-logprobs input[type=checkbox]").check()
    set_number(page, "top_logprobs", 5)
    expect_check_clear(page)
    shot(page, "samp-2-sampling-tab")
    open_tab(page, "Stats")
    time.sleep(0.5)  # let the controls' change events land before sending


def test_a_clicked_token_shows_the_model_and_the_samplers_side_by_side(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    sampler_settings(page)
    send(page, PROMPT)
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    refused = check_says(page)
    assert not refused, f"the request was refused: {refused}"
    # The same request through the API, the same seed: the same tokens and the same records.
    api = chat(
        live.client(),
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0.8,
        top_k=3,
        seed=SEED,
        max_tokens=8,
        logprobs=True,
        top_logprobs=5,
        sampler_logprobs=True,
    ).json()
    want = api["choices"][0]["logprobs"]["content"]
    heat = page.locator("#pg-heat .pg-heatmap .pg-tok")
    assert heat.count() == len(want)

    seen_removed = False
    for i in range(min(len(want), 4)):
        heat.nth(i).click()
        pop = popover(page)
        if i == 1:
            shot(page, "samp-3-popover-two-columns", full_page=False)
        assert pop["two"] and pop["heads"] == ["model", "after samplers"]
        assert [r["alt"] for r in pop["model"]] == [a["token"] for a in want[i]["top_logprobs"]]
        kept = [r for r in pop["after"] if not (r["removed"] or r["lower"])]
        assert 1 <= len(kept) <= 3, pop["after"]  # top_k 3
        assert [r["alt"] for r in kept] == [a["token"] for a in want[i]["sampler_top_logprobs"]]
        # At most three survivors: the after column is the whole distribution drawn from, its bars sum to 100%.
        assert sum(percent(r["p"]) for r in kept) == pytest.approx(100, abs=0.4)
        for rows in (pop["model"], kept):  # the chosen token marked in both columns, once
            assert [r["alt"] for r in rows if r["chosen"]] == [want[i]["token"]]
        removed = [r["alt"] for r in pop["after"] if r["removed"]]
        assert removed == [r["alt"] for r in pop["model"] if r["alt"] not in {k["alt"] for k in kept}]
        assert all(r["p"] == "removed" for r in pop["after"] if r["removed"])
        seen_removed = seen_removed or bool(removed)
        assert all(r["button"] for r in pop["model"]), "each model candidate can be branched from"
        assert "greedy: the highest is taken" in pop["text"]
        v = page.viewport_size
        assert pop["box"][0] >= 0 and pop["box"][2] <= v["width"], "the popover stays on the screen"
        page.keyboard.press("Escape")
        page.wait_for_selector(POP, state="hidden")
    assert seen_removed, "top_k 3 of 5 candidates: some are shown removed"
    page.close()


def entry(
    token: str,
    p: float,
    alts: list[tuple[str, float]],
    after: list[tuple[str, float]] | None,
    after_p: float | None = None,
) -> LogprobEntry:
    top = [TopLogprob(token=t, logprob=math.log(q), bytes=[]) for t, q in alts]
    e = LogprobEntry(token=token, logprob=math.log(p), bytes=[], top_logprobs=top)
    if after is not None:
        e.sampler_top_logprobs = [TopLogprob(token=t, logprob=math.log(q), bytes=[]) for t, q in after]
        e.sampler_logprob = None if after_p is None else math.log(after_p)
    return e


ENTRIES = [
    entry("Blue", 0.6, [("Blue", 0.6), ("The", 0.2), ("Sky", 0.1)], [("Blue", 0.75), ("The", 0.25)], 0.75),
    entry(" sky", 0.3, [(" is", 0.5), (" sky", 0.3), (".", 0.1)], [(" is", 0.55), (" sky", 0.35), (".", 0.1)], 0.35),
    entry("</think>", 0.01, [("!", 0.9), (".", 0.05), ("?", 0.02)], [], None),  # forced: drawn from nothing
]


def data(markup: str) -> dict[str, Any]:
    (text,) = re.findall(r'<span class="pg-tokdata" hidden>(.*?)</span>', markup)
    return json.loads(html.unescape(text))


def test_the_heatmap_data_carries_the_after_lists_the_turn_and_the_choice() -> None:
    d = data(heatmap.heatmap_html(ENTRIES, turn=4, choice=1))
    assert d["turn"] == 4 and d["c"] == 1
    assert d["t"][0][4] == [["Blue", round(math.log(0.75), 4)], ["The", round(math.log(0.25), 4)]]
    assert d["t"][0][5] == round(math.log(0.75), 4) and d["t"][2][4:] == [[], None]
    assert d["l"]["after"] == "after samplers" and d["l"]["branch"] == "↳ continue with this"
    plain = data(heatmap.tokens_html([entry("a", 0.5, [("a", 0.5)], None)]))
    assert plain["turn"] is None and plain["c"] == 0 and len(plain["t"][0]) == 4  # not asked: the four of before
    zh = data(heatmap.heatmap_html(ENTRIES, "zh"))
    assert zh["l"]["after"] == "采样器之后" and zh["l"]["branch"] == "↳ 从这里继续" and zh["l"]["removed"] == "已移除"
    (msg,) = heatmap.chat_messages(ChoiceView(index=2, logprobs=ENTRIES, finish_reason="stop"), turn=7)
    assert (data(msg["content"])["turn"], data(msg["content"])["c"]) == (7, 2)


def offline_page(browser: Any, markup: str, lang: str = "en") -> Any:
    """The heatmap markup with the page's own tokens.js / tokens.css and a hidden #pg-action box like ui.py's,
    which records the input events it gets."""
    page = browser.new_page(viewport={"width": 900, "height": 600})
    style = (PLAYGROUND / "tokens.css").read_text(encoding="utf-8") + colour_css()
    page.set_content(
        f'<html lang="{lang}"><head><style>{style}</style></head><body style="font-family:sans-serif">'
        f'<div id="pg-action" hidden><textarea></textarea></div>'
        f'<div style="padding:2rem;width:20rem">{markup}</div></body></html>'
    )
    page.add_script_tag(content=(PLAYGROUND / "tokens.js").read_text(encoding="utf-8"))
    page.evaluate("""() => { window.pgInputs = []; document.querySelector('#pg-action textarea')
      .addEventListener('input', (e) => window.pgInputs.push(e.target.value)); }""")
    return page


def test_continue_with_this_writes_the_branch_into_the_action_box(browser: Any) -> None:
    page = offline_page(browser, heatmap.heatmap_html(ENTRIES, turn=3, choice=0))
    page.locator(".pg-tok").nth(1).click()
    pop = popover(page)
    assert [r["button"] for r in pop["model"]] == [True, True, True] and not any(r["button"] for r in pop["after"])
    assert [r["j"] for r in pop["model"]] == ["0", "1", "2"]
    assert [r["alt"] for r in pop["after"] if r["chosen"]] == [" sky"] and not pop["after"][-1]["removed"]
    shot(page, "samp-4-branch-buttons")
    page.locator(f"{POP} .pg-col-model li.pg-alt").nth(2).locator(".pg-branch").click()
    page.wait_for_selector(POP, state="hidden")  # the click closes the popover
    (value,) = page.evaluate("window.pgInputs")
    assert re.fullmatch(r"branch:3:0:1:2:\d{13}", value), value
    assert page.input_value("#pg-action textarea") == value

    # Token 1 of three alternatives, two left after: the one that is gone shows as removed.
    page.locator(".pg-tok").nth(0).click()
    pop = popover(page)
    assert [(r["alt"], r["removed"]) for r in pop["after"]] == [("Blue", False), ("The", False), ("Sky", True)]
    # A forced token: drawn from no distribution, the after column says so.
    page.locator(".pg-tok").nth(2).click()
    pop = popover(page)
    assert "forced, not sampled" in pop["text"] and pop["after"] == []
    page.close()


def test_the_two_columns_in_chinese(browser: Any) -> None:
    page = offline_page(browser, heatmap.heatmap_html(ENTRIES, "zh", turn=0), "zh")
    page.locator(".pg-tok").nth(0).click()
    pop = popover(page)
    assert pop["heads"] == ["模型", "采样器之后"] and "已移除" in pop["text"] and "↳ 从这里继续" in pop["text"]
    shot(page, "samp-5-zh")
    page.close()
