"""engine/http/late_mount.py: the page mounted after the server started (app.py's API-first start, issue 30). Until
it is, `/` answers a static page that reloads itself; then the mounts answer, with their lifespans entered on the
running server (Gradio's queue: an event runs) and left at its shutdown."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from engine.cli import settings_from
from engine.http import server_lifecycle as life
from engine.http.late_mount import RELOAD_S, LateMounts

ROOT = Path(__file__).resolve().parents[3]


def api() -> FastAPI:
    app = FastAPI()
    app.add_api_route("/health", lambda: {"ok": True}, methods=["GET"])
    return app


def serve(app: Any) -> life.BackgroundServer:
    sock = life.bound_socket("127.0.0.1")
    return life.start_in_thread(
        app, settings_from([], environ={}).http, sock, f"http://127.0.0.1:{sock.getsockname()[1]}"
    )


def test_root_says_starting_until_the_page_is_mounted_then_the_page_answers_with_its_lifespan() -> None:
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        events.append("enter")
        yield
        events.append("exit")

    page = Starlette(routes=[Route("/", lambda request: PlainTextResponse("the page"))], lifespan=lifespan)

    def build(app: Any) -> None:  # as Gradio's mount_gradio_app does: a mount and a wrapped lifespan
        own = app.router.lifespan_context

        @contextlib.asynccontextmanager
        async def wrapped(served: Any) -> AsyncIterator[None]:
            async with own(served), page.router.lifespan_context(page):
                yield

        app.router.lifespan_context = wrapped
        app.router.routes.append(Mount("/", app=page))

    app = api()
    late = LateMounts(app)
    server = serve(app)
    try:
        assert httpx.get(server.url + "/health").status_code == 200  # the API answers meanwhile
        for path in ("/", "/config", "/gradio_api/info?q=<script>"):
            r = httpx.get(server.url + path)
            assert r.status_code == 503 and r.headers["retry-after"] == str(RELOAD_S), path
            assert r.headers["cache-control"] == "no-store"
            assert f"http-equiv='refresh' content='{RELOAD_S}'" in r.text and "starting" in r.text
            assert "script" not in r.text and "config" not in r.text  # nothing from the request in it
        assert late.pending and not events
        assert late.mount(build)
        assert not late.pending and events == ["enter"]
        r = httpx.get(server.url + "/")
        assert (r.status_code, r.text) == (200, "the page")
        assert httpx.get(server.url + "/health").status_code == 200
    finally:
        server.stop()
    assert events == ["enter", "exit"]


def test_a_page_that_fails_to_build_is_said_so_and_the_api_still_answers() -> None:
    app = api()
    late = LateMounts(app)
    server = serve(app)
    try:

        def build(_: Any) -> None:
            raise RuntimeError("no page today")

        assert not late.mount(build)
        r = httpx.get(server.url + "/")
        assert r.status_code == 500 and "could not be built" in r.text and "no page today" not in r.text
        assert httpx.get(server.url + "/health").status_code == 200
    finally:
        server.stop()


def test_a_gradio_page_mounted_late_runs_its_queued_events() -> None:
    import gradio as gr
    from gradio_client import Client

    with gr.Blocks(analytics_enabled=False) as demo:
        box = gr.Textbox()
        out = gr.Textbox()
        box.submit(lambda text: text.upper(), box, out, api_name="upper")
    app = api()
    late = LateMounts(app)
    server = serve(app)
    try:
        mounted = threading.Thread(target=lambda: late.mount(lambda a: gr.mount_gradio_app(a, demo, path="/")))
        mounted.start()  # from another thread, as app.py's loader does
        mounted.join(60)
        assert not late.pending
        assert httpx.get(server.url + "/").status_code == 200
        assert Client(server.url + "/", verbose=False).predict("hi", api_name="/upper") == "HI"
    finally:
        server.stop()


def test_app_py_mounts_the_mcp_tool_after_health_and_its_session_manager_runs(tmp_path: Path) -> None:
    """The real entry point with `--mcp --no-ui`: /health turns 200 with the API alone, then the MCP tool is mounted
    late and its lifespan (the streamable-HTTP session manager) runs: a client lists the chat tool."""
    from tests.engine.http.test_api_mcp import mcp_session
    from tests.engine.http.test_api_ops import unused_port

    port = unused_port()
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "app.py", "--port", str(port), "--mcp", "--no-ui"],
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if not k.startswith("PLAYGROUND_")},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while "page ready" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        assert httpx.get(base + "/health").status_code == 200
        names = mcp_session(base, lambda session: session.list_tools())
        assert [t.name for t in names.tools] == ["chat"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert text.index(" loaded in ") < text.index("page ready")
