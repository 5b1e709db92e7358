"""Issue 31, items 5, 12 and 16: the page's Backend tab makes this server call another one.

5. A blocking `httpx.get` (300 s) in the default executor: a few clicks towards a server that never answers
   stalled every API request. Remote calls are async with short limits, on no thread the engine needs.
12. A remote server's model id went into the page's header as HTML. It is text.
16. The allow-list let `%2e%2e` and `..%2f` paths through, and an allowed base URL made the server call
    `/tokenize` and `/server/steps` outside that base.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
import uuid
from typing import Any

import httpx

from tests.conftest import MODEL, extra_server
from tests.security.fake_remote import fake_openai, tarpit
from tests.security.gradio_raw import config, defaults, find, join

REMOTE = "Remote (OpenAI-compatible URL)"


def output(done: dict[str, Any]) -> list[Any]:
    assert done.get("msg") == "process_completed", done
    return list((done.get("output") or {}).get("data") or [])


def use_backend(http: httpx.Client, cfg: dict[str, Any], url: str, session: str, timeout: float = 120) -> list[Any]:
    """The Backend tab's button (`/backend`) under `session`: (the header's HTML, the status note)."""
    backend = find(cfg, lambda d: d.get("api_name") == "backend", "/backend")
    return output(join(http, backend, [REMOTE, url, "", "", None], session, timeout=timeout))


# ---- 12: a remote model id is text ------------------------------------------------------------------------------


def test_a_remote_model_id_is_text_in_the_header_and_the_note(live: Any) -> None:
    with fake_openai() as (remote, _), live.client() as http:
        header, note = use_backend(http, config(http), remote + "/v1", uuid.uuid4().hex)
    assert "<img" not in header and "&lt;img src=x onerror=" in header, header
    assert "backend: remote" in header
    assert "<img" not in note and "onerror" in note  # the note names it too, as text


# ---- 5: a server that never answers holds only its own click -----------------------------------------------------


def test_clicks_towards_a_tarpit_leave_the_api_answering(live: Any) -> None:
    clicks = min(16, min(32, (os.cpu_count() or 1) + 4) + 2)  # more than the default executor's threads
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0}
    # the tarpit is left first (its connections reset), so an old server's blocked clicks end with the test
    with live.client() as http, concurrent.futures.ThreadPoolExecutor(clicks) as pool, tarpit() as pit:
        cfg = config(http)
        started = time.monotonic()
        waits = [pool.submit(use_backend, live.client(), cfg, pit + "/v1", uuid.uuid4().hex) for _ in range(clicks)]
        time.sleep(1.5)  # every click is now waiting on the tarpit
        assert not any(w.done() for w in waits)
        t0 = time.monotonic()
        r = http.post("/v1/chat/completions", json=body, timeout=30)
        api_s = time.monotonic() - t0
        assert r.status_code == 200 and api_s < 10, f"the API took {api_s:.1f} s while the clicks waited"
        notes = [w.result(timeout=60)[1] for w in waits]
        clicks_s = time.monotonic() - started
    assert all("Not connected" in n for n in notes), notes
    assert clicks_s < 30, f"the clicks took {clicks_s:.0f} s to give up"


# ---- 16: the allow-list holds, and so does the base --------------------------------------------------------------


def test_encoded_dot_segments_do_not_leave_the_allowed_base(settings: Any, service: Any) -> None:
    with (
        fake_openai("remote-model") as (remote, seen),
        extra_server(settings, service, remote_backend_urls=[remote + "/v1"]) as http,
    ):
        cfg = config(http)
        for path in ("/v1/%2e%2e/admin", "/v1/..%2fadmin", "/v1/%2E%2E%2Fadmin", "/v1/.%2e/admin"):
            _, note = use_backend(http, cfg, remote + path, uuid.uuid4().hex)
            assert "Not connected" in note and "remote-backend-urls" in note, (path, note)
    assert seen == [], f"the server called {seen}"


def test_an_allowed_base_is_the_only_place_the_server_calls(settings: Any, service: Any) -> None:
    with (
        fake_openai("remote-model") as (remote, seen),
        extra_server(settings, service, remote_backend_urls=[remote + "/v1"]) as http,
    ):
        cfg = config(http)
        session = uuid.uuid4().hex
        header, _ = use_backend(http, cfg, remote + "/v1", session)
        assert "remote-model" in header
        # the Server tab's view (/reset_prefix_cache answers with it) and the context meter (POST /tokenize)
        reset = find(cfg, lambda d: d.get("api_name") == "reset_prefix_cache", "/reset_prefix_cache")
        output(join(http, reset, ["", None], session))
        ids = {c["id"] for c in cfg["components"] if (c.get("props") or {}).get("elem_id") == "pg-context"}
        meter = find(cfg, lambda d: set(d["outputs"]) == ids and len(d["inputs"]) > 3, "the context meter")
        data = defaults(cfg, meter)
        data[0] = "How many tokens is this?"
        output(join(http, meter, data, session))
    assert seen and all(p.startswith("/v1/") for p in seen), f"the server called {seen} outside /v1"
