"""How soon the page's Stop lands (issue 30): a long reply streams in Chromium, Stop is clicked once the reply has
painted a dozen times, and the page records every change of the chat's text.

    .venv/bin/python bench/stop_latency.py                        # an in-process server on the bundled model
    .venv/bin/python bench/stop_latency.py --url http://127.0.0.1:7860 --trials 5

Per trial: the milliseconds from the click to the chat's last change (the reply marked "stopped"), one chat growing
over the trials as a user's would (`ignore_eos` on, so every reply runs until stopped). Beside them, the engine's median decode step for one stream, measured through the
API in the same run, so "within one decode step" is a ratio, not a guess. Needs Chromium at /usr/bin/chromium.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Records each change of the chat's reply text with its time; the text ends with the reply's status line
# ("TTFT 473 ms · 4223 ms · streaming…", then "… · stopped").
WATCH_JS = """() => { window.pgPaints = [];
  const chat = document.querySelector('#pg-chat');
  const bot = () => [...chat.querySelectorAll('.message.bot, [data-testid="bot"]')].map(e => e.innerText).join('|');
  let last = bot();
  new MutationObserver(() => { const now = bot(); if (now !== last) { last = now;
    window.pgPaints.push([performance.now(), now.slice(-60)]); } })
  .observe(chat, {subtree: true, childList: true, characterData: true}); }"""


@contextlib.contextmanager
def local_server() -> Iterator[str]:
    import engine  # noqa: F401  (process settings that must precede `import torch`)
    from app import serve_in_thread, settings_from

    server = serve_in_thread(settings_from([], environ={}), None)
    try:
        yield server.url
    finally:
        server.stop()


def decode_step_ms(url: str) -> float:
    """The median gap between streamed tokens of one greedy request (no page open)."""
    import httpx

    with httpx.Client(base_url=url, timeout=120) as c:
        model = c.get("/v1/models").json()["data"][0]["id"]
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
        "max_tokens": 64,
        "ignore_eos": True,
        "stream": True,
        "temperature": 0,
    }
    stamps = []
    with httpx.Client(base_url=url, timeout=120) as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: {") and '"content":"' in line:
                stamps.append(time.perf_counter())
    return round(1000 * statistics.median(b - a for a, b in zip(stamps, stamps[1:])), 1)


def trial(page: Any) -> int:
    """One reply stopped after a dozen paints: milliseconds from the click to the chat's last change."""
    page.fill("#pg-input textarea", "Tell me a long story about a dragon.")
    page.evaluate(WATCH_JS)
    page.click("#pg-send")
    page.wait_for_function("() => window.pgPaints.length > 12", timeout=120_000)
    clicked = page.evaluate("() => performance.now()")
    page.click("#pg-stop")
    page.wait_for_function("() => /stopped/.test(window.pgPaints.at(-1)[1])", timeout=60_000)
    time.sleep(2)  # anything still arriving after the mark counts too
    return round(page.evaluate("() => window.pgPaints.at(-1)[0]") - clicked)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (default: start one in this process)")
    ap.add_argument("--trials", type=int, default=5)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from engine.core.cpu_kernels import cpu_flags

    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(local_server())
        step = decode_step_ms(url)
        p = stack.enter_context(sync_playwright())
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(url)
        page.wait_for_selector("#pg-input textarea")
        page.get_by_role("tab", name="Sampling").click()  # a reply long enough to stop, whatever the model says
        page.locator("#pg-ignore_eos input").check()
        time.sleep(1)
        runs = [trial(page) for _ in range(args.trials)]
        browser.close()
    landed = statistics.median(runs)
    print(
        json.dumps(
            {
                "cpu_flags": sorted(f for f in cpu_flags() if f.startswith(("avx", "amx"))),
                "decode_step_ms": step,
                "landed_ms": runs,
                "landed_ms_median": landed,
                "landed_in_decode_steps": round(landed / step, 1),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
