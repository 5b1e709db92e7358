"""Models from the page (issue 22): the header's picker lists the server's models with their size, architecture
and what they take; picking another one switches the server to it with a progress bar (unloading the first, the
memory budget holding only one), the chat then answers as that model, and picking the first one switches back.
The A/B tab puts two loaded models side by side.

The switch goes from SmolLM2 to Gemma 3 270M (tests/models_fixture.py's `GEMMA`, a base model on the plain
template) and back; the A/B and admin-key tests use the tiny Qwen3 (`SECOND`), which loads in a second."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.browser_helpers import FINISHED_JS, NEEDS_CHROMIUM, open_page, open_tab, precise, send, shot, sync_api
from tests.conftest import MODEL, LiveServer
from tests.models_fixture import (
    GEMMA,
    QWEN,
    SECOND,
    SECOND_ID,
    default_only_server,
    gemma_on_disk,
    memory_bytes,
    models_server,
    wait_loaded,
)

pytestmark = NEEDS_CHROMIUM
QUESTION = SECOND.question
HEADER_NAME = "() => document.querySelector('.pg-header b')?.textContent"
# Records every progress text the page shows (Gradio's bar over the event's outputs), however briefly.
WATCH_PROGRESS_JS = """() => { window.pgProgress = [];
  new MutationObserver(() => { for (const e of document.querySelectorAll('.progress-level-inner, .progress-text')) {
    const t = e.textContent.trim(); if (t && window.pgProgress.at(-1) !== t) window.pgProgress.push(t); } })
  .observe(document.body, {subtree: true, childList: true, characterData: true}); }"""


@pytest.fixture(scope="module")
def tight(settings: Any, tmp_path_factory: Any) -> Iterator[LiveServer]:
    """A memory budget that holds either model, never both."""
    root = tmp_path_factory.mktemp("browser-models")
    need = memory_bytes(settings, root, GEMMA, (MODEL, GEMMA.id))  # no server (and no model loaded) to ask it
    with models_server(settings, root, GEMMA, models_memory_mb=need // (1 << 20) - 1) as server:
        yield server


def statuses(server: LiveServer) -> dict[str, str]:
    with server.client() as c:
        return {m["id"]: m["status"] for m in c.get("/v1/models").json()["data"] if m["id"] in (MODEL, GEMMA.id)}


def pick(page: Any, name: str) -> None:
    page.locator("#pg-model input").click()
    page.locator("ul[role=listbox] li", has_text=name).first.click()


def wait_header(page: Any, name: str) -> None:
    page.wait_for_function(f"() => ({HEADER_NAME})() === {name!r}", timeout=300_000)


def test_the_header_switches_to_the_second_model_and_back(browser: Any, tight: LiveServer) -> None:
    page = open_page(browser, tight.url)
    picker = page.locator("#pg-model")
    sync_api.expect(picker).to_be_visible()
    assert MODEL in page.locator("#pg-model input").input_value()
    page.locator("#pg-model input").click()
    options = page.locator("ul[role=listbox] li")
    sync_api.expect(options).to_have_count(3)  # and the bundled tiny Qwen3, always offered
    first, second = options.nth(0).inner_text(), options.nth(1).inner_text()
    assert "135M" in first and "llama" in first and "text" in first and "●" in first, first  # loaded
    assert GEMMA.architecture in second and all(c in second for c in GEMMA.caps) and "○" in second, second
    shot(page, "models-1-picker", full_page=False)
    page.keyboard.press("Escape")
    precise(page, 48)

    page.evaluate(WATCH_PROGRESS_JS)
    pick(page, GEMMA.id)
    page.locator(".progress-level-inner", has_text="Loading").first.wait_for(state="attached", timeout=30_000)
    shot(page, "models-2-loading-second", full_page=False)
    wait_header(page, GEMMA.id)
    seen = page.evaluate("() => window.pgProgress")
    assert any(f"Loading {GEMMA.id}" in t for t in seen), seen
    assert statuses(tight) == {MODEL: "loadable", GEMMA.id: "loaded"}  # the budget holds one: the first went
    assert GEMMA.id in page.locator("#pg-model input").input_value()
    send(page, GEMMA.question)
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    sync_api.expect(page.locator("#pg-chat")).to_contain_text(GEMMA.answer)
    # A base model starts in Text mode, which sends the box's raw text alone: with the box empty after the reply
    # there is nothing to measure. The next text is measured against the second model's window (a /tokenize
    # through its 262k vocabulary).
    # (the meter's own div: the block also holds Gradio's status tracker, see browser_helpers.CHECK_LINE)
    sync_api.expect(page.locator("#pg-context .pg-context")).to_have_count(0)
    page.locator("#pg-input textarea").press_sequentially("The capital of Italy is", delay=10)  # `input` events
    sync_api.expect(page.locator("#pg-context")).to_contain_text(GEMMA.context, timeout=30_000)
    shot(page, "models-3-second-answers", full_page=False)
    open_tab(page, "Server")  # Gemma's engine: its sliding layers' pool beside the main one
    window_row = page.locator("#pg-server td[data-srv='window_pages']")
    window_row.wait_for(timeout=60_000)
    shot(page, "models-3b-server-window-pool", full_page=False)

    page.evaluate("() => { window.pgProgress.length = 0; }")
    pick(page, MODEL)
    page.locator(".progress-level-inner", has_text="Loading").first.wait_for(state="attached", timeout=30_000)
    shot(page, "models-4-loading-first", full_page=False)
    wait_header(page, MODEL)
    seen = page.evaluate("() => window.pgProgress")
    assert any(f"Loading {MODEL}" in t for t in seen), seen
    assert statuses(tight) == {MODEL: "loaded", GEMMA.id: "loadable"}
    assert MODEL in page.locator("#pg-model input").input_value()
    sync_api.expect(page.locator("#pg-context")).to_contain_text("8,192")  # the meter follows the switch
    window_row.wait_for(state="detached", timeout=60_000)  # and the Server tab: SmolLM2 has no window pool
    shot(page, "models-5-back-to-first", full_page=False)
    page.close()


def test_ab_puts_two_loaded_models_side_by_side(browser: Any, settings: Any, tmp_path_factory: Any) -> None:
    with models_server(settings, tmp_path_factory.mktemp("browser-ab")) as server:
        with httpx.Client(base_url=server.url, timeout=120) as c:  # load the second model beside the first
            c.post("/v1/chat/completions", json={"model": SECOND_ID, "messages": [{"role": "user", "content": "hi"}]})
            assert wait_loaded(c, SECOND_ID)["status"] == "loaded"
        page = open_page(browser, server.url)
        wait_header(page, MODEL)  # loading on demand leaves the current model as it was
        precise(page, 48)
        page.fill("#pg-input textarea", QUESTION)
        open_tab(page, "⚖ A/B")
        page.locator("label", has_text="Precise (greedy)").last.click()
        sync_api.expect(page.locator("#pg-ab-model")).to_be_visible()
        page.locator("#pg-ab-model input").click()
        page.locator("ul[role=listbox] li", has_text=SECOND_ID).first.click()
        page.click("#pg-ab-run")
        sync_api.expect(page.locator("#pg-ab-b")).to_contain_text(SECOND_ID, timeout=120_000)  # B's label names it
        sync_api.expect(page.locator("#pg-ab-b")).to_contain_text(SECOND.answer, timeout=120_000)
        page.wait_for_function("() => !/…/.test(document.querySelector('#pg-ab-a').textContent)", timeout=120_000)
        shot(page, "models-6-ab-two-models")
        page.close()


def test_with_credentials_switching_takes_an_admin_key(browser: Any, settings: Any, tmp_path_factory: Any) -> None:
    from tests.playground.browser.test_ui_browser_server import login

    root = tmp_path_factory.mktemp("browser-admin")
    with models_server(settings, root, api_keys=["user"], admin_keys=["root"]) as server:
        page = login(browser, server.url, "user")
        key = page.locator("#pg-model-key input")
        sync_api.expect(key).to_be_visible()
        pick(page, SECOND_ID)
        sync_api.expect(page.locator(".toast-body")).to_contain_text("admin key")
        assert statuses_with(server, "user")[SECOND_ID] == "loadable"  # nothing loaded
        assert MODEL in page.locator("#pg-model input").input_value()  # the picker went back to the current model
        shot(page, "models-7-needs-admin-key", full_page=False)
        key.fill("user")  # a valid API key, but not an admin's
        pick(page, SECOND_ID)
        sync_api.expect(page.locator(".toast-body").last).to_contain_text("admin key")
        assert statuses_with(server, "user")[SECOND_ID] == "loadable"
        key.fill("root")
        pick(page, SECOND_ID)
        wait_header(page, SECOND_ID)
        assert statuses_with(server, "user")[SECOND_ID] == "loaded"
        shot(page, "models-8-admin-switched", full_page=False)
        page.close()


def statuses_with(server: LiveServer, key: str) -> dict[str, str]:
    with server.client(headers={"Authorization": f"Bearer {key}"}) as c:
        return {m["id"]: m["status"] for m in c.get("/v1/models").json()["data"]}


# ---- the bundled models, picked per page (issue 30, item 5) ---------------------------------------------------------


@pytest.fixture(scope="module")
def fresh(settings: Any, tiny_qwen_dir: Any, tmp_path_factory: Any) -> Iterator[Any]:
    with default_only_server(settings, tiny_qwen_dir, tmp_path_factory.mktemp("fresh-cache")) as served:
        yield served


def raw_reply(page: Any) -> str:
    """The Request tab's raw chunks of the last reply (the server's own JSON, `"model":...` in each)."""
    open_tab(page, "Request")
    raw = page.locator("#pg-raw .cm-content")
    raw.wait_for(timeout=30_000)
    return raw.inner_text()


def test_the_picker_offers_the_bundled_models_and_each_page_keeps_its_own(browser: Any, fresh: Any) -> None:
    """With only the default model on disk: the three bundled models are offered by name, Gemma with the download a
    first pick costs; one page picks the tiny Qwen3 (loaded with a progress bar) and is answered by it, while a
    second page, open at the same time, goes on talking to SmolLM2."""
    server, cache, _ = fresh
    page, other = open_page(browser, server.url), open_page(browser, server.url)
    page.locator("#pg-model input").click()
    options = page.locator("ul[role=listbox] li")
    sync_api.expect(options).to_have_count(3)
    smol, gemma, qwen = (options.nth(i).inner_text() for i in range(3))
    assert f"● {MODEL} ·" in smol and "135M" in smol and "llama" in smol, smol
    assert "○ gemma-3-270m ·" in gemma and "268M" in gemma and "gemma3_text" in gemma, gemma
    assert "MB on first use" in gemma, gemma  # not on disk: its download, said before it is picked
    assert f"○ {QWEN} ·" in qwen and "qwen3" in qwen and "reasoning" in qwen and "tools" in qwen, qwen
    shot(page, "models-9-bundled-picker", full_page=False)
    page.keyboard.press("Escape")
    options.first.wait_for(state="detached")
    precise(page, 48)

    page.evaluate(WATCH_PROGRESS_JS)
    pick(page, QWEN)
    wait_header(page, QWEN)
    seen = page.evaluate("() => window.pgProgress")
    assert any(f"Loading {QWEN}" in t for t in seen), seen
    send(page, QUESTION)
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    sync_api.expect(page.locator("#pg-chat")).to_contain_text(SECOND.answer)
    assert f'"model":"{QWEN}"' in raw_reply(page)
    shot(page, "models-10-page-on-its-pick", full_page=False)

    # The other page was open all along: its header, its picker and its replies are still SmolLM2's.
    assert other.evaluate(HEADER_NAME) == MODEL and MODEL in other.locator("#pg-model input").input_value()
    precise(other, 8)
    send(other, QUESTION)
    other.wait_for_function(FINISHED_JS, timeout=120_000)
    assert f'"model":"{MODEL}"' in raw_reply(other)
    # A page opened after the pick opens on the server's model too, and nothing of Gemma was fetched.
    late = open_page(browser, server.url)
    assert late.evaluate(HEADER_NAME) == MODEL
    assert gemma_on_disk(cache) == []
    # On a phone the header stays above the picker, both inside the screen (issue 30: the picker's 400 px minimum
    # hid the header and ran off the right edge).
    phone = open_page(browser, server.url, 390, 844)
    title, picker = phone.locator(".pg-header h1").bounding_box(), phone.locator("#pg-model").bounding_box()
    assert title["width"] > 50 and title["y"] + title["height"] <= picker["y"] + 1, (title, picker)
    assert picker["x"] >= 0 and picker["x"] + picker["width"] <= 390, picker
    shot(phone, "models-11-phone-header-and-picker", full_page=False)
    for p in (page, other, late, phone):
        p.close()
