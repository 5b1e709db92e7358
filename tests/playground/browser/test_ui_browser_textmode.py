"""Text-completion mode in the browser (issue 33 item 5): switch the page to Text, send a raw prompt, see the prompt
with its continuation highlighted and, in the Tokens panel, the prompt's own heatmap (one token per prompt token
but the first) before the continuation's; at a desktop and a phone width."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser_helpers import (
    FINISHED_JS,
    NEEDS_CHROMIUM,
    close_drawer,
    open_page,
    open_tab,
    send,
    set_number,
    shot,
    stat,
    sync_api,
)

pytestmark = NEEDS_CHROMIUM
PROMPT = "The capital of France is"


def few_tokens(page: Any, max_tokens: int) -> None:
    """Greedy and short (browser_helpers.precise, also where the tab row overflows into its menu)."""
    open_tab(page, "Sampling")
    page.locator("#pg-preset label", has_text="Precise").click()
    set_number(page, "max_tokens", max_tokens)
    open_tab(page, "Stats")
    close_drawer(page)  # a phone's drawer covers the chat


@pytest.mark.parametrize("width,height", [(1440, 900), (390, 844)])
def test_text_mode_shows_the_continuation_and_the_prompts_heatmap(
    browser: Any, live: Any, width: int, height: int
) -> None:
    page = open_page(browser, live.url, width, height)
    # SmolLM2 has a chat template of its own: the page starts on Chat
    assert page.locator("#pg-mode input[value=chat]").is_checked()
    page.locator("#pg-mode label", has_text="Text").click()
    few_tokens(page, 8)
    with live.client() as c:
        count = c.post("/tokenize", json={"prompt": PROMPT}).json()["count"]
    send(page, PROMPT)
    page.wait_for_function(FINISHED_JS)
    reply = page.locator("#pg-chat .pg-textmode").last
    reply.wait_for()
    assert reply.locator(".pg-text-prompt").inner_text() == PROMPT
    continuation = reply.locator("mark.pg-text-cont").inner_text()
    assert continuation.strip() and continuation != "…"
    open_tab(page, "Stats")  # on a phone: in the drawer
    prompt_tokens = int(stat(page, "prompt tokens"))
    assert prompt_tokens == count
    heat = page.locator("#pg-heat .pg-prompt-heat .pg-tok")
    assert heat.count() == prompt_tokens - 1  # the first token has no probability
    completion = int(stat(page, "completion tokens"))
    assert page.locator("#pg-heat .pg-heatmap").count() == 2  # the prompt's, then the continuation's
    assert page.locator("#pg-heat .pg-heatmap").last.locator(".pg-tok").count() == completion
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    # Nothing keeps running once the reply is shown: the radio as an input of the check line and the context
    # meter once set off an endless loop of both (~5 events a second at 390 px); a late refresh may still come.
    page.wait_for_timeout(1500)
    joins: list[str] = []
    page.on("request", lambda r: joins.append((r.post_data or "")[-90:]) if "queue/join" in r.url else None)
    page.wait_for_timeout(2000)
    assert len(joins) < 5, joins
    page.locator("#pg-heat").scroll_into_view_if_needed()
    shot(page, f"textmode-{width}x{height}", full_page=width > 400)
    page.close()


def test_a_base_model_starts_in_text_mode_and_switches_to_chat(browser: Any, gemma_live: Any) -> None:
    """Gemma 3 270M has no chat template of its own (served on engine/serving/plain_template.jinja): the page
    starts on Text, its continuation reads on from the prompt, and Chat is one click away."""
    page = open_page(browser, gemma_live.url)
    page.wait_for_function("() => document.querySelector('#pg-mode input[value=text]')?.checked")
    few_tokens(page, 12)
    send(page, PROMPT)
    page.wait_for_function(FINISHED_JS)
    reply = page.locator("#pg-chat .pg-textmode").last
    assert reply.locator(".pg-text-prompt").inner_text() == PROMPT
    assert reply.locator("mark.pg-text-cont").inner_text().strip()
    # Gemma's tokenizer puts <bos> first: it is the token without a probability
    assert page.locator("#pg-heat .pg-prompt-heat .pg-tok").count() == int(stat(page, "prompt tokens")) - 1
    shot(page, "textmode-gemma-1440x900")
    page.locator("#pg-mode label", has_text="Chat").click()
    assert page.locator("#pg-mode input[value=chat]").is_checked()
    page.close()


def test_text_modes_context_meter_counts_the_raw_prompt(browser: Any, live: Any) -> None:
    """Issue 30: in Text mode the meter counted the chat template's rendering of the box (49 tokens where 5 are
    sent); it counts the raw prompt /v1/completions gets, as the API's /tokenize counts it."""
    page = open_page(browser, live.url)
    with live.client() as c:
        count = c.post("/tokenize", json={"prompt": PROMPT}).json()["count"]
        templated = c.post("/tokenize", json={"messages": [{"role": "user", "content": PROMPT}]}).json()["count"]
    assert count < templated
    box = page.locator("#pg-input textarea")
    box.press_sequentially(PROMPT, delay=10)  # typed: `input` events, the meter measures the chat's prompt
    meter = page.locator("#pg-context")
    sync_api.expect(meter).to_contain_text(f"{templated} prompt")
    page.locator("#pg-mode label", has_text="Text").click()
    sync_api.expect(meter).to_contain_text(f"context: {count} prompt + ")
    box.fill("")
    box.press_sequentially(PROMPT, delay=10)  # typed in Text mode: the raw prompt too
    sync_api.expect(meter).to_contain_text(f"context: {count} prompt + ")
    shot(page, "textmode-meter-1440x900", full_page=False)
    page.close()
