"""Issue 31, item 3: a chat template cannot hold the server's CPU or memory beyond its budget (spec §2.7), and
`/tokenize` (which renders templates too) is admitted like chat.

On ad58bb7 the 5 s budget was checked only inside `range()` and per output chunk: a loop over a string with no
output ran on (here ~35 s of CPU), `'x'.ljust(...)` allocated whatever it was asked inside the server, renders
held the event loop's default executor so a plain chat waited behind them, and /tokenize had no per-client limit.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from tests.api_helpers import assert_422
from tests.conftest import MODEL, extra_server

BUDGET_S = 5.0
# ~25,000² empty loop iterations over a string: no range(), no output, so no cooperative check ever runs. Tens of
# seconds of CPU in Jinja (about 35 s on the 2-core CI machine), far past the budget.
STRING_LOOP = (
    "{% set s = 'x' * 25000 %}{% for c in s %}{% for d in s %}{% endfor %}{% endfor %}{{ messages[0].content }}"
)
# A single string operation that asks for 600 MB: no loop at all.
BIG_STRING = "{{ 'x'.ljust(600000000) | length }}{{ messages[0].content }}"


def _chat(client: httpx.Client, template: str | None = None, **body: Any) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **body}
    if template is not None:
        body["chat_template"] = template
    return client.post("/v1/chat/completions", json=body)


def _tokenize(client: httpx.Client, template: str) -> httpx.Response:
    return client.post(
        "/tokenize", json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "chat_template": template}
    )


def test_a_loop_over_a_string_is_stopped_within_its_budget(live: Any) -> None:
    with httpx.Client(base_url=live.url, timeout=3 * BUDGET_S) as client:
        began = time.monotonic()
        r = _chat(client, STRING_LOOP)  # ad58bb7: no answer for ~35 s (httpx.ReadTimeout here)
        took = time.monotonic() - began
    assert_422(r, "chat_template error", "time budget")
    assert took < 3 * BUDGET_S, took


def test_a_huge_string_is_refused_not_allocated(live: Any) -> None:
    with live.client() as client:
        r = _chat(client, BIG_STRING)  # ad58bb7: 200, the server having allocated 600 MB for one string
        assert_422(r, "chat_template error", "memory")
        assert _chat(client).status_code == 200  # and the next request is served as ever


def test_tokenize_is_admitted_like_chat(settings: Any, service: Any) -> None:
    """One client's in-flight chat counts against its limit on /tokenize too (ad58bb7: /tokenize had none)."""
    with extra_server(settings, service, max_concurrent_per_client=1) as client:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Tell me a long story."}],
            "max_tokens": 400,
            "ignore_eos": True,
            "stream": True,
        }
        with client.stream("POST", "/v1/chat/completions", json=body) as held:
            assert held.status_code == 200
            lines = held.iter_lines()
            next(lines)  # the chat is in flight (kept: a dropped line iterator would close the stream)
            r = _tokenize(client, "{{ messages[0].content }}")
            assert r.status_code == 429, r.text
        # Its flight closes once the server has seen the client leave and aborted the stream: admitted again.
        deadline = time.monotonic() + 15
        r = _tokenize(client, "{{ messages[0].content }}")
        while r.status_code == 429 and time.monotonic() < deadline:
            time.sleep(0.2)
            r = _tokenize(client, "{{ messages[0].content }}")
        assert r.status_code == 200, r.text


def test_hostile_tokenize_calls_do_not_hold_a_plain_chat(live: Any) -> None:
    """Eight clients render budget-eating templates through /tokenize; a plain chat (the model's own template)
    meanwhile is answered in seconds (ad58bb7: it waited until the renders that held every default-executor
    thread ended, 30 s and more)."""
    results: list[int] = []

    def hostile() -> None:
        with live.client() as client:
            results.append(_tokenize(client, STRING_LOOP).status_code)

    threads = [threading.Thread(target=hostile) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # the renders are running (or queued for a sandbox worker)
    try:
        with live.client() as client:
            began = time.monotonic()
            r = _chat(client)
            took = time.monotonic() - began
        assert r.status_code == 200, r.text
        assert took < 2 * BUDGET_S, took
    finally:
        for t in threads:
            t.join(timeout=120)
    assert results == [422] * 8, results
