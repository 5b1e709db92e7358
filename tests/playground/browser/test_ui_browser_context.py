"""The context meter under the input (issue 19, point 2): what the next request takes of the model's window, as
the message is typed, counted as /tokenize counts it; a prompt over the limit is flagged before Send.
Screenshots: context-1 a short message, context-2 one over the limit."""

from __future__ import annotations

import re
from typing import Any

from tests.browser_helpers import NEEDS_CHROMIUM, open_page, open_tab, set_number, shot, sync_api

pytestmark = NEEDS_CHROMIUM


def test_the_meter_counts_the_next_request_and_warns_before_a_refusal(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    open_tab(page, "Sampling")
    set_number(page, "max_tokens", 64)
    open_tab(page, "Stats")
    meter = page.locator("#pg-context")
    page.locator("#pg-input textarea").press_sequentially("Hello there", delay=20)  # typed: input events
    sync_api.expect(meter).to_contain_text("64 max_tokens")
    with live.client() as http:
        count = http.post("/tokenize", json={"messages": [{"role": "user", "content": "Hello there"}]}).json()["count"]
    window = live.service.model.context_length
    # Once the last keystroke's count has landed (an earlier keystroke's may still be showing).
    sync_api.expect(meter).to_contain_text(f"{count} prompt + 64 max_tokens = {count + 64} of {window:,} tokens")
    shot(page, "context-1-short-message")

    box = page.locator("#pg-input textarea")
    box.fill("word " * 9000)  # some 9,000 tokens: over SmolLM2's 8,192
    box.press("End")
    box.press_sequentially(" end", delay=20)
    sync_api.expect(meter).to_contain_text("over the limit", timeout=60_000)
    assert re.search(
        r"the prompt \([\d,]+ tokens\) is over the limit of [\d,]+: the API will refuse it", meter.inner_text()
    )
    shot(page, "context-2-over-the-limit")
    page.close()
