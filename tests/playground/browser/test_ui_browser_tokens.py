"""Token probabilities in a real browser: the alternatives popover on a click, a tap and the keyboard, the colour
legend, the reply as a heatmap in the chat, and n=3 candidate cards that all fit the side panel at 1440x900.

Screenshots (prefix "tok-") go to $PLAYGROUND_SHOTS (default <tmp>/playground-shots)."""

from __future__ import annotations

import math
import re
import time
from typing import Any

from tests.browser_helpers import (
    FINISHED_JS,
    NEEDS_CHROMIUM,
    check_says,
    open_page,
    open_tab,
    precise,
    send,
    set_number,
    shot,
)
from tests.conftest import chat

pytestmark = NEEDS_CHROMIUM

PROMPT = "The capital of France is"
POP = "#pg-tokpop"


def with_logprobs(page: Any, top: int = 3, max_tokens: int = 8, n: int | None = None) -> None:
    """Greedy (or n candidates at temperature 0.8), logprobs on with `top` alternatives, back on the Stats tab."""
    precise(page, max_tokens)
    open_candidates(page)
    if top:
        page.locator("#pg-logprobs input[type=checkbox]").check()
        set_number(page, "top_logprobs", top)
    if n is not None:
        set_number(page, "temperature", 0.8)
        set_number(page, "n", n)
    open_tab(page, "Stats")
    time.sleep(0.5)  # let the controls' change events land before sending


def open_candidates(page: Any) -> None:
    """The Sampling tab with its (closed by default) "Candidates and log-probabilities" group open."""
    open_tab(page, "Sampling")
    if not page.locator("#pg-logprobs").is_visible():
        page.get_by_role("button", name="Candidates and log-probabilities").click()
    page.locator("#pg-logprobs input[type=checkbox]").wait_for()


def reply(page: Any, text: str = PROMPT) -> None:
    send(page, text)
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    refused = check_says(page)  # the check line's message, if any
    assert not refused, f"the request was refused: {refused}"


def popover(page: Any) -> dict[str, Any]:
    """What the open popover shows: its text, its alternative rows (data-i, data-alt, percentage) and its box."""
    page.wait_for_selector(POP, state="visible")
    return page.evaluate(
        """(sel) => { const p = document.querySelector(sel); const r = p.getBoundingClientRect();
      return {text: p.innerText, p: p.querySelector('.pg-tokpop-p').textContent, box: [r.left, r.top, r.right, r.bottom],
              rows: [...p.querySelectorAll('.pg-alt')].map(li => ({i: li.dataset.i, alt: li.dataset.alt,
                chosen: li.classList.contains('pg-alt-chosen'), p: li.querySelector('.pg-alt-p').textContent}))}; }""",
        POP,
    )


def inside_viewport(box: list[float], page: Any) -> bool:
    v = page.viewport_size
    return box[0] >= 0 and box[1] >= 0 and box[2] <= v["width"] and box[3] <= v["height"]


def test_popover_opens_on_click_and_keyboard_with_a_legend_and_a_heatmap_in_the_chat(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    with_logprobs(page, top=3)
    reply(page)
    api = chat(
        live.client(),
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_tokens=8,
        logprobs=True,
        top_logprobs=3,
    ).json()["choices"][0]["logprobs"]["content"]
    heat = page.locator("#pg-heat .pg-heatmap .pg-tok")
    assert heat.count() == len(api)
    legend = page.locator("#pg-heat .pg-legend")
    assert legend.is_visible() and legend.locator(".pg-lg").count() == 10 and "100%" in legend.inner_text()

    # A click on the second token: its alternatives with their probabilities, the same as the API's.
    heat.nth(1).click()
    pop = popover(page)
    shot(page, "tok-1-popover-click")
    want = api[1]
    assert len(pop["rows"]) == 3 and all(r["i"] == "1" for r in pop["rows"])
    assert [r["alt"] for r in pop["rows"]] == [a["token"] for a in want["top_logprobs"]]
    assert same_p([r["p"] for r in pop["rows"]], [a["logprob"] for a in want["top_logprobs"]])
    assert "rank 1 of the top 3" in pop["text"] and pop["rows"][0]["chosen"]  # greedy: the top alternative
    assert "token 2" in pop["text"] and same_p([pop["p"]], [want["logprob"]])
    assert inside_viewport(pop["box"], page)
    assert heat.nth(1).get_attribute("title") is None, "the native tooltip would show over the popover"

    page.keyboard.press("Escape")
    page.wait_for_selector(POP, state="hidden")
    heat.nth(0).click()
    assert popover(page)["rows"][0]["i"] == "0"
    page.mouse.click(5, 5)  # outside: closes
    page.wait_for_selector(POP, state="hidden")

    # Keyboard: Tab stops on the heatmap, Enter opens its first token, the arrow keys walk on.
    page.locator("#pg-heat .pg-heatmap").focus()
    page.keyboard.press("Enter")
    assert popover(page)["rows"][0]["i"] == "0"
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.activeElement.dataset.i === '1'")
    assert popover(page)["rows"][0]["i"] == "1"
    page.keyboard.press("Escape")
    page.wait_for_selector(POP, state="hidden")

    # The chat: a collapsed "Tokens by probability" message under the reply; opened, the same popover works.
    title = page.locator("#pg-chat").get_by_text(re.compile("Tokens by probability"))
    assert title.count() == 1
    print(f"\nheatmaps in the chat's DOM while collapsed: {page.locator('#pg-chat .pg-heatmap').count()}")
    title.first.click()
    tokens = page.locator("#pg-chat .pg-heatmap .pg-tok")
    tokens.first.wait_for()
    assert tokens.count() == len(api)
    assert page.locator("#pg-chat .pg-legend .pg-lg").count() == 10
    bg = tokens.nth(1).evaluate("e => getComputedStyle(e).backgroundColor")
    assert bg not in ("rgba(0, 0, 0, 0)", "transparent"), "the sanitizer took the colour classes off"
    tokens.nth(1).scroll_into_view_if_needed()
    tokens.nth(1).click()
    pop = popover(page)
    shot(page, "tok-2-chat-heatmap-popover")
    assert same_p([r["p"] for r in pop["rows"]], [a["logprob"] for a in want["top_logprobs"]])
    assert inside_viewport(pop["box"], page)

    page.evaluate("document.body.classList.add('dark')")  # the popover follows the theme
    colours = page.locator(POP).evaluate("e => [getComputedStyle(e).backgroundColor, getComputedStyle(e).color]")
    shot(page, "tok-6-dark")
    assert colours[0] != "rgb(255, 255, 255)" and colours[0] != colours[1]
    page.close()


def test_popover_opens_on_a_tap(browser: Any, live: Any) -> None:
    context = browser.new_context(viewport={"width": 1440, "height": 900}, has_touch=True)
    try:
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(live.url + "/")
        page.wait_for_selector("#pg-input textarea")
        page.wait_for_function("() => !document.querySelector('.pg-header').innerText.includes('loading')")
        with_logprobs(page, top=2)
        reply(page)
        heat = page.locator("#pg-heat .pg-heatmap .pg-tok")
        heat.nth(2).tap()
        pop = popover(page)
        shot(page, "tok-3-popover-tap")
        assert len(pop["rows"]) == 2 and all(r["i"] == "2" for r in pop["rows"])
        assert all(re.fullmatch(r"[\d.]+%", r["p"]) for r in pop["rows"]) and "top 2" in pop["text"]
        heat.nth(2).tap()  # the same token again: closes
        page.wait_for_selector(POP, state="hidden")
        heat.nth(0).tap()
        assert popover(page)["rows"][0]["i"] == "0"
        page.locator("#pg-stats").tap()  # elsewhere: closes
        page.wait_for_selector(POP, state="hidden")
    finally:
        context.close()


CARDS_JS = """() => { const side = document.querySelector('#pg-side').getBoundingClientRect();
  const box = document.querySelector('#pg-cands .pg-cands');
  return {side: [side.left, side.right], scroll: [box.scrollWidth, box.clientWidth],
    cards: [...box.querySelectorAll('.pg-cand')].map(c => { const r = c.getBoundingClientRect();
      const hit = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
      return {box: [r.left, r.top, r.right, r.bottom], seen: c.contains(hit), text: c.innerText}; })}; }"""


def cards(page: Any) -> dict[str, Any]:
    page.locator("#pg-cands .pg-cands").scroll_into_view_if_needed()
    got = page.evaluate(CARDS_JS)
    assert len(got["cards"]) == 3
    assert got["scroll"][0] <= got["scroll"][1], "the cards overflow sideways"
    for c in got["cards"]:
        left, top, right, bottom = c["box"]
        assert got["side"][0] <= left and right <= got["side"][1], f"a card sticks out of the side panel: {c}"
        assert inside_viewport(c["box"], page) and c["seen"], f"a card is cut off: {c}"
    return got


def test_three_candidates_fit_the_side_panel_and_say_turn_on_logprobs_once(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    with_logprobs(page, top=0, n=3)
    reply(page, "Name a colour.")
    got = cards(page)
    shot(page, "tok-4-candidates-no-logprobs")
    panel = page.locator("#pg-cands").inner_text()
    assert panel.lower().count("turn on logprobs") == 1
    assert all("turn on" not in c["text"].lower() and "cumulative" not in c["text"] for c in got["cards"])

    open_candidates(page)
    page.locator("#pg-logprobs input[type=checkbox]").check()
    open_tab(page, "Stats")
    time.sleep(0.5)
    reply(page, "Name a colour.")
    page.wait_for_selector("#pg-cands .pg-cand .pg-heatmap")
    got = cards(page)
    shot(page, "tok-5-candidates-logprobs")
    assert "turn on" not in page.locator("#pg-cands").inner_text().lower()
    scores = [float(re.search(r"cumulative logprob (-?[\d.]+)", c["text"]).group(1)) for c in got["cards"]]
    assert scores == sorted(scores, reverse=True) and "★" in got["cards"][0]["text"]
    # a candidate's tokens open the popover too
    page.locator("#pg-cands .pg-cand").nth(2).locator(".pg-tok").first.click()
    assert popover(page)["rows"] == [], "top_logprobs 0: no alternative rows"
    assert "set top_logprobs" in page.locator(POP).inner_text()
    page.close()


def same_p(shown: list[str], logprobs: list[float]) -> bool:
    """The popover's percentages are the API's probabilities (to the 0.1% shown; "<0.1%" below that)."""
    if len(shown) != len(logprobs):
        return False
    for text, lp in zip(shown, logprobs):
        p = math.exp(lp) * 100
        if not (text == "<0.1%" and p < 0.1 or text.endswith("%") and abs(float(text[:-1]) - p) <= 0.051):
            return False
    return True
