"""min_p on the page (issue 20, part 3): the Sampling tab's slider goes into the request the page sends, and at 1
a hot seeded sample is the greedy reply, as through the API. Screenshot: minp-1-sampling-tab."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.browser_helpers import FINISHED_JS, NEEDS_CHROMIUM, open_page, open_tab, send, set_number, shot
from tests.conftest import chat

pytestmark = NEEDS_CHROMIUM

PROMPT = "Write one sentence about the sea."


def test_min_p_from_the_sampling_tab_reaches_the_request(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    open_tab(page, "Sampling")
    set_number(page, "temperature", 1.8)
    set_number(page, "max_tokens", 12)
    set_number(page, "min_p", 1)
    box = page.locator("#pg-seed textarea, #pg-seed input").first
    box.fill("5")
    box.press("Enter")
    shot(page, "minp-1-sampling-tab", full_page=False)
    open_tab(page, "Stats")
    time.sleep(0.5)
    send(page, PROMPT)
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    open_tab(page, "Request")
    body = json.loads(page.locator("#pg-request .cm-content").inner_text())
    assert body["min_p"] == 1 and body["temperature"] == 1.8 and body["seed"] == 5
    with live.client() as http:
        greedy = chat(http, messages=[{"role": "user", "content": PROMPT}], temperature=0, max_tokens=12).json()
    reply = page.locator("#pg-chat [data-testid='bot']").first.inner_text()
    assert greedy["choices"][0]["message"]["content"].strip() in reply
    page.close()
