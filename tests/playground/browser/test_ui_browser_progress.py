"""The prompt's progress on the page (issue 19, point 3): while a long prompt is read in chunks, the pending reply is
a progress bar with the tokens done and the time left, from the engine's `prompt_progress` chunks; it gives way to
the reply. Screenshot: progress-1-reading (the bar), progress-2-replied."""

from __future__ import annotations

import re
import uuid
from typing import Any

from tests.browser_helpers import FINISHED_JS, NEEDS_CHROMIUM, open_page, precise, send, shot, sync_api

pytestmark = NEEDS_CHROMIUM


def test_a_long_prompt_shows_its_progress_then_the_reply(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    precise(page, max_tokens=4)
    # Some 3,000 tokens: a dozen prefill chunks of 256 on this engine, seconds on two cores.
    text = uuid.uuid4().hex + " " + " ".join(f"line {i}: the quick brown fox jumps." for i in range(330))
    send(page, text + "\nHow many lines?")
    bar = page.locator("#pg-chat .pg-progress")
    sync_api.expect(bar).to_be_visible(timeout=60_000)
    note = page.locator("#pg-chat .pg-progress-note").first
    sync_api.expect(note).to_contain_text("Reading the prompt")
    line = note.inner_text()
    match = re.search(r"Reading the prompt: ([\d,]+) of ([\d,]+) tokens", line)
    assert match, line
    done, total = (int(g.replace(",", "")) for g in match.groups())
    assert 0 < done < total and total > 2000, line
    shot(page, "progress-1-reading", full_page=False)
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    sync_api.expect(bar).to_have_count(0)
    shot(page, "progress-2-replied", full_page=False)
    page.close()
