"""Text-completion mode in the browser (issue 33 item 5): switch the page to Text, send a raw prompt, see the prompt
with its continuation highlighted and, in the Tokens panel, the prompt's own heatmap (one token per prompt token
but the first) before the continuation's; at a desktop and a phone width."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser_helpers import FINISHED_JS, NEEDS_CHROMIUM, open_page, open_tab, send, set_number, shot, stat

pytestmark = NEEDS_CHROMIUM
PROMPT = "The capital of France is"


@pytest.mark.parametrize("width,height", [(1440, 900), (390, 844)])
def test_text_mode_shows_the_continuation_and_the_prompts_heatmap(browser: Any, live: Any, width: int,
                                                                   height: int) -> None:  # fmt: skip
    page = open_page(browser, live.url, width, height)
    # SmolLM2 has a chat template of its own: the page starts on Chat
    assert page.locator("#pg-mode input[value=chat]").is_checked()
    page.locator("#pg-mode label", has_text="Text").click()
    open_tab(page, "Sampling")  # greedy, 8 tokens (browser_helpers.precise, also where the tab row overflows)
    page.locator("#pg-preset label", has_text="Precise").click()
    set_number(page, "max_tokens", 8)
    open_tab(page, "Stats")
    send(page, PROMPT)
    page.wait_for_function(FINISHED_JS)
    reply = page.locator("#pg-chat .pg-textmode").last
    reply.wait_for()
    assert reply.locator(".pg-text-prompt").inner_text() == PROMPT
    continuation = reply.locator("mark.pg-text-cont").inner_text()
    assert continuation.strip() and continuation != "…"
    prompt_tokens = int(stat(page, "prompt tokens"))
    heat = page.locator("#pg-heat .pg-prompt-heat .pg-tok")
    assert heat.count() == prompt_tokens - 1  # the first token has no probability
    completion = int(stat(page, "completion tokens"))
    assert page.locator("#pg-heat .pg-heatmap").count() == 2  # the prompt's, then the continuation's
    assert page.locator("#pg-heat .pg-heatmap").last.locator(".pg-tok").count() == completion
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    page.locator("#pg-heat").scroll_into_view_if_needed()
    shot(page, f"textmode-{width}x{height}", full_page=width > 400)
    page.close()
