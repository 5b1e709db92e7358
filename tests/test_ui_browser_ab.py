"""The A/B tab in a real browser (issue 30, item 10): an empty input is refused before anything runs, and each
side's timeline is large enough to read."""

from __future__ import annotations

from typing import Any

from tests.browser_helpers import NEEDS_CHROMIUM, open_page, open_tab, shot, sync_api

pytestmark = NEEDS_CHROMIUM


def test_an_empty_input_is_refused_before_anything_runs(browser: Any, live: Any, service: Any) -> None:
    page = open_page(browser, live.url, 1440, 900)
    open_tab(page, "A/B")
    check, run = page.locator("#pg-ab-check"), page.locator("#pg-ab-run")
    # before any click: the tab says what is missing and its button does not run
    sync_api.expect(check).to_contain_text("Type a message")
    sync_api.expect(run).to_be_disabled()
    steps = service.engine.steps
    run.click(force=True)
    page.wait_for_timeout(1000)
    assert service.engine.steps == steps  # nothing reached the engine
    sync_api.expect(page.locator("#pg-ab-a")).not_to_contain_text("A · current settings")
    shot(page, "ab-1-empty-refused", full_page=False)
    page.locator("#pg-input textarea").fill("What is 2+2?")  # a message: ready to run, the line gone
    sync_api.expect(run).to_be_enabled()
    sync_api.expect(check).not_to_contain_text("Type a message")
    page.locator("#pg-input textarea").fill("   ")  # blank again: refused again
    sync_api.expect(run).to_be_disabled()
    sync_api.expect(check).to_contain_text("Type a message")
    page.close()


def test_the_empty_input_message_is_in_the_page_language(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url, 1440, 900, locale="zh-CN")
    open_tab(page, "A/B")
    sync_api.expect(page.locator("#pg-ab-check")).to_contain_text("请输入一条消息")
    sync_api.expect(page.locator("#pg-ab-run")).to_be_disabled()
    page.context.close()
