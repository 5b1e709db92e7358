"""The A/B tab in a real browser (issue 30, item 10): an empty input is refused before anything runs, and each
side's timeline is large enough to read."""

from __future__ import annotations

from typing import Any

from tests.browser_helpers import NEEDS_CHROMIUM, open_page, open_tab, precise, shot, sync_api

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


def test_each_side_s_timeline_is_large_enough_to_read(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url, 1440, 900)
    precise(page, 8)
    page.locator("#pg-input textarea").fill("What is 2+2?")
    open_tab(page, "A/B")
    page.click("#pg-ab-run")
    for side in ("a", "b"):
        page.wait_for_function(
            f"""() => {{ const e = document.querySelector(
            "#pg-ab-{side}-numbers td[data-stat='finish reason']"); return e && /length|stop/.test(e.textContent); }}""",
            timeout=120_000,
        )
    page.locator("#pg-ab-a-numbers svg.pg-timeline").scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    shot(page, "ab-2-timelines", full_page=False)
    for side in ("a", "b"):
        column = page.locator(f"#pg-ab-{side}-numbers").bounding_box()
        chart = page.locator(f"#pg-ab-{side}-numbers svg.pg-timeline").bounding_box()
        assert chart["width"] >= column["width"] - 24 and chart["width"] >= 200, (column, chart)  # its column's width
        assert chart["height"] >= 180, chart  # tall enough to read its dots and axes (a wide chart shrunk: 95 px)
        # its labels at about the Stats tab's size, not shrunk below legibility
        label = page.locator(f"#pg-ab-{side}-numbers svg.pg-timeline text").first.bounding_box()
        assert label["height"] >= 8, label
    page.close()
