"""The page's model picker (header) and the A/B tab's "B's model" on a server with two LoRA adapters: the chat
answers as the picked adapter, and A/B puts the base model beside an adapter in one run."""

from __future__ import annotations

import time
from typing import Any

from tests.browser_helpers import FINISHED_JS, NEEDS_CHROMIUM, open_page, open_tab, precise, send, shot, sync_api
from tests.conftest import MODEL
from tests.lora_fixture import PROMPT

pytestmark = NEEDS_CHROMIUM


def pick(page: Any, box: str, name: str) -> None:
    """Choose `name` in the Gradio dropdown `box` as a person would: open it, click the option."""
    page.locator(f"{box} input").click()
    page.locator("ul[role=listbox] li", has_text=name).first.click()


def test_the_header_picker_sends_the_chat_to_an_adapter(browser: Any, lora_live: Any) -> None:
    page = open_page(browser, lora_live.url)
    picker = page.locator("#pg-model")
    sync_api.expect(picker).to_be_visible()
    assert page.locator("#pg-model input").input_value() == MODEL
    precise(page, 6)
    pick(page, "#pg-model", "pineapple")
    time.sleep(0.5)  # let the change event land before sending
    shot(page, "lora-1-picker", full_page=False)
    send(page, PROMPT)
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    sync_api.expect(page.locator("#pg-chat")).to_contain_text("PINEAPPLE")
    shot(page, "lora-2-adapter-reply", full_page=False)
    page.close()


def test_ab_runs_the_base_model_beside_an_adapter(browser: Any, lora_live: Any) -> None:
    page = open_page(browser, lora_live.url)
    precise(page, 6)
    page.fill("#pg-input textarea", PROMPT)
    open_tab(page, "⚖ A/B")
    page.locator("label", has_text="Precise (greedy)").last.click()
    sync_api.expect(page.locator("#pg-ab-model")).to_be_visible()
    pick(page, "#pg-ab-model", "mango")
    page.click("#pg-ab-run")
    sync_api.expect(page.locator("#pg-ab-b")).to_contain_text("MANGO", timeout=120_000)
    sync_api.expect(page.locator("#pg-ab-b")).to_contain_text("mango")  # B's label names its model
    page.wait_for_function("() => !/…/.test(document.querySelector('#pg-ab-a').textContent)", timeout=120_000)
    a = page.locator("#pg-ab-a").inner_text()
    assert "MANGO" not in a and "PINEAPPLE" not in a, a
    shot(page, "lora-3-ab-base-vs-adapter")
    page.close()


def test_without_adapters_there_is_no_picker(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    time.sleep(1)  # the page's load event fills (and here hides) the picker
    assert not page.locator("#pg-model").is_visible()
    page.close()
