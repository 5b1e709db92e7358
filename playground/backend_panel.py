"""The Backend tab: answer with the embedded engine (default) or a remote OpenAI-compatible server by URL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gradio as gr
import httpx

from engine.protocol.errors import ApiError
from playground import backend_select
from playground.backend_select import EMBEDDED, REMOTE
from playground.chat import ChatHandlers

HELP = ("A remote server (MindIE, vLLM, vLLM-Ascend, or this app on another machine) answers through the same "
        "request and the same rendering. Its stream carries no engine timeline, and batch sizes and queue waits "
        "only when it sends MindIE's perf stats: the statistics say what it did not send instead of guessing.")  # fmt: skip


def connector(h: ChatHandlers, header: Callable[[Any, str], str]) -> Callable[..., Any]:
    async def connect(kind: str, url: str, api_key: str, model: str, request: gr.Request) -> tuple[str, str]:
        """Switch this browser session's backend; the header names the one in use."""
        try:
            service = h.get_service()
            chosen = await backend_select.connect(kind, url, api_key, model, getattr(service, "settings", None))
        except (ApiError, httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
            message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            return gr.skip(), f"⚠️ **Not connected:** {message}"
        h.selections[request.session_hash or ""] = chosen
        note = "✓ Embedded engine." if chosen.remote is None else f"✓ Connected: {chosen.label()}."
        return header(h.get_service(), chosen.label()), note

    return connect


def build(h: ChatHandlers, header_comp: gr.HTML, header: Callable[[Any, str], str]) -> None:
    gr.Markdown(HELP)
    kind = gr.Radio([EMBEDDED, REMOTE], value=EMBEDDED, label="backend", elem_id="pg-backend")
    url = gr.Textbox(label="URL", placeholder="http://host:8000/v1", elem_id="pg-backend-url")
    key = gr.Textbox(label="API key", type="password", placeholder="(none)", elem_id="pg-backend-key")
    model = gr.Textbox(label="model", placeholder="(the server's first model)", elem_id="pg-backend-model")
    go = gr.Button("Use this backend", variant="primary", size="sm", elem_id="pg-backend-go")
    status = gr.Markdown("", elem_id="pg-backend-status")
    go.click(connector(h, header), [kind, url, key, model], [header_comp, status], api_name="backend")
