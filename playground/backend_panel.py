"""The Backend tab: per browser session, answer with the embedded engine (default) or a remote OpenAI-compatible
server (MindIE, vLLM, vLLM-Ascend, this app elsewhere) by URL, API key and model name. The choice is a ChatBackend
(playground/backend.py) in the session's state; the page drives either the same way."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr
import httpx

from engine.protocol.errors import ApiError
from playground.backend import ChatBackend, connect
from playground.chat import ChatHandlers
from playground.session import Session

EMBEDDED, REMOTE = "Embedded", "Remote (OpenAI-compatible URL)"
HELP = ("A remote server (MindIE, vLLM, vLLM-Ascend, or this app on another machine) answers through the same "
        "request and the same rendering. Its stream carries no engine timeline, and batch sizes and queue waits "
        "only when it sends MindIE's perf stats: the statistics say what it did not send instead of guessing.")  # fmt: skip


def refusal(url: str, settings: Any) -> str | None:
    """Why this server's page may not connect to `url`, or None. The Backend tab makes the server itself open the
    connection, so a page reachable from outside would otherwise let anyone probe the server's own network
    (loopback, metadata, private addresses): there only the `--remote-backend-urls` bases are allowed (same
    scheme, host and port, path under theirs). A loopback bind reaches nobody but this machine's users."""
    allowed = list(getattr(settings, "remote_backend_urls", None) or [])
    if not allowed:
        if settings is not None and not settings.reachable_from_outside:
            return None
        return ("this server is reachable beyond this machine, so its page connects only to the base URLs given "
                "with --remote-backend-urls (none are)")  # fmt: skip
    try:
        target = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return "not a valid URL"
    for base in allowed:
        b = httpx.URL(base)
        same = (target.scheme, target.host, target.port) == (b.scheme, b.host, b.port)
        under = target.path.rstrip("/") + "/" if target.path else "/"
        if same and under.startswith(b.path.rstrip("/") + "/"):
            return None
    return "not one of the URLs this server's --remote-backend-urls allows"


async def chosen_backend(kind: str, url: str, api_key: str, model: str, settings: Any = None) -> ChatBackend | None:
    """The form's backend (None: the embedded engine). A remote one asks the server's /v1/models when no model is
    named, and raises RemoteError or httpx.HTTPError when it cannot be reached, ValueError when it may not be used."""
    if kind != REMOTE:
        return None
    url = (url or "").strip()
    if not url:
        raise ValueError("enter the remote server's URL, e.g. http://host:8000/v1")
    reason = refusal(url, settings)
    if reason is not None:
        raise ValueError(reason)
    return await asyncio.to_thread(connect, url, model=(model or "").strip() or None,
                                   api_key=(api_key or "").strip() or None)  # fmt: skip


def connector(h: ChatHandlers, header: Callable[[Any, str], str]) -> Callable[..., Any]:
    async def use(kind: str, url: str, api_key: str, model: str, session: Session) -> tuple[Any, str]:
        """Switch this browser session's backend; the header names the one in use."""
        try:
            service = h.get_service()
            session.backend = await chosen_backend(kind, url, api_key, model, getattr(service, "settings", None))
        except (ApiError, httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
            message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            return gr.skip(), f"⚠️ **Not connected:** {message}"
        label = h.backend(session).label()
        note = "✓ Embedded engine." if not session.remote else f"✓ Connected: {label}."
        return header(h.get_service(), label), note

    return use


@dataclass(eq=False)
class BackendForm:
    kind: gr.Radio
    url: gr.Textbox
    key: gr.Textbox
    model: gr.Textbox
    go: gr.Button
    status: gr.Markdown

    def wire(self, h: ChatHandlers, session: gr.State, header_comp: gr.HTML, header: Callable[[Any, str], str]) -> None:
        """The "Use this backend" button: the `/backend` API endpoint (kind, url, api_key, model)."""
        self.go.click(connector(h, header), [self.kind, self.url, self.key, self.model, session],
                      [header_comp, self.status], api_name="backend")  # fmt: skip


def build() -> BackendForm:
    gr.Markdown(HELP)
    return BackendForm(
        kind=gr.Radio([EMBEDDED, REMOTE], value=EMBEDDED, label="backend", elem_id="pg-backend"),
        url=gr.Textbox(label="URL", placeholder="http://host:8000/v1", elem_id="pg-backend-url"),
        key=gr.Textbox(label="API key", type="password", placeholder="(none)", elem_id="pg-backend-key"),
        model=gr.Textbox(label="model", placeholder="(the server's first model)", elem_id="pg-backend-model"),
        go=gr.Button("Use this backend", variant="primary", size="sm", elem_id="pg-backend-go"),
        status=gr.Markdown("", elem_id="pg-backend-status"),
    )
