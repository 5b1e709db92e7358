"""The page's layout in a real browser (playground/page/static/layout.css, layout.js): a side panel that scrolls on its
own beside a chat that stays in view, a chat label that covers no text, a phone's first screen, dark mode across a
reload, and previews of pending attachments. Measured from bounding boxes and scroll sizes, not pixels."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser_helpers import (
    FINISHED_JS,
    NEEDS_CHROMIUM,
    attach_png,
    close_drawer,
    open_page,
    open_tab,
    shot,
    sync_api,
)

pytestmark = NEEDS_CHROMIUM

BOX_JS = """s => { const e = document.querySelector(s); if (!e) return null; const b = e.getBoundingClientRect();
  return {x: b.x, y: b.y, w: b.width, h: b.height, top: b.top, bottom: b.bottom, left: b.left, right: b.right,
          scrollHeight: e.scrollHeight, clientHeight: e.clientHeight, scrollTop: e.scrollTop}; }"""

# The visible lines of the chat's message text (one rect per line box), clipped to the chat's scroll area, and the
# boxes of the chat's floating label and its clear / copy buttons, with the chat scrolled to `scroll` px first (in
# the same call, so nothing scrolls it between the two).
CHAT_BOXES_JS = """scroll => {
  const chat = document.querySelector('#pg-chat');
  const scroller = chat.querySelector('.bubble-wrap');
  scroller.scrollTop = scroll;
  const wrap = scroller.getBoundingClientRect();
  const box = e => { const b = e.getBoundingClientRect(); return {left: b.left, right: b.right, top: b.top,
                                                                bottom: b.bottom}; };
  const lines = [];
  for (const m of chat.querySelectorAll('.message-content')) {
    const walker = document.createTreeWalker(m, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (!n.textContent.trim()) continue;
      const range = document.createRange(); range.selectNodeContents(n);
      for (const r of range.getClientRects()) {
        const top = Math.max(r.top, wrap.top), bottom = Math.min(r.bottom, wrap.bottom);
        if (bottom - top > 2 && r.width > 0) lines.push({left: r.left, right: r.right, top, bottom,
                                                         text: n.textContent.slice(0, 30)});
      }
    }
  }
  const first = chat.querySelector('.message-content');
  return {lines, first: first && box(first), label: box(chat.querySelector('label')), scrolled: scroller.scrollTop,
          icons: box(chat.querySelector('.icon-button-wrapper.top-panel'))};
}"""


def box(page: Any, selector: str) -> dict[str, float]:
    b = page.evaluate(BOX_JS, selector)
    assert b is not None, f"{selector} is not on the page"
    return b


def overlaps(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["left"] < b["right"] - 0.5
        and b["left"] < a["right"] - 0.5
        and a["top"] < b["bottom"] - 0.5
        and (b["top"] < a["bottom"] - 0.5)
    )


def in_view(b: dict[str, float], height: int) -> bool:
    return b["top"] >= 0 and b["bottom"] <= height and b["h"] > 0


def test_the_side_panel_scrolls_on_its_own_beside_a_chat_that_stays_in_view(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url, 1600, 1000)
    open_tab(page, "Sampling")  # the tallest tab: about 1,900 px of controls
    sync_api.expect(page.locator("#pg-temperature")).to_be_visible()
    side = box(page, "#pg-side")
    assert side["scrollHeight"] > side["clientHeight"] + 300, side  # the panel holds more than it shows
    assert side["bottom"] <= 1000 and page.evaluate("window.scrollY") == 0, side  # and it fits the screen
    for sel in ("#pg-input textarea", "#pg-send"):
        assert in_view(box(page, sel), 1000), sel
    sync_api.expect(page.locator("button#pg-stop")).to_be_hidden()  # nothing runs: no Stop
    shot(page, "layout-1-wide-sampling")

    # the wheel over the panel scrolls the panel, not the page; the chat's input stays where it was
    page.mouse.move(side["x"] + side["w"] / 2, side["y"] + side["h"] / 2)
    before = box(page, "#pg-input textarea")
    for _ in range(12):
        page.mouse.wheel(0, 400)
    page.wait_for_function(
        "() => { const s = document.querySelector('#pg-side');"
        " return s.scrollTop + s.clientHeight >= s.scrollHeight - 2; }"
    )
    after = box(page, "#pg-input textarea")
    assert page.evaluate("window.scrollY") == 0
    assert after["top"] == before["top"] and in_view(after, 1000)
    tabs = box(page, "#pg-side .tab-wrapper")
    side = box(page, "#pg-side")
    assert side["top"] - 1 <= tabs["top"] and tabs["bottom"] <= side["bottom"], (tabs, side)  # the tabs stay on top
    last = page.get_by_text("Thinking", exact=True).last.bounding_box()
    assert last is not None and last["y"] + last["height"] <= 1000  # the panel's end is on the screen
    shot(page, "layout-2-side-scrolled", full_page=False)
    page.close()


@pytest.mark.parametrize("width,height", [(1600, 1000), (390, 844)])
def test_the_chat_label_and_buttons_cover_no_message_text(browser: Any, live: Any, width: int, height: int) -> None:
    page = open_page(browser, live.url, width, height)
    _precise(page, 4)
    time.sleep(0.5)  # let the controls' change events land before sending
    # a long first message: the chat overflows, so its text also passes where the label floats
    text = "\n".join(f"Line {i} of a long first message that fills the chat." for i in range(1, 41))
    page.fill("#pg-input textarea", text)
    page.click("#pg-send")
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    page.wait_for_function(
        "() => { const w = document.querySelector('#pg-chat .bubble-wrap');"
        " return w.scrollTop > 0 && w.scrollTop + w.clientHeight >= w.scrollHeight - 2; }"
    )
    at_top = page.evaluate(CHAT_BOXES_JS, 0)
    assert at_top["first"] and at_top["lines"] and at_top["scrolled"] == 0, at_top
    first_lines = [line for line in at_top["lines"] if line["text"].startswith("Line 1 ")]
    assert first_lines, at_top["lines"][:3]
    for line in first_lines:
        assert not overlaps(line, at_top["label"]) and not overlaps(line, at_top["icons"]), (line, at_top)
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, f"layout-3-chat-label-{width}-top", full_page=False)

    for scroll in (37, 150, 400):  # part-way down: lines pass under where the label and the buttons float
        seen = page.evaluate(CHAT_BOXES_JS, scroll)
        assert seen["lines"] and seen["scrolled"] == scroll
        hidden = [line for line in seen["lines"] if overlaps(line, seen["label"]) or overlaps(line, seen["icons"])]
        assert not hidden, (scroll, hidden[:2], seen["label"], seen["icons"])
    shot(page, f"layout-3-chat-label-{width}-scrolled", full_page=False)
    page.close()


def _precise(page: Any, max_tokens: int) -> None:
    """browser_helpers.precise, also for a narrow page, whose side tabs may sit in Gradio's overflow menu."""
    open_tab(page, "Sampling")
    page.locator("#pg-preset label", has_text="Precise").click()
    box_ = page.locator("#pg-max_tokens input[type=number]").first
    box_.fill(str(max_tokens))
    box_.press("Enter")
    open_tab(page, "Stats")
    close_drawer(page)  # a phone's drawer covers the chat


def test_on_a_phone_the_header_is_one_line_and_the_input_is_on_the_first_screen(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url, 390, 844)
    shot(page, "layout-4-phone")
    header = page.locator(".pg-header")
    chips = header.locator(".pg-badge")
    assert chips.count() >= 4
    tops = {round(b["y"] + b["height"] / 2) for b in (chips.nth(i).bounding_box() for i in range(chips.count()))}
    title = header.locator("h1").bounding_box()
    assert max(tops) - min(tops) <= 2, tops  # one line: every chip on the same middle
    assert abs(title["y"] + title["height"] / 2 - min(tops)) <= 4 and box(page, ".pg-header")["h"] < 48
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390  # the line scrolls, not the page

    page_y = page.evaluate("window.scrollY")
    assert page_y == 0
    field, send = box(page, "#pg-input textarea"), box(page, "#pg-send")
    for name, b in (("input", field), ("Send", send)):
        assert in_view(b, 844) and b["left"] >= 0 and b["right"] <= 390, (name, b)
    assert send["left"] >= field["right"] - 1 and send["top"] < field["bottom"]  # beside the input
    page.evaluate("document.body.classList.add('pg-busy')")  # as while a reply runs: Stop beside Send
    send, stop = box(page, "#pg-send"), box(page, "#pg-stop")
    assert in_view(stop, 844) and stop["right"] <= 390 and abs(stop["top"] - send["top"]) <= 2, (send, stop)
    assert stop["left"] >= send["right"], (send, stop)
    page.evaluate("document.body.classList.remove('pg-busy')")
    welcome = page.locator("#pg-chat").inner_text()
    assert "Ask SmolLM2-135M-Instruct" in welcome and "What is the capital of France?" in welcome
    page.close()


def test_dark_mode_survives_a_reload(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url, 1440, 900)
    is_dark = "() => document.body.classList.contains('dark')"
    # the page's painted background: the first ancestor of the app with an opaque one
    background = """() => { for (let e = document.querySelector('.gradio-container'); e; e = e.parentElement) {
      const [r, g, b, a = 1] = getComputedStyle(e).backgroundColor.match(/[\\d.]+/g).map(Number);
      if (a > 0) return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255; } return null; }"""
    assert not page.evaluate(is_dark) and page.evaluate(background) > 0.5  # headless Chromium prefers light
    page.click("#pg-dark")
    page.wait_for_function(is_dark)
    page.reload()
    page.wait_for_selector("#pg-input textarea")
    page.wait_for_function("() => !document.querySelector('.pg-header').innerText.includes('loading')")
    assert page.evaluate(is_dark) and page.evaluate(background) < 0.3  # still dark, once Gradio has mounted
    shot(page, "layout-5-dark-after-reload")
    page.click("#pg-dark")  # and back: light survives a reload too
    page.wait_for_function(f"() => !({is_dark})()")
    page.reload()
    page.wait_for_selector("#pg-input textarea")
    page.wait_for_function("() => !document.querySelector('.pg-header').innerText.includes('loading')")
    assert not page.evaluate(is_dark)
    page.close()


def _h264(path: Path, size: tuple[int, int] = (64, 48)) -> Path:
    """A 1 s H.264 clip (what browsers play; the shared samples use MPEG-4 part 2, which Chromium does not)."""
    import av
    import numpy as np

    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(10):
            frame = av.VideoFrame.from_ndarray(np.full((size[1], size[0], 3), (40, 120, 220), np.uint8), format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # gradio's gr.Image leaks the upload
def test_pending_attachments_show_a_thumbnail_or_a_player(browser: Any, live: Any, tmp_path: Path) -> None:
    from tests.media_samples import audio_bytes, tone

    page = open_page(browser, live.url, 1440, 900)
    page.get_by_text("Attach image · audio · video · URL").click()
    _, pending = attach_png(page, tmp_path, (64, 48))
    thumb = pending.locator("img.pg-thumb")
    sync_api.expect(thumb).to_have_count(1)
    page.wait_for_function(
        "() => { const i = document.querySelector('#pg-attach-list img.pg-thumb');"
        " return i && i.complete && i.naturalWidth === 64 && i.naturalHeight === 48; }"
    )
    b = thumb.bounding_box()
    assert 0 < b["width"] <= 96 and 0 < b["height"] <= 64  # scaled to a thumbnail, not the picture's size
    sync_api.expect(pending).to_contain_text("64×48 · sent as data URL")  # the line is still there beside it

    wav = tmp_path / "tone.wav"
    wav.write_bytes(audio_bytes("wav", tone(1.0)))
    page.set_input_files("#pg-attach-audio input[type=file]", str(wav))
    player = pending.locator("audio[controls]")
    sync_api.expect(player).to_have_count(1)
    page.wait_for_function("() => Math.abs(document.querySelector('#pg-attach-list audio').duration - 1) < 0.05")

    clip = _h264(tmp_path / "clip.mp4")
    page.set_input_files("#pg-attach-video input[type=file]", str(clip))
    video = pending.locator("video.pg-thumb")
    sync_api.expect(video).to_have_count(1)
    page.wait_for_function(
        "() => { const v = document.querySelector('#pg-attach-list video');"
        " return v.readyState >= 1 && v.videoWidth === 64; }"
    )
    assert pending.locator("li").count() == 3 and thumb.count() == 1  # one line each, the image's kept
    shot(page, "layout-6-attachment-previews")
    page.close()


# The input's placeholder, typed into the box for the measure (no event: nothing reacts), and how it fits.
PLACEHOLDER_FIT_JS = """() => { const t = document.querySelector('#pg-input textarea');
  const r = {white: getComputedStyle(t, '::placeholder').whiteSpace, text: t.placeholder};
  t.value = t.placeholder;
  Object.assign(r, {sw: t.scrollWidth, cw: t.clientWidth, sh: t.scrollHeight, ch: t.clientHeight});
  t.value = ''; return r; }"""


@pytest.mark.parametrize("locale", ["en-US", "zh-CN"])
def test_on_a_phone_the_side_tabs_are_in_a_drawer_under_a_header_that_stays(
    browser: Any, live: Any, locale: str
) -> None:
    """Issue 30, item 9: the placeholder was cut off at the phone's edge; the ten side tabs, once wrapped under the
    chat, are in a drawer the header's button opens and closes; the header stays on screen, nothing runs off the
    right edge."""
    page = open_page(browser, live.url, 390, 844, locale=locale)
    fit = page.evaluate(PLACEHOLDER_FIT_JS)
    assert fit["text"] and fit["white"] != "nowrap", fit
    assert fit["sw"] <= fit["cw"] and fit["sh"] <= fit["ch"] + 1, fit  # the whole hint shows, on two lines at most
    button, tabs = page.locator("button#pg-drawer"), page.locator("#pg-side [role=tab]")
    sync_api.expect(button).to_be_visible()
    sync_api.expect(tabs.first).to_be_hidden()  # closed: no tab on the page until the button opens the drawer
    b = box(page, "button#pg-drawer")
    assert b["top"] >= 0 and b["right"] <= 390 and b["bottom"] <= box(page, ".row:has(> #pg-send)")["top"], b
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    shot(page, f"layout-7-phone-drawer-closed-{locale}", full_page=False)

    button.click()
    sync_api.expect(tabs).to_have_count(10)  # every tab in the drawer's tab row ...
    sync_api.expect(page.locator("#pg-side .overflow-menu > button")).to_be_hidden()  # ... none behind a menu
    side, header = box(page, "#pg-side"), box(page, ".pg-header")
    assert side["left"] >= 0 and side["right"] <= 390 and side["top"] >= header["bottom"] - 1, (side, header)
    for i in range(10):
        t = tabs.nth(i).bounding_box()
        assert t and t["width"] > 20 and t["x"] >= side["left"] and t["x"] + t["width"] <= 390, (i, t)
        assert t["y"] >= side["top"] and t["y"] + t["height"] <= 844, (i, t)
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    sync_api.expect(button).to_be_visible()  # the header, its button among it, above the drawer
    shot(page, f"layout-8-phone-drawer-open-{locale}", full_page=False)
    tabs.last.click()  # the last tab, straight from the row
    sync_api.expect(tabs.last).to_have_attribute("aria-selected", "true")

    button.click()  # closes it again: the chat is in reach
    sync_api.expect(tabs.first).to_be_hidden()
    page.click("#pg-input textarea")
    # The header stays at the screen's top when the page scrolls (the chat's buttons are below the fold).
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    page.wait_for_function("() => window.scrollY > 100")
    header = box(page, ".pg-header")
    assert header["top"] >= 0 and header["bottom"] <= 80, header
    sync_api.expect(button).to_be_visible()
    button.click()
    sync_api.expect(tabs.first).to_be_visible()
    assert box(page, "#pg-side")["top"] >= box(page, ".pg-header")["bottom"] - 1  # under the header, scrolled too
    page.keyboard.press("Escape")
    sync_api.expect(tabs.first).to_be_hidden()
    page.context.close()
