"""One browser session's own state, kept in a `gr.State` (so Gradio holds one per session and drops it with the
session): the backend its Backend tab chose, and its replies in progress, so Stop (another event) can abort them.
Also the request context of a page event, which the embedded backend hands to the request policy."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import gradio as gr

from engine.serving.policy import CallContext, RequestPolicy
from playground.client.backend import ChatBackend, Running


@dataclass
class Run:
    """One session's replies in progress (one, or A/B's two), so Stop can abort their requests."""

    gens: list[Running] = field(default_factory=list)
    stopped: bool = False  # by the user

    def abort(self) -> None:
        for gen in self.gens:
            gen.abort()

    def close(self) -> None:
        """Release every request of the run (the engine slot and the client's admission), finished or not."""
        for gen in self.gens:
            gen.close()

    def stop(self) -> None:
        self.stopped = True
        self.abort()


@dataclass
class Session:
    backend: ChatBackend | None = None  # chosen on the Backend tab; None: the embedded engine
    # The embedded model this session talks to, picked in the header (a model of the pool, or a LoRA adapter);
    # None: the server's current model. Each browser session has its own: a pick changes no other page.
    model: str | None = None
    run: Run | None = None
    streams: int = 0  # replies streaming into the chat (ChatHandlers.stream), until their last update went out
    lang: str = (
        "en"  # the browser's language at load (playground/page/i18n.py `lang_of`): server-rendered text follows it
    )
    grid_cancel: asyncio.Event | None = (
        None  # the Grid tab's run in progress: its Cancel (playground/page/tabs/grid_panel.py)
    )

    @property
    def remote(self) -> bool:
        return self.backend is not None and self.backend.kind != "embedded"

    @contextlib.contextmanager
    def running(self) -> Iterator[Run]:
        """This session's run, reachable from Stop while the block runs."""
        run = self.run = Run()
        try:
            yield run
        finally:
            if self.run is run:
                self.run = None

    def stop(self) -> None:
        if self.run is not None:
            self.run.stop()


def caller(request: gr.Request | None, endpoint: str, policy: RequestPolicy | None = None) -> CallContext:
    """The request context of a page event: who asks, which Gradio endpoint (the metrics' route label and the
    access line) and what they may do.

    Who: the credential the page's login proved, else the address, as the API counts a client. With credentials
    set, the server's login (engine/http/auth.py `PageLogins`) stores the credential's client key ("key:<hash>")
    as the session's user name; the name the user typed is never used. Rights: loading a model not loaded only
    where the server lets anyone (no credentials and no admin keys: `ModelPool.admin(None)`); an admin picks a
    model with the picker and its admin key."""
    user = getattr(request, "username", None) if request is not None else None
    host = getattr(getattr(request, "client", None), "host", None) if request is not None else None
    client = user if isinstance(user, str) and user.startswith("key:") else "ip:" + (host or "unknown")
    # Cached prompt prefixes are the credential's own (engine/http/auth.py `cache_scope`: its key, as the API's).
    shared = getattr(getattr(policy, "settings", None), "prefix_cache_scope", "credential") == "shared"
    scope = client if client.startswith("key:") and not shared else ""
    # A page request never loads a model: the picker loads one, once it has checked the admin key as the API would.
    return CallContext(client, f"page:/{endpoint}", "v1", "page", may_load=False, cache_scope=scope)


def base_url_of(request: gr.Request | None) -> str:
    try:
        return str(request.request.base_url) if request is not None and request.request is not None else ""
    except AttributeError:
        return ""
