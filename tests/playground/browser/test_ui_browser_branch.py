"""Branches from a token on the page (issue 19, point 5): "↳ continue with this" on an alternative in a token's
popover continues the reply from there as a new version of the turn, with the original settings; taking the
token the greedy reply had reproduces it, another one changes it from there, and each version keeps its own
statistics (the kept prompt served from the prefix cache).
Screenshots: branch-1-popover, branch-2-same-token, branch-3-other-token."""

from __future__ import annotations

import time
from typing import Any

from tests.browser_helpers import (
    FINISHED_JS,
    NEEDS_CHROMIUM,
    open_page,
    open_tab,
    precise,
    send,
    set_number,
    shot,
    stat,
)
from tests.browser_helpers import sync_api as pw

pytestmark = NEEDS_CHROMIUM

POP = "#pg-tokpop"
POS = 3  # the token branched from


def text_of(message: Any) -> str:
    return message.evaluate("""e => { const c = e.cloneNode(true);
      c.querySelectorAll('.pg-versions').forEach(x => x.remove()); return c.textContent.trim(); }""")


def finished(page: Any) -> None:
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    time.sleep(0.5)


def branch_at(page: Any, pos: int, same: bool) -> str:
    """Open token `pos`'s popover in the Stats heatmap and continue with its own token (`same`) or another; the
    alternative's text."""
    page.locator("#pg-heat .pg-heatmap .pg-tok").nth(pos).click()
    page.wait_for_selector(POP, state="visible")
    rows = page.locator(f"{POP} li.pg-alt.pg-alt-chosen" if same else f"{POP} li.pg-alt:not(.pg-alt-chosen)")
    pick = rows.filter(has=page.locator(".pg-branch")).first  # the model's candidates carry the buttons
    alt = pick.get_attribute("data-alt") or ""
    pick.locator(".pg-branch").click()
    page.wait_for_selector(POP, state="hidden")
    return alt


def test_a_branch_from_a_token_is_a_new_version_with_its_own_stats(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    precise(page, 12)
    open_tab(page, "Sampling")
    page.get_by_text("Candidates and log-probabilities").click()
    page.locator("#pg-logprobs input[type=checkbox]").check()
    set_number(page, "top_logprobs", 3)
    open_tab(page, "Stats")
    time.sleep(0.5)
    send(page, "Describe the water cycle for a ten year old, step by step, in plain words.")
    finished(page)
    bot = page.locator("#pg-chat [data-testid='bot']").first
    original = text_of(bot)
    assert stat(page, "completion tokens") == "12"

    page.locator("#pg-heat .pg-heatmap .pg-tok").nth(POS).click()
    page.wait_for_selector(POP, state="visible")
    assert page.locator(f"{POP} .pg-branch").count() == 3  # one per alternative
    shot(page, "branch-1-popover", full_page=False)
    page.keyboard.press("Escape")

    branch_at(page, POS, same=True)
    pw.expect(page.locator("#pg-chat .pg-versions")).to_contain_text("2/2")
    finished(page)
    assert text_of(bot) == original  # greedy: the same token, the same reply
    assert "branched at token 4" in page.locator("#pg-chat .pg-versions").inner_text()
    assert stat(page, "completion tokens") == str(12 - POS - 1)  # its own statistics: what it generated
    assert int(stat(page, "cached tokens").replace(",", "")) > 0  # the prompt from the prefix cache
    shot(page, "branch-2-same-token", full_page=False)

    alt = branch_at(page, POS, same=False)
    pw.expect(page.locator("#pg-chat .pg-versions")).to_contain_text("3/3")
    finished(page)
    other = text_of(bot)
    assert other != original and alt.strip() and alt.strip() in other
    shot(page, "branch-3-other-token", full_page=False)

    page.locator("#pg-chat .pg-versions a", has_text="‹").click()  # back to the first branch, then the original
    pw.expect(page.locator("#pg-chat .pg-versions")).to_contain_text("2/3")
    page.locator("#pg-chat .pg-versions a", has_text="‹").click()
    pw.expect(page.locator("#pg-chat .pg-versions")).to_contain_text("1/3")
    assert text_of(bot) == original and stat(page, "completion tokens") == "12"
    page.close()
