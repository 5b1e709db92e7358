"""The scheduler x-ray in a real browser (issue 19, point 6): the X-ray tab lists a reply's engine steps, with the
request that streamed beside it as a peer, its co-batched counts equal to the reply's batch sizes, and keeps them
across a reload; the Server tab draws the engine's recent steps as a strip; a remote backend's reply says the
X-ray is not available from it, while the strip reads the remote's own /server/steps (another instance of this
app).

Screenshots (prefix "xray-"): xray-1 a reply's steps shared with a streaming peer, xray-2 the same after a reload,
xray-3 the Server tab's strip, xray-4 a remote reply's X-ray note with the remote's strip, xray-5 the tab in
Chinese.
"""

from __future__ import annotations

import re
import time
from typing import Any

from tests.browser_helpers import FINISHED_JS, NEEDS_CHROMIUM, open_page, open_tab, precise, send, shot, stat, sync_api
from tests.ops_helpers import LongStream, wait_for

pytestmark = NEEDS_CHROMIUM
expect = sync_api.expect

XRAY = "#pg-xray [data-xray='steps']"
ROWS_JS = """() => [...document.querySelectorAll('#pg-xray tbody tr')].map(tr => ({step: +tr.dataset.step,
  rows: +tr.dataset.rows, peers: +tr.dataset.peers}))"""


def finished(page: Any) -> None:
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    time.sleep(1)  # the browser's copy is saved by a chained event after the reply


def timeline_batches(page: Any) -> dict[int, int]:
    """Token number -> batch size, as the Stats tab's timeline (the reply's engine batch sizes) titles its dots."""
    titles = page.evaluate(
        "() => [...document.querySelectorAll('#pg-timeline svg circle title')].map(t => t.textContent)"
    )
    found = (re.match(r"token (\d+): .*, batch (\d+)", t) for t in titles)
    return {int(m[1]): int(m[2]) for m in found if m}


def test_the_x_ray_lists_a_replys_steps_with_its_peer_and_a_reload_keeps_them(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    precise(page, 12)
    time.sleep(0.5)
    peer = LongStream(live.url, max_tokens=300).start()  # a request streaming beside the page's reply
    try:
        peer.first.wait(60)
        send(page, "Name three colours.")
        finished(page)
    finally:
        peer.close()
    tokens = int(stat(page, "completion tokens"))
    max_batch = int(stat(page, "batch size (max)"))
    batches = timeline_batches(page)
    assert len(batches) >= tokens - 1, batches
    open_tab(page, "X-ray")
    view = page.locator(XRAY)
    expect(view).to_have_count(1)
    rows = page.evaluate(ROWS_JS)
    assert len(rows) == tokens == int(view.get_attribute("data-steps")) == 12
    assert max(r["rows"] for r in rows) == max_batch >= 2  # the peer shared the steps
    assert all(r["peers"] >= 1 for r in rows[1:])  # every decode step ran beside the streaming peer
    assert int(view.get_attribute("data-shared")) >= tokens - 1
    own = view.get_attribute("data-own")
    ids = page.locator("#pg-xray .pg-xray-id").all_inner_texts()
    assert ids and own and own not in ids and all(i.startswith("r") for i in ids)  # peers by short id, never itself
    expect(page.locator("#pg-xray .pg-xray-summary")).to_contain_text("of the memory-bandwidth limit")
    assert all(rows[i - 1]["rows"] == b for i, b in batches.items())  # the co-batched counts are the batch sizes
    shot(page, "xray-1-steps-shared-with-a-peer")

    page.reload()
    page.wait_for_selector("#pg-input textarea")
    expect(page.locator("#pg-chat")).to_contain_text("Name three colours.")
    open_tab(page, "X-ray")
    expect(page.locator(XRAY)).to_have_count(1)
    assert page.evaluate(ROWS_JS) == rows  # the same steps, rows and peers as when the reply was new
    assert page.locator("#pg-xray .pg-xray-id").all_inner_texts() == ids
    shot(page, "xray-2-after-reload")

    open_tab(page, "Server")  # the same records server-wide: the strip of the last 30 s
    strip = page.locator("#pg-server .pg-steps")
    expect(strip).to_have_count(1, timeout=30_000)
    page.wait_for_function("() => +document.querySelector('#pg-server .pg-steps')?.dataset.steps > 0")
    assert int(strip.get_attribute("data-max-rows")) >= 2
    assert page.locator("#pg-server svg.pg-strip rect.pg-strip-rows").count() > 0
    expect(page.locator("#pg-server .pg-steps-summary")).to_contain_text("of the limit")
    shot(page, "xray-3-server-strip")
    page.close()


def test_a_remote_reply_has_no_x_ray_and_the_strip_comes_from_the_remotes_own_route(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)  # this page's remote backend is this same server's API, over HTTP
    open_tab(page, "Backend")
    page.locator("#pg-backend label", has_text="Remote").click()
    page.fill("#pg-backend-url textarea", live.url + "/v1")
    page.click("#pg-backend-go")
    expect(page.locator(".pg-header")).to_contain_text(f"backend: remote {live.url}")
    precise(page, 6)
    time.sleep(0.5)
    send(page, "Name a colour.")
    finished(page)
    open_tab(page, "X-ray")
    expect(page.locator("#pg-xray [data-xray='remote']")).to_contain_text("Not available from this backend")
    open_tab(page, "Server")
    expect(page.locator("#pg-server [data-srv='remote']")).to_have_count(1)
    title = page.locator("#pg-server .pg-steps-title")
    expect(title).to_contain_text(f"Engine steps of {live.url}", timeout=30_000)
    wait_for(lambda: int(page.locator("#pg-server .pg-steps").get_attribute("data-steps") or 0) > 0, 30, "steps")
    shot(page, "xray-4-remote")
    page.close()


def test_the_tab_speaks_chinese(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url, locale="zh-CN")
    page.get_by_role("tab", name="调度透视").click()
    expect(page.locator("#pg-xray [data-xray='none']")).to_contain_text("发送一条消息")
    shot(page, "xray-5-chinese")
    page.context.close()
