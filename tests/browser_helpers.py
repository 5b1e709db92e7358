"""What the browser tests share: launching Debian's Chromium, opening the page, sending, reading the side panel,
and the screenshots (to $PLAYGROUND_SHOTS, default <tmp>/playground-shots) a person looks at."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = Path(os.environ.get("PLAYGROUND_SHOTS") or Path(tempfile.gettempdir()) / "playground-shots")

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
# Each browser test module sets `pytestmark = NEEDS_CHROMIUM`.
NEEDS_CHROMIUM = pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (apt-get install chromium)")


def launch(p: Any) -> Any:
    """One headless Chromium (conftest's session-wide `browser` fixture)."""
    return p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)


# Recorded by the page itself: when the reply's text changed, so the test sees streaming, not just a result.
WATCH_JS = """() => {
  window.pgPaints = [];
  const chat = document.querySelector('#pg-chat');
  const bot = () => [...chat.querySelectorAll('.message.bot, [data-testid="bot"]')].map(e => e.innerText).join('|');
  let last = bot();
  new MutationObserver(() => { const now = bot(); if (now !== last) { last = now; window.pgPaints.push(
    [performance.now(), now.length]); } }).observe(chat, {subtree: true, childList: true, characterData: true});
  window.pgStart = performance.now();
}"""
FINISHED_JS = """() => { const e = document.querySelector("#pg-stats td[data-stat='finish reason']");
  return e && !/streaming|–/.test(e.textContent); }"""


def open_page(browser: Any, url: str, width: int = 1440, height: int = 900, locale: str | None = None) -> Any:
    """The page in a fresh browser context (its own storage) at this viewport, once the model is loaded (the header
    names it); `locale` ("zh-CN"): the browser's language (close `page.context` when done)."""
    if locale is None:
        page = browser.new_page(viewport={"width": width, "height": height})
    else:
        page = browser.new_context(locale=locale, viewport={"width": width, "height": height}).new_page()
    page.set_default_timeout(60_000)
    page.goto(url + "/")
    page.wait_for_selector("#pg-input textarea")
    page.wait_for_function("() => document.querySelector('.pg-header b')")  # the model's name: loaded
    return page


def shot(page: Any, name: str, full_page: bool = True) -> None:
    """A screenshot for a person to look at; `full_page=False`: only what is on the screen (a full-page shot
    resizes the page, which lets the chat scroll itself to its end)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)


def attach_png(page: Any, tmp_path: Path, size: tuple[int, int]) -> tuple[Path, Any]:
    """Upload a red PNG of `size` through the attach panel; the file and the pending-attachments list."""
    from tests.media_samples import image_bytes

    png = tmp_path / "red.png"
    png.write_bytes(image_bytes("PNG", size))
    page.set_input_files("#pg-attach-image input[type=file]", str(png))
    return png, page.locator("#pg-attach-list")


def precise(page: Any, max_tokens: int | None = None) -> None:
    """Greedy decoding (the Precise preset) and a small max_tokens, then back to the Stats tab."""
    page.get_by_role("tab", name="Sampling").click()
    page.locator("#pg-preset label", has_text="Precise").click()
    if max_tokens is not None:
        set_number(page, "max_tokens", max_tokens)
    page.get_by_role("tab", name="Stats").click()


def set_number(page: Any, knob: str, value: Any) -> None:
    box = page.locator(f"#pg-{knob} input[type=number]").first
    box.fill(str(value))
    box.press("Enter")


# The check line's own words: its Markdown paragraphs (layout's style.css hides the line when it has none). Its block
# also holds Gradio's status tracker, whose timer ("0.1s", "processing | 0.1s") stays in the DOM, at opacity 0, while
# a preview of the request runs, even with show_progress="hidden": the block's whole text is not what the user reads.
CHECK_LINE = "#pg-check p"


def check_says(page: Any) -> str:
    return " ".join(page.locator(CHECK_LINE).all_inner_texts()).strip()


def expect_check_clear(page: Any) -> None:
    """Wait until the check line says nothing."""
    sync_api.expect(page.locator(CHECK_LINE)).to_have_count(0)


def stat(page: Any, name: str) -> str:
    return page.locator(f"#pg-stats td[data-stat='{name}']").inner_text()


def send(page: Any, text: str) -> None:
    page.fill("#pg-input textarea", text)
    page.evaluate(WATCH_JS)
    page.click("#pg-send")


DRAWER_OPEN_JS = "() => document.body.classList.contains('pg-drawer-open')"


def open_drawer(page: Any) -> None:
    """On a phone, open the side tabs' drawer with the header's button (a wide page has no drawer: nothing to do)."""
    if page.locator("button#pg-drawer").is_visible() and not page.evaluate(DRAWER_OPEN_JS):
        page.click("button#pg-drawer")
        page.wait_for_function(DRAWER_OPEN_JS)


def close_drawer(page: Any) -> None:
    """On a phone, close the side tabs' drawer (it covers the chat); nothing on a wide page."""
    if page.locator("button#pg-drawer").is_visible() and page.evaluate(DRAWER_OPEN_JS):
        page.click("button#pg-drawer")
        page.wait_for_function(f"() => !({DRAWER_OPEN_JS})()")


def open_tab(page: Any, name: str) -> None:
    """A tab by name: on a phone in the side tabs' drawer (opened, and left open), and also when the tab row is
    too narrow and Gradio moved the tab into its overflow menu."""
    open_drawer(page)
    tab = page.get_by_role("tab", name=name)
    if not tab.is_visible():
        page.locator(".overflow-menu > button").first.click()
        tab = page.locator(".overflow-dropdown button", has_text=name)
    tab.click()


def import_file(page: Any, path: Path) -> None:
    """Through the Import button's file chooser, as a person would."""
    with page.expect_file_chooser() as chooser:
        page.click("#pg-import")
    chooser.value.set_files(str(path))
