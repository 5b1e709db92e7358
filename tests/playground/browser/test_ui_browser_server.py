"""The Server tab in a real browser: the embedded engine's live numbers change as requests run (prefix-cache
blocks and hit rate after the same prompt twice, a running request while a long reply streams), and the reset
button empties the prefix cache; with credentials set, only an admin key resets."""

from __future__ import annotations

import time
from typing import Any

from tests.browser_helpers import NEEDS_CHROMIUM, open_page, open_tab, send, set_number, shot, sync_api
from tests.conftest import extra_server

pytestmark = NEEDS_CHROMIUM

PROMPT = (
    "Name the planets of the solar system in order from the sun, with one fact about each of them, and say "
    "which one has the most moons and why."
)
CELL = "#pg-server td[data-srv='{}']"
TICK_URL = "/gradio_api/run/predict"  # the timer's refresh is an unqueued event


def cell(page: Any, name: str) -> str:
    return page.locator(CELL.format(name)).inner_text()


def wait_cell(page: Any, name: str, js_test: str, timeout: int = 120_000) -> None:
    """Until the view's cell `name` passes `js_test` (a JS expression over its text `v`): the timer refreshed it."""
    page.wait_for_function(
        f'() => {{ const e = document.querySelector("{CELL.format(name)}"); '
        f"if (!e) return false; const v = e.textContent; return {js_test}; }}",
        timeout=timeout,
    )


def setup(page: Any, max_tokens: int, ignore_eos: bool = False) -> None:
    open_tab(page, "Sampling")
    page.locator("#pg-preset label", has_text="Precise").click()
    set_number(page, "max_tokens", max_tokens)
    if ignore_eos:
        page.locator("#pg-ignore_eos input").check()
    time.sleep(0.5)  # let the controls' change events land before sending
    open_tab(page, "Server")


def test_the_server_tab_follows_the_engine_and_resets_its_prefix_cache(browser: Any, live: Any) -> None:
    with live.client() as http:
        assert http.post("/reset_prefix_cache").status_code == 200
        before = http.get("/server/state").json()["prefix_cache"]
    page = open_page(browser, live.url)
    ticks: list[str] = []
    page.on("request", lambda r: ticks.append(r.url) if TICK_URL in r.url else None)
    setup(page, 2)
    wait_cell(page, "prefix_blocks", "v.startsWith('0 /')")
    assert cell(page, "running") == "0" and cell(page, "waiting") == "0"
    wait_cell(page, "kv_pages", "v.startsWith('0 /')")  # nothing holds a page (a leak would time out here)
    shot(page, "server-1-empty-cache")

    send(page, PROMPT)
    wait_cell(page, "prefix_blocks", "!v.startsWith('0 /')")  # the first send's prompt was kept
    wait_cell(page, "running", "v === '0'")
    blocks_after_one = cell(page, "prefix_blocks")
    rate_after_one = cell(page, "hit_rate")
    with live.client() as http:  # nothing to reuse yet, just after the reset (the rate counts since the start)
        assert http.get("/server/state").json()["prefix_cache"]["hit_lookups"] == before["hit_lookups"]
    send(page, PROMPT)  # the same prompt again: its prefix comes from the cache
    wait_cell(page, "hit_rate", f"v !== {rate_after_one!r}")
    wait_cell(page, "running", "v === '0'")
    hits = page.locator(CELL.format("hit_lookups")).inner_text()
    with live.client() as http:
        now = http.get("/server/state").json()["prefix_cache"]
    assert now["hit_lookups"] == before["hit_lookups"] + 1 and hits == f"{now['hit_lookups']} / {now['lookups']}"
    assert cell(page, "prefix_blocks") == f"{now['blocks']} / {now['capacity_blocks']}"
    assert f"{100 * now['hit_rate']:.1f}%" in cell(page, "hit_rate")
    print(f"\nafter one send: {blocks_after_one}, {rate_after_one}; after two: {cell(page, 'hit_rate')}")
    shot(page, "server-2-after-the-same-prompt-twice")

    setup(page, 300, ignore_eos=True)  # a long reply: the view shows it running, holding KV pages
    send(page, "Tell me a long story about a lighthouse keeper.")
    wait_cell(page, "running", "v === '1'")
    wait_cell(page, "kv_pages", "!v.startsWith('0 /')")
    assert cell(page, "in_flight") == "1"
    shot(page, "server-3-a-reply-streaming")
    page.click("#pg-stop")
    wait_cell(page, "running", "v === '0'")
    wait_cell(page, "kv_pages", "v.startsWith('0 /')")

    page.click("#pg-server-reset")
    sync_api.expect(page.locator("#pg-server-note")).to_contain_text("Prefix cache emptied")
    wait_cell(page, "prefix_blocks", "v.startsWith('0 /')")
    with live.client() as http:
        assert http.get("/server/state").json()["prefix_cache"]["blocks"] == 0
    assert not page.locator("#pg-server-key").is_visible()  # no credentials: the button is open, as the API
    shot(page, "server-4-reset")

    open_tab(page, "Stats")  # leaving the tab unmounts its timer: no more refreshes
    time.sleep(1)
    seen = len(ticks)
    time.sleep(5)
    print(f"refreshes while the tab was open: {seen}; in 5 s on another tab: {len(ticks) - seen}")
    page.close()


def login(browser: Any, url: str, password: str) -> Any:
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.set_default_timeout(60_000)
    page.goto(url + "/")
    page.locator("input[type=text]").first.fill("someone")
    page.locator("input[type=password]").first.fill(password)
    page.locator("button", has_text="Login").click()
    page.wait_for_selector("#pg-input textarea")  # the login reloads the page: the header may come a moment later
    page.wait_for_function(
        "() => { const e = document.querySelector('.pg-header'); return e && !e.innerText.includes('loading'); }"
    )
    return page


def test_with_credentials_only_an_admin_key_resets(browser: Any, live: Any) -> None:
    with extra_server(live.settings, live.service, api_keys=["user"], admin_keys=["root"]) as http:
        page = login(browser, str(http.base_url).rstrip("/"), "user")
        open_tab(page, "Server")
        wait_cell(page, "prefix_blocks", "v.includes(' / ')")
        key = page.locator("#pg-server-key input")
        sync_api.expect(key).to_be_visible()
        page.click("#pg-server-reset")
        sync_api.expect(page.locator("#pg-server-note")).to_contain_text("not an admin key")
        key.fill("user")  # a valid API key, but not an admin's
        page.click("#pg-server-reset")
        sync_api.expect(page.locator("#pg-server-note")).to_contain_text("not an admin key")
        shot(page, "server-5-not-an-admin")
        key.fill("root")
        page.click("#pg-server-reset")
        sync_api.expect(page.locator("#pg-server-note")).to_contain_text("Prefix cache emptied")
        wait_cell(page, "prefix_blocks", "v.startsWith('0 /')")
        page.close()


def test_the_server_tab_in_chinese(browser: Any, live: Any) -> None:
    """tests/playground/browser/test_ui_browser_i18n.py's scan, over this tab (its list of tabs predates it) and its reset note."""
    from playground.page.tabs.server_panel import TEXTS
    from tests.playground.browser.test_ui_browser_i18n import SKIPPED, VISIBLE_TEXT_JS, english_runs

    page = open_page(browser, live.url, locale="zh-CN")
    context = page.context
    open_tab(page, TEXTS["tab_server"][1])
    wait_cell(page, "prefix_blocks", "v.includes(' / ')")
    page.click("#pg-server-reset")
    sync_api.expect(page.locator("#pg-server-note")).to_contain_text("前缀缓存已清空")
    assert "前缀缓存块" in page.locator("#pg-server").inner_text()
    found = {
        run
        for where, text in page.evaluate(VISIBLE_TEXT_JS, SKIPPED)
        if where.startswith("#pg-server") or "pg-side" in where
        for run in english_runs(text)
    }
    shot(page, "server-6-chinese")
    context.close()
    assert not found, found
