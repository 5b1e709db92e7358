"""The precision entries in the header's picker and the quality meter's readout (issue 32 item 5), in Chromium: the
picker lists SmolLM2 at its Q4_1 blocks with its @int4 and @bf16 entries; after a greedy reply, "⚖ Quality vs
fp32" loads the @fp32 copy and shows the summary in the Stats table, the KL heatmap, and per token in the popover
its KL and whether the reference's top-1 differs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser_helpers import FINISHED_JS, NEEDS_CHROMIUM, open_page, precise, send, shot, sync_api
from tests.conftest import MODEL, LiveServer
from tests.playground.test_ui_quality import quality_server

pytestmark = NEEDS_CHROMIUM


@pytest.fixture(scope="module")
def served(settings: Any) -> Iterator[LiveServer]:
    with quality_server(settings) as (server, _):
        yield server


def test_the_picker_offers_precisions_and_stats_shows_the_quality_meter(browser: Any, served: LiveServer) -> None:
    page = open_page(browser, served.url)
    page.locator("#pg-model input").click()
    options = page.locator("ul[role=listbox] li")
    labels = [options.nth(i).inner_text() for i in range(options.count())]
    ours = [text for text in labels if MODEL in text]
    assert len(ours) == 3 and "@int4" in ours[1] and "@bf16" in ours[2], labels
    assert "●" in ours[0] and "○" in ours[1], ours  # the served one loaded, the entries loadable
    shot(page, "quality-1-picker-precisions", full_page=False)
    page.keyboard.press("Escape")
    precise(page, 12)
    send(page, "Name three colours.")
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    page.click("#pg-quality-go")
    row = page.locator("#pg-stats td[data-stat='quality']")
    row.wait_for(timeout=300_000)  # the fp32 copy loads first
    text = row.inner_text()
    assert text.startswith("top-1 agreement ") and "mean KL" in text and text.endswith("against fp32"), text
    sync_api.expect(page.locator("#pg-quality-note")).to_contain_text("top-1 agreement")
    heat = page.locator("#pg-heat .pg-quality")
    sync_api.expect(heat).to_be_visible()
    assert heat.locator(".pg-tok").count() == 12
    heat.locator(".pg-tok").nth(1).click()
    pop = page.locator("#pg-tokpop")
    sync_api.expect(pop).to_be_visible()
    sync_api.expect(pop).to_contain_text("fp32: p")
    sync_api.expect(pop).to_contain_text("KL")
    sync_api.expect(pop).to_contain_text("top-1")
    shot(page, "quality-2-stats-meter", full_page=False)
    page.close()
