"""The Sampling tab's Format control (issue 33, item 5): a dropdown (none, JSON schema, choice list, regex,
grammar) and a pattern box become the request's `structured_outputs`, sent through the same service as the API;
a choice list of two words gets one of them; a bad regex shows the server's 422 message where the page shows
refusals, and the page goes on working. Screenshots: format-1-choice-list, format-2-bad-regex."""

from __future__ import annotations

import json
from typing import Any

from tests.browser_helpers import (
    FINISHED_JS,
    NEEDS_CHROMIUM,
    expect_check_clear,
    open_page,
    open_tab,
    precise,
    send,
    shot,
    sync_api,
)

pytestmark = NEEDS_CHROMIUM


def pick_format(page: Any, kind: str, pattern: str) -> None:
    open_tab(page, "Sampling")
    box = page.locator("#pg-format_pattern textarea")
    if not box.is_visible():
        page.get_by_role("button", name="Response format").click()
    page.locator("#pg-format input").click()
    page.get_by_role("option", name=kind, exact=True).click()
    box.fill(pattern)
    box.press("Tab")


def test_a_choice_list_gets_one_of_its_words_and_a_bad_regex_the_servers_message(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    precise(page, max_tokens=8)
    pick_format(page, "choice list", "yes\nno")
    expect_check_clear(page)  # the request it would send is a valid one
    shot(page, "format-1-choice-list", full_page=False)
    open_tab(page, "Stats")
    send(page, "Is the sky blue?")
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    reply = page.locator("#pg-chat [data-testid='bot']").first.inner_text().strip().splitlines()[0].strip()
    assert reply in ("yes", "no"), reply  # the message's first line: its text (the line under it: its stats)
    open_tab(page, "Request")
    body = json.loads(page.locator("#pg-request .cm-content").inner_text())
    assert body["structured_outputs"] == {"choice": ["yes", "no"]}

    pick_format(page, "regex", "(ab")
    open_tab(page, "Stats")
    page.fill("#pg-input textarea", "Say something.")
    page.click("#pg-send")
    check = page.locator("#pg-check")
    sync_api.expect(check).to_contain_text("structured_outputs.regex: cannot compile this regex", timeout=60_000)
    sync_api.expect(check).to_contain_text("unclosed group")
    shot(page, "format-2-bad-regex", full_page=False)

    pick_format(page, "none", "")  # and the page still answers
    open_tab(page, "Stats")
    send(page, "Is the sky blue?")
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    expect_check_clear(page)
    page.close()
