"""The chat's history as a person keeps it (issue 17, points 1, 2, 5 and 8): a reload and an import keep every number
of a reply; edit and regenerate add versions ("‹ 1/2 ›") that an export keeps; the reply the side panel describes
is highlighted, and Undo / Clear never leave the panel describing a reply that is gone; Send while a reply streams
queues the message, and text typed right after Send is kept.

Screenshots (prefix "hist-"): hist-1 the numbers before a reload, hist-2 after it, hist-3 after an import, hist-4
two versions of a reply, hist-5 an edited question's versions, hist-6 the versions back from an exported file,
hist-7 the selection moved to an older reply, hist-8 after Undo, hist-9 a message queued behind a streaming reply.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.browser_helpers import (
    FINISHED_JS,
    NEEDS_CHROMIUM,
    check_says,
    import_file,
    open_page,
    open_tab,
    precise,
    send,
    set_number,
    shot,
    sync_api,
)

pytestmark = NEEDS_CHROMIUM
expect = sync_api.expect

# Every statistic of the side panel, by name, and whether the panel names a reply at all.
NUMBERS_JS = """() => Object.fromEntries([...document.querySelectorAll('#pg-stats td[data-stat]')]
  .map(td => [td.dataset.stat, td.textContent.trim()]))"""
DESCRIBED_JS = "() => document.querySelector('#pg-stats .pg-described')?.dataset.messages ?? null"
HIGHLIGHTED_JS = "() => [...document.querySelectorAll('#pg-chat .pg-described')].map(e => e.innerText.trim())"


def with_logprobs(page: Any, max_tokens: int) -> None:
    """Greedy, `max_tokens`, log-probabilities with three alternatives: every panel of a reply has something."""
    precise(page, max_tokens)
    open_tab(page, "Sampling")
    page.get_by_text("Candidates and log-probabilities").click()
    page.locator("#pg-logprobs input[type=checkbox]").check()
    set_number(page, "top_logprobs", 3)
    open_tab(page, "Stats")
    time.sleep(0.5)  # the controls' change events land before the first send


def set_seed(page: Any, seed: int) -> None:
    box = page.locator("#pg-seed textarea, #pg-seed input").first
    box.fill(str(seed))
    box.press("Enter")


def finished(page: Any) -> None:
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    time.sleep(1)  # the browser's copy is saved by a chained event after the reply


def panel(page: Any) -> dict[str, Any]:
    """What the side panel shows of the selected reply: its statistics, timeline, tokens and request."""
    open_tab(page, "Request")
    request = (
        page.locator("#pg-request .cm-content").inner_text() if page.locator("#pg-request .cm-content").count() else ""
    )
    open_tab(page, "Stats")
    return {
        "stats": page.evaluate(NUMBERS_JS),
        "timeline": page.locator("#pg-timeline svg").count(),
        "tokens": page.locator("#pg-heat .pg-tok").count(),
        "request": request,
    }


def test_a_reload_and_an_import_keep_every_number_of_a_reply(browser: Any, live: Any, tmp_path: Path) -> None:
    page = open_page(browser, live.url)
    with_logprobs(page, 8)
    send(page, "Name a colour.")
    finished(page)
    before = panel(page)
    assert before["stats"]["completion tokens"] == "8" and before["stats"]["time to first token"] != "–"
    assert before["timeline"] == 1 and before["tokens"] == 8 and '"max_tokens": 8' in before["request"]
    shot(page, "hist-1-before-reload")

    page.reload()
    page.wait_for_selector("#pg-input textarea")
    expect(page.locator("#pg-chat")).to_contain_text("Name a colour.")
    expect(page.locator("#pg-stats td[data-stat='completion tokens']")).to_have_text("8")
    assert panel(page) == before  # the same numbers, timeline, tokens and request as when it was new
    page.locator("#pg-chat [data-testid='bot']").first.click()  # clicking the reply shows it too
    time.sleep(1)
    assert panel(page) == before
    shot(page, "hist-2-after-reload")

    with page.expect_download() as download:
        page.click("#pg-export")
    saved = tmp_path / "conversation.json"
    download.value.save_as(saved)
    doc = json.loads(saved.read_text(encoding="utf-8"))
    assert doc["format"] == "llm-playground/conversation@2"
    kept = doc["turns"][1]["reply"]["choices"][0]
    assert len(kept["times_ms"]) == 8 and len(kept["token_ids"]) == 8 and len(kept["logprobs"]) == 8
    page.get_by_role("button", name="Clear").last.click()
    expect(page.locator("#pg-stats")).to_contain_text("No reply yet")
    import_file(page, saved)
    expect(page.locator("#pg-stats td[data-stat='completion tokens']")).to_have_text("8")
    assert panel(page) == before
    shot(page, "hist-3-after-import")
    page.close()


def text_of(message: Any) -> str:
    """A chat message's text without its "‹ k/n ›" mark."""
    return message.evaluate("""e => { const c = e.cloneNode(true);
      c.querySelectorAll('.pg-versions').forEach(x => x.remove()); return c.textContent.trim(); }""")


def versions_of(page: Any) -> list[str]:
    return ["".join(e.split()) for e in page.locator("#pg-chat .pg-versions").all_inner_texts()]


def test_regenerate_and_edit_keep_versions_that_an_export_keeps(browser: Any, live: Any, tmp_path: Path) -> None:
    page = open_page(browser, live.url)
    precise(page, 6)
    open_tab(page, "Sampling")
    set_number(page, "temperature", 1.5)  # so the second version differs from the first
    set_seed(page, 1)
    open_tab(page, "Stats")
    time.sleep(0.5)
    send(page, "Tell me a fact.")
    finished(page)
    bot = page.locator("#pg-chat [data-testid='bot']").first
    first = text_of(bot)
    first_stats = page.evaluate(NUMBERS_JS)
    open_tab(page, "Sampling")
    set_seed(page, 2)
    open_tab(page, "Stats")
    time.sleep(0.5)
    page.get_by_role("button", name="Regenerate").first.click()
    expect(page.locator("#pg-chat .pg-versions")).to_contain_text("2/2")
    finished(page)
    second = text_of(bot)
    shot(page, "hist-4-two-versions")
    page.locator('#pg-chat a[href="#pg-ver-1-prev"]').click()
    expect(page.locator("#pg-chat .pg-versions")).to_contain_text("1/2")
    assert text_of(bot) == first and page.evaluate(NUMBERS_JS) == first_stats  # its own stats again
    page.locator('#pg-chat a[href="#pg-ver-1-next"]').click()
    expect(page.locator("#pg-chat .pg-versions")).to_contain_text("2/2")
    assert text_of(bot) == second

    user = page.locator("#pg-chat [data-testid='user']").first  # edit the question: a version of that turn
    user.hover()
    page.locator("#pg-chat button[aria-label='Edit']").first.click()
    editor = page.locator("#pg-chat textarea").first
    editor.fill("Tell me a joke.")
    editor.press("Enter")  # saves the edit, as Enter sends a message (issue 30)
    expect(page.locator("#pg-chat")).to_contain_text("Tell me a joke.")
    finished(page)
    assert versions_of(page)[0] == "‹2/2›"  # on the question
    shot(page, "hist-5-edited-question")
    page.locator('#pg-chat a[href="#pg-ver-0-prev"]').click()  # the old question comes back with both replies
    expect(page.locator("#pg-chat")).to_contain_text("Tell me a fact.")
    expect(page.locator("#pg-chat")).not_to_contain_text("Tell me a joke.")
    assert versions_of(page) == ["‹1/2›", "‹2/2›"]
    time.sleep(1)  # the export file is written by a chained event after the switch

    with page.expect_download() as download:
        page.click("#pg-export")
    saved = tmp_path / "chat.json"
    download.value.save_as(saved)
    doc = json.loads(saved.read_text(encoding="utf-8"))
    assert doc["turns"][0]["versions"]["kinds"] == ["original", "edit"]
    assert doc["turns"][1]["versions"]["kinds"] == ["original", "regenerate"]
    page.get_by_role("button", name="Clear").last.click()
    expect(page.locator("#pg-chat")).not_to_contain_text("Tell me a fact.")
    import_file(page, saved)
    expect(page.locator("#pg-chat")).to_contain_text("Tell me a fact.")
    assert versions_of(page) == ["‹1/2›", "‹2/2›"]
    page.locator('#pg-chat a[href="#pg-ver-1-prev"]').click()
    expect(page.locator("#pg-chat .pg-versions").nth(1)).to_contain_text("1/2")
    assert text_of(bot) == first and page.evaluate(NUMBERS_JS) == first_stats
    page.locator('#pg-chat a[href="#pg-ver-0-next"]').click()
    expect(page.locator("#pg-chat")).to_contain_text("Tell me a joke.")
    shot(page, "hist-6-versions-imported")
    page.close()


def test_the_described_reply_is_highlighted_and_undo_or_clear_move_the_panel(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    precise(page, 4)
    send(page, "Say one.")
    finished(page)
    send(page, "Say two.")
    finished(page)
    bots = page.locator("#pg-chat [data-testid='bot']")
    newest = page.evaluate(HIGHLIGHTED_JS)
    assert newest and all("Say" not in h for h in newest)  # the newest reply, not a question
    described = page.evaluate(DESCRIBED_JS)  # before the click: its answer may come back at once
    bots.first.click()
    page.wait_for_function(
        "(m) => document.querySelector('#pg-stats .pg-described')?.dataset.messages !== m", arg=described
    )
    older = page.evaluate(HIGHLIGHTED_JS)
    assert older and older != newest and older[0] in bots.first.inner_text()
    shot(page, "hist-7-older-selected")

    page.locator("#pg-chat [data-testid='bot']").last.hover()
    page.locator("#pg-chat button[aria-label='Undo']").last.click()  # takes back "Say two." and its reply
    expect(page.locator("#pg-chat")).not_to_contain_text("Say two.")
    assert page.input_value("#pg-input textarea") == "Say two."
    time.sleep(1)
    assert page.evaluate(HIGHLIGHTED_JS) == older  # the panel describes a reply that is still there
    shot(page, "hist-8-after-undo")
    page.get_by_role("button", name="Clear").last.click()
    expect(page.locator("#pg-stats")).to_contain_text("No reply yet")
    assert page.evaluate(HIGHLIGHTED_JS) == [] and page.evaluate(DESCRIBED_JS) is None
    page.close()


def test_send_while_a_reply_streams_is_queued_and_text_typed_after_send_is_kept(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    # A reply that surely streams for a few seconds, on a fast CPU too: greedy counting is what n-gram drafts
    # speed up most (64 tokens took under 1.5 s on an AMD EPYC with AVX-512).
    precise(page, 384)
    open_tab(page, "Sampling")
    page.locator("#pg-ignore_eos input[type=checkbox]").check()
    open_tab(page, "Stats")
    time.sleep(0.5)
    send(page, "Count from one to fifty in words.")
    page.fill("#pg-input textarea", "And now say hi.")  # typed right after Send, while the reply streams
    time.sleep(1.5)
    assert page.input_value("#pg-input textarea") == "And now say hi."  # not erased by the reply
    page.press("#pg-input textarea", "Enter")
    expect(page.locator("#pg-check")).to_contain_text("Queued")
    assert page.input_value("#pg-input textarea") == ""
    shot(page, "hist-9-queued")
    expect(page.locator("#pg-chat [data-testid='user']")).to_have_count(2, timeout=180_000)
    page.wait_for_function(FINISHED_JS, timeout=180_000)
    expect(page.locator("#pg-chat [data-testid='bot']")).not_to_have_count(0)
    # the chat as it settles: the stats can show the reply finished an update before the chat's last one lands
    expect(page.locator("#pg-chat [data-testid='user']").last).to_have_text("And now say hi.", timeout=30_000)
    expect(page.locator("#pg-chat [data-testid='user']").first).to_have_text("Count from one to fifty in words.")
    assert "Queued" not in check_says(page)
    page.close()
