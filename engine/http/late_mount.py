"""Mounts that arrive after the server has started (app.py's API-first start, issue 30): the API and /health answer
from the first second while the model loads, and the page (Gradio: an import and a build of ~10 CPU seconds) is
mounted once it is built. Until then its path answers a small static page that says the server is starting and
reloads itself (503, nothing in it from the request); then the mounts take its place in one step, and the lifespans
they bring (Gradio's queue and its startup events) are entered on the running server's loop and left at its
shutdown, as they would have been had they been mounted before the start."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import HTMLResponse
from starlette.routing import Mount
from starlette.types import Receive, Scope, Send

log = logging.getLogger("playground")

RELOAD_S = 2
STARTING_PAGE = (
    "<!doctype html><html><head><meta charset='utf-8'>"
    f"<meta http-equiv='refresh' content='{RELOAD_S}'><title>LLM Playground: starting</title></head>"
    "<body style='font-family:system-ui,sans-serif;margin:3em;color:#444'>"
    "<p>The playground is starting&hellip; this page reloads itself.</p></body></html>"
)
FAILED_PAGE = (
    "<!doctype html><html><head><meta charset='utf-8'><title>LLM Playground</title></head>"
    "<body style='font-family:system-ui,sans-serif;margin:3em;color:#444'>"
    "<p>The page could not be built: the server's log says why. The API is served.</p></body></html>"
)


@contextlib.asynccontextmanager
async def _no_lifespan(app: Any) -> AsyncIterator[None]:
    yield None


class LateMounts:
    """A placeholder at `path` on `app` (a Starlette / FastAPI app not started yet) until `mount` runs."""

    def __init__(self, app: Any, path: str = "/") -> None:
        self.app = app
        self.failed = False
        self._placeholder = Mount(path, app=self._starting)
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing: asyncio.Event | None = None
        self._held: list[asyncio.Task[None]] = []  # a task per mount, holding its lifespans open
        app.router.routes.append(self._placeholder)
        own = app.router.lifespan_context

        @contextlib.asynccontextmanager
        async def lifespan(served: Any) -> AsyncIterator[Any]:
            async with own(served) as state:
                self._loop, self._closing = asyncio.get_running_loop(), asyncio.Event()
                self._started.set()
                try:
                    yield state
                finally:
                    self._closing.set()
                    # each hold logs its own lifespan's failure (_hold): here only their ends are awaited
                    await asyncio.gather(*self._held, return_exceptions=True)

        app.router.lifespan_context = lifespan

    async def _starting(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = {"Cache-Control": "no-store"}
        if self.failed:
            await HTMLResponse(FAILED_PAGE, status_code=500, headers=headers)(scope, receive, send)
            return
        headers["Retry-After"] = str(RELOAD_S)
        await HTMLResponse(STARTING_PAGE, status_code=503, headers=headers)(scope, receive, send)

    @property
    def pending(self) -> bool:
        """Whether the placeholder still answers (nothing mounted yet, or the mount failed)."""
        return self._placeholder in self.app.router.routes

    def mount(self, build: Callable[[Any], Any], timeout: float = 120.0) -> bool:
        """`build(app)` mounts on the app (Gradio's `mount_gradio_app` and the like), from any thread once the
        server has started (waited for, up to `timeout` s); the lifespans it adds are entered on the server's loop,
        then the placeholder goes. A build that raises is logged and the placeholder says so. Returns whether it
        mounted."""
        if not self._started.wait(timeout) or self._loop is None:
            log.error("the page was not mounted: the server did not start within %.0f s", timeout)
            return False
        own = self.app.router.lifespan_context
        self.app.router.lifespan_context = _no_lifespan  # what `build` adds wraps this, not the running lifespan
        try:
            build(self.app)
            added = self.app.router.lifespan_context
            asyncio.run_coroutine_threadsafe(self._enter(added(self.app)), self._loop).result()
        except Exception:  # any failure of Gradio's build: logged with its traceback, the placeholder says so (500)
            log.exception("the page could not be built")
            self.failed = True
            return False
        finally:
            self.app.router.lifespan_context = own
        self.app.router.routes.remove(self._placeholder)
        return True

    async def _enter(self, lifespan: Any) -> None:
        """Enter `lifespan` in a task of its own that leaves it at the server's shutdown: a lifespan is left in the
        task that entered it (anyio's task groups, the MCP session manager's, insist)."""
        entered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._held.append(asyncio.create_task(self._hold(lifespan, entered)))
        await entered

    async def _hold(self, lifespan: Any, entered: asyncio.Future[None]) -> None:
        assert self._closing is not None
        try:
            async with lifespan:
                entered.set_result(None)
                await self._closing.wait()
        except Exception as exc:
            if not entered.done():
                entered.set_exception(exc)
            else:
                log.exception("a late mount's lifespan failed")
