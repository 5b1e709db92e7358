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
    from app import build_service, serve_in_thread, settings_from

    settings = settings_from([], environ={})
    service = build_service(settings)
    server = serve_in_thread(settings, service)
    try:
        yield server.url
    finally:
        server.stop()
        service.engine.shutdown()


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


# The stop call's own timing in the browser (Resource Timing, the same clock as performance.now()): when it left
# and when its answer came back.
STOP_CALL_JS = """clicked => { const e = performance.getEntriesByType('resource')
  .find(e => /run\\/predict/.test(e.name) && e.startTime >= clicked); return e ? [e.startTime, e.responseEnd] : null; }"""


class ServerClock:
    """In-process only: when the server's Stop handler ran, when the engine dropped the request and when the
    reply's stream ended, each on time.perf_counter (wrapping the real methods; nothing is replaced)."""

    def __init__(self) -> None:
        from engine.core.engine import Engine
        from engine.core.scheduler import Scheduler
        from playground.page.chat import ChatHandlers
        from playground.page.session import Session

        self.marks: dict[str, float] = {}
        wrap = self._wrap
        wrap(Session, "stop", "stop_called")
        wrap(Scheduler, "abort", "engine_dropped", when=lambda out: bool(out))
        self.steps: list[float] = []  # when each engine step began
        step, steps = Engine.step, self.steps

        def counted(engine: Any) -> None:
            steps.append(time.perf_counter())
            step(engine)

        Engine.step = counted  # type: ignore[method-assign]
        original = ChatHandlers.stream
        marks = self.marks

        async def stream(*a: Any, **k: Any) -> Any:
            async for out in original(*a, **k):
                yield out
                marks["last_yield_sent"] = time.perf_counter()  # Gradio took the update (resumes after sending)

        ChatHandlers.stream = stream  # type: ignore[method-assign]

    def _wrap(self, cls: Any, name: str, mark: str, when: Any = lambda out: True) -> None:
        original, marks = getattr(cls, name), self.marks

        def wrapped(*a: Any, **k: Any) -> Any:
            out = original(*a, **k)
            if when(out):
                marks.setdefault(mark, time.perf_counter())
            return out

        setattr(cls, name, wrapped)

    def take(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.marks)
        stop, dropped = out.get("stop_called"), out.get("engine_dropped")
        if stop is not None and dropped is not None:  # engine steps begun between the Stop and the drop
            out["steps_between"] = sum(stop <= t <= dropped for t in self.steps)
            recent = [b - a for a, b in zip(self.steps, self.steps[1:]) if b <= stop][-20:]
            out["step_ms_while_streaming"] = round(1000 * statistics.median(recent), 1) if recent else None
        self.marks.clear()
        self.steps.clear()
        return out


def trial(page: Any, clock: ServerClock | None) -> dict[str, Any]:
    """One reply stopped after a dozen paints: milliseconds from the click to the chat's last change, and the
    parts of that wait measured on each side."""
    page.fill("#pg-input textarea", "Tell me a long story about a dragon.")
    page.evaluate(WATCH_JS)
    page.click("#pg-send")
    page.wait_for_function("() => window.pgPaints.length > 12", timeout=120_000)
    if clock is not None:
        clock.take()
    clicked = page.evaluate("() => performance.now()")
    page.click("#pg-stop")
    page.wait_for_function("() => /stopped/.test(window.pgPaints.at(-1)[1])", timeout=60_000)
    time.sleep(2)  # anything still arriving after the mark counts too
    out: dict[str, Any] = {"landed_ms": round(page.evaluate("() => window.pgPaints.at(-1)[0]") - clicked)}
    call = page.evaluate(STOP_CALL_JS, clicked)
    if call:
        out["stop_call_sent_ms"], out["stop_call_answered_ms"] = round(call[0] - clicked), round(call[1] - clicked)
    if clock is not None:
        m = clock.take()
        if "stop_called" in m:
            for k in ("engine_dropped", "last_yield_sent"):
                if k in m:
                    out[f"server_stop_to_{k}_ms"] = round(1000 * (m[k] - m["stop_called"]), 1)
            out["engine_steps_from_stop_to_drop"] = m.get("steps_between")
            out["engine_step_ms_while_streaming"] = m.get("step_ms_while_streaming")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="a running server (default: start one in this process)")
    ap.add_argument("--trials", type=int, default=5)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from engine.core.cpu_kernels import cpu_flags

    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(local_server())
        clock = None if args.url else ServerClock()
        step = decode_step_ms(url)
        p = stack.enter_context(sync_playwright())
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(url)
        page.wait_for_selector("#pg-input textarea")
        page.get_by_role("tab", name="Sampling").click()  # a reply long enough to stop, whatever the model says
        page.locator("#pg-ignore_eos input").check()
        time.sleep(1)
        parts = [trial(page, clock) for _ in range(args.trials)]
        browser.close()
    runs = [p["landed_ms"] for p in parts]
    landed = statistics.median(runs)
    print(
        json.dumps(
            {
                "cpu_flags": sorted(f for f in cpu_flags() if f.startswith(("avx", "amx"))),
                "decode_step_ms": step,
                "landed_ms": runs,
                "landed_ms_median": landed,
                "landed_in_decode_steps": round(landed / step, 1),
                "parts": parts,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
