"""Issue 31, item 12, in Chromium: a remote server whose model id is `<img src=x onerror=...>` once ran its script
in the page when the Backend tab connected to it. The header shows the id as text; no script runs."""

from __future__ import annotations

import time
from typing import Any

from tests.browser_helpers import NEEDS_CHROMIUM, open_page, open_tab, sync_api
from tests.security.fake_remote import SCRIPT_ID, fake_openai

pytestmark = NEEDS_CHROMIUM


def test_a_remote_model_id_with_markup_shows_as_text_and_runs_nothing(browser: Any, live: Any) -> None:
    with fake_openai(SCRIPT_ID) as (remote, seen):
        page = open_page(browser, live.url)
        open_tab(page, "Backend")
        page.locator("#pg-backend label", has_text="Remote").click()
        page.fill("#pg-backend-url textarea", remote + "/v1")
        page.click("#pg-backend-go")
        header = page.locator(".pg-header")
        sync_api.expect(header).to_contain_text(f"backend: remote {remote}")
        sync_api.expect(header).to_contain_text(SCRIPT_ID)  # the id, character for character, as text
        sync_api.expect(page.locator("#pg-backend-status")).to_contain_text("Connected")
        time.sleep(0.5)  # an <img src=x> fails to load at once; give its onerror the time to run
        assert page.evaluate("() => window.pgPwned") is None
        assert page.title() != "pwned"
        assert page.locator(".pg-header img, #pg-backend-status img").count() == 0
        assert "/v1/models" in seen
        page.close()
