"""The Prompt tab (issue 19): the rendered prompt and its tokens, for the message being typed and for the selected
reply's request, from the embedded engine's /tokenize path. On the bundled SmolLM2 and on the tiny Qwen3, whose
`<think>` and tool-call tokens are marked as special."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.browser_helpers import FINISHED_JS, NEEDS_CHROMIUM, open_page, open_tab, precise, shot, stat, sync_api

pytestmark = NEEDS_CHROMIUM


def view(page: Any) -> Any:
    return page.locator("#pg-prompt")


def shown_count(page: Any) -> int:
    counts = view(page).locator(".pg-prompt-counts")
    sync_api.expect(counts).to_have_count(1)
    return int(counts.get_attribute("data-count"))


def special_chips(page: Any) -> list[str]:
    return view(page).locator(".pg-ptok-special").all_inner_texts()


def test_prompt_of_the_typed_message_and_of_the_reply(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    precise(page, 4)
    time.sleep(0.5)
    page.fill("#pg-input textarea", "Hello there, prompt view")
    steps = live.service.engine.steps
    open_tab(page, "¶ Prompt")
    text = view(page).locator(".pg-prompt-text")
    sync_api.expect(text).to_contain_text("<|im_start|>user")
    sync_api.expect(text).to_contain_text("Hello there, prompt view")
    assert live.service.engine.steps == steps  # nothing was generated
    with httpx.Client(base_url=live.url) as http:
        body = {"messages": [{"role": "user", "content": "Hello there, prompt view"}]}
        api = http.post("/tokenize", json=body).json()
    count = shown_count(page)
    assert count == api["count"]  # the page and the API answer from the same path
    assert view(page).locator(".pg-ptok").count() == count  # one chip per token (no media here)
    assert {"<|im_start|>", "<|im_end|>"} <= set(special_chips(page))
    assert text.locator("mark.pg-prompt-special", has_text="<|im_start|>").count() >= 2
    first = view(page).locator(".pg-ptok").first
    assert first.get_attribute("title").startswith(f"id {api['tokens'][0]} ")
    shot(page, "prompt-1-typed-smollm")

    page.click("#pg-send")
    page.wait_for_function(FINISHED_JS)
    prompt_tokens = int(stat(page, "prompt tokens"))
    open_tab(page, "¶ Prompt")
    page.locator("#pg-prompt-source label", has_text="selected reply").click()
    sync_api.expect(view(page).locator(".pg-prompt-head")).to_contain_text("selected reply")
    assert shown_count(page) == prompt_tokens  # what the engine prefilled for that reply
    # the typed message again, now after the reply: the history and the new message, as Send would send them
    page.fill("#pg-input textarea", "And a second one")
    page.locator("#pg-prompt-source label", has_text="being typed").click()
    sync_api.expect(view(page).locator(".pg-prompt-text")).to_contain_text("And a second one")
    assert shown_count(page) > prompt_tokens
    shot(page, "prompt-2-after-reply-smollm")
    page.close()


def test_qwen_thinking_and_tool_tokens_are_marked_special(browser: Any, qwen_live: Any) -> None:
    page = open_page(browser, qwen_live.url)
    open_tab(page, "⚒ Tools")
    page.click("#pg-tool-example input")
    page.keyboard.type("get_weather")
    page.keyboard.press("Enter")
    sync_api.expect(page.locator("#pg-tools-check")).to_contain_text("1 tool(s) valid")
    open_tab(page, "≋ Sampling")
    page.locator("#pg-side .label-wrap", has_text="Thinking").click()
    page.locator("#pg-enable_thinking label", has_text="off").click()
    time.sleep(0.5)
    page.fill("#pg-input textarea", "Weather in Paris?")
    open_tab(page, "¶ Prompt")
    text = view(page).locator(".pg-prompt-text")
    sync_api.expect(text).to_contain_text("get_weather")
    sync_api.expect(text).to_contain_text("Weather in Paris?")
    marked = set(special_chips(page))
    assert {"<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_start|>"} <= marked, marked
    assert text.locator("mark.pg-prompt-special", has_text="<think>").count() == 1
    with httpx.Client(base_url=qwen_live.url) as http:
        messages = [{"role": "user", "content": "Weather in Paris?"}]
        chat = http.post(
            "/v1/chat/completions",
            json={
                "model": "tiny-qwen3",
                "messages": messages,
                "max_tokens": 1,
                "tools": page.evaluate("() => JSON.parse(document.querySelector('#pg-tools .cm-content').innerText)"),
                "chat_template_kwargs": {"enable_thinking": False},
            },
        ).json()
    assert shown_count(page) == chat["usage"]["prompt_tokens"]
    view(page).locator(".pg-ptok-special", has_text="<tool_call>").first.scroll_into_view_if_needed()
    shot(page, "prompt-3-qwen-think-tools", full_page=False)
    page.close()


def test_the_prompt_tab_speaks_chinese(browser: Any, live: Any) -> None:
    """The tab's own wording in a Chinese browser, scanned as tests/playground/browser/test_ui_browser_i18n.py scans the page (the
    prompt text and the token chips are the model's, left out as code)."""
    from tests.playground.browser.test_ui_browser_i18n import SKIPPED, VISIBLE_TEXT_JS, english_runs

    page = open_page(browser, live.url, locale="zh-CN")
    context = page.context
    page.fill("#pg-input textarea", "你好")
    open_tab(page, "¶ 提示词")
    sync_api.expect(view(page).locator(".pg-prompt-counts")).to_contain_text("个 token")
    found = {
        run
        for where, text in page.evaluate(VISIBLE_TEXT_JS, SKIPPED)
        if where.startswith("#pg-prompt")
        for run in english_runs(text)
    }
    assert not found, found
    page.locator("#pg-prompt-source label", has_text="所选回复").click()
    sync_api.expect(view(page).locator(".pg-prompt-note")).to_contain_text("还没有回复")
    found = {
        run
        for where, text in page.evaluate(VISIBLE_TEXT_JS, SKIPPED)
        if where.startswith("#pg-prompt")
        for run in english_runs(text)
    }
    assert not found, found
    shot(page, "prompt-4-zh")
    context.close()
