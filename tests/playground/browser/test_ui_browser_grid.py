"""The Grid tab (issue 21, point 4): a prompt set of 8 against 3 columns (two settings of the embedded engine and this
same server by URL) on the real page, graded, summarised, with CSV and JSON downloads, and a saved grid re-opened.
Screenshots: grid-1-running, grid-2-result."""

from __future__ import annotations

import json
from typing import Any

from tests.browser_helpers import NEEDS_CHROMIUM, open_page, open_tab, shot, sync_api

pytestmark = NEEDS_CHROMIUM

PROMPTS = "\n".join(
    json.dumps(r)
    for r in [
        {"user": "What is the capital of {{c}}? Answer with the city only.", "c": c, "expected": e}
        for c, e in (("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"))
    ]
    + [
        {"user": "Name a colour of the sky.", "expected": "blue"},
        {"user": "Say hello.", "expected": "hello"},
        {"user": 'Reply with a JSON object with a key "a" set to 1.'},
        {"user": "What is 2+2?", "expected": "4"},
    ]
)


def set_code(page: Any, elem: str, text: str) -> None:
    editor = page.locator(f"#{elem} .cm-content")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    editor.fill(text)


def test_a_grid_of_eight_prompts_and_three_columns(browser: Any, live: Any, tmp_path: Any) -> None:
    page = open_page(browser, live.url)
    open_tab(page, "Grid")
    set_code(page, "pg-grid-prompts", PROMPTS)
    columns = [
        {"name": "greedy", "temperature": 0, "max_tokens": 12},
        {"name": "one word", "temperature": 0, "max_tokens": 12, "system": "Answer in one word."},
        {"name": "by URL", "url": live.url + "/v1", "temperature": 0, "max_tokens": 12},
    ]
    set_code(page, "pg-grid-columns", json.dumps(columns))
    page.click("#pg-grid-run")
    sync_api.expect(page.locator("#pg-grid-progress .pg-progress")).to_be_visible(timeout=30_000)
    shot(page, "grid-1-running", full_page=False)
    sync_api.expect(page.locator("#pg-grid-progress")).to_contain_text("24 cells in", timeout=180_000)
    summary = page.locator("#pg-grid-result .pg-grid-summary tr")
    assert summary.count() == 4  # a head and one row per column
    rows = page.locator("#pg-grid-result .pg-grid-cells tr")
    assert rows.count() == 9
    heads = page.locator("#pg-grid-result .pg-grid-cells tr").first.inner_text()
    assert "greedy" in heads and "one word" in heads and "by URL" in heads
    # The same engine greedy, in-process and by URL: the same reply in every row.
    for i in range(1, 9):
        cells = rows.nth(i).locator("td .pg-grid-reply")
        assert cells.nth(0).inner_text() == cells.nth(2).inner_text()
    assert page.locator("#pg-grid-result .pg-grade").count() >= 8
    page.locator("#pg-grid-result .pg-grid-summary").scroll_into_view_if_needed()
    shot(page, "grid-2-result", full_page=False)
    with page.expect_download() as got:
        page.click("#pg-grid-json")
    saved = tmp_path / "grid.json"
    got.value.save_as(saved)
    doc = json.loads(saved.read_text())
    assert doc["format"] == "llm-playground/grid@1" and len(doc["cells"]) == 24
    # Re-open it on a fresh page: the same table.
    other = open_page(browser, live.url)
    open_tab(other, "Grid")
    with other.expect_file_chooser() as chooser:
        other.click("#pg-grid-reopen")
    chooser.value.set_files(str(saved))
    sync_api.expect(other.locator("#pg-grid-result .pg-grid-cells tr")).to_have_count(9, timeout=30_000)
    assert (
        other.locator("#pg-grid-result .pg-grid-summary").inner_text()
        == page.locator("#pg-grid-result .pg-grid-summary").inner_text()
    )
    other.close()
    page.close()


def test_a_bad_prompt_set_is_explained(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    open_tab(page, "Grid")
    set_code(page, "pg-grid-prompts", '{"user": "Where is {{city}}?"}')
    page.click("#pg-grid-run")
    sync_api.expect(page.locator("#pg-grid-result")).to_contain_text("line 1: no value for {{city}}")
    page.close()
