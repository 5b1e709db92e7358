"""Speculative decoding on the page, in a real browser: the "speculative" box asks for it, the Stats tab shows the
acceptance rate from the reply's usage, and the chat's heatmap underlines the tokens that were accepted drafts.

Screenshots (prefix "spec-") go to $PLAYGROUND_SHOTS (default <tmp>/playground-shots)."""

from __future__ import annotations

import re
from typing import Any

from tests.browser_helpers import (
    FINISHED_JS,
    NEEDS_CHROMIUM,
    check_says,
    open_page,
    open_tab,
    precise,
    send,
    shot,
    stat,
    sync_api,
)
from tests.conftest import chat

pytestmark = NEEDS_CHROMIUM

CODE = "def area(width, height):\n    result = width * height\n    return result\n"
PROMPT = f"Rename `result` to `value` in this code and return the whole code:\n\n{CODE}"


def test_acceptance_rate_is_shown_and_accepted_tokens_are_underlined(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    precise(page, max_tokens=40)
    page.get_by_role("tab", name="Sampling").click()
    if not page.locator("#pg-logprobs").is_visible():
        page.get_by_role("button", name="Candidates and log-probabilities").click()
    page.locator("#pg-logprobs input[type=checkbox]").check()
    box = page.locator("#pg-speculative")
    sync_api.expect(box).to_contain_text("speculative")
    box.get_by_label("on", exact=True).check()
    shot(page, "spec-1-sampling-box")
    open_tab(page, "Stats")
    page.wait_for_timeout(500)  # the controls' change events land before sending
    send(page, PROMPT)
    page.wait_for_function(FINISHED_JS, timeout=180_000)
    refused = check_says(page)
    assert not refused, f"the request was refused: {refused}"

    # The same request through the API: its usage says what the page must show.
    api = chat(
        live.client(),
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_tokens=40,
        logprobs=True,
        speculative=True,
    ).json()
    spec = api["usage"]["speculative"]
    assert spec["accepted"] > 0
    want = f"{spec['accepted'] / spec['drafted']:.0%} ({spec['accepted']:,} / {spec['drafted']:,})"
    assert stat(page, "speculative acceptance") == want
    shot(page, "spec-2-stats-acceptance")

    title = page.locator("#pg-chat").get_by_text(re.compile("Tokens by probability"))
    tokens = page.locator("#pg-chat .pg-heatmap .pg-tok")
    title.first.click()  # the collapsed "Tokens by probability" message: open it
    tokens.first.wait_for(state="visible")
    page.wait_for_function("() => document.querySelector('#pg-chat .pg-heatmap').getBoundingClientRect().height > 20")
    marked = page.locator("#pg-chat .pg-heatmap .pg-tok.pg-spec")
    assert marked.count() == spec["accepted"]  # greedy: the page's reply is the API's, drafts and all
    line = marked.first.evaluate("e => getComputedStyle(e).textDecorationLine")
    assert "underline" in line, "the sanitizer took the underline off"
    unmarked = page.locator("#pg-chat .pg-heatmap .pg-tok:not(.pg-spec)").first
    assert "underline" not in unmarked.evaluate("e => getComputedStyle(e).textDecorationLine")
    sync_api.expect(page.locator("#pg-chat .pg-spec-note")).to_contain_text(f"{spec['accepted']} tokens")


def test_without_speculation_no_acceptance_row(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    precise(page, max_tokens=8)
    page.get_by_role("tab", name="Sampling").click()
    if not page.locator("#pg-speculative").is_visible():
        page.get_by_role("button", name="Candidates and log-probabilities").click()
    page.locator("#pg-speculative").get_by_label("off", exact=True).check()  # greedy drafts by the server's default
    open_tab(page, "Stats")
    page.wait_for_timeout(500)
    send(page, "Name a colour.")
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    assert page.locator("#pg-stats td[data-stat='completion tokens']").count() == 1
    assert page.locator("#pg-stats td[data-stat='speculative acceptance']").count() == 0
