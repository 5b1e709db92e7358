"""The page's backend selector: per browser session, the embedded engine (default) or a remote OpenAI-compatible
server (MindIE, vLLM, vLLM-Ascend, this app elsewhere) by URL, API key and model name.

Either way the page gets a running request it can iterate for `ChatCompletionChunk`s, `abort()` from Stop and
`close()`: the request policy's run, or the seam's RemoteBackend.start() (playground/remote.py, which parses the
remote SSE into the same chunks).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

from engine.protocol.request import ChatCompletionRequest
from engine.serving.policy import CallContext, RequestPolicy
from playground.backend import connect as connect_backend
from playground.remote import RemoteBackend

EMBEDDED, REMOTE = "Embedded", "Remote (OpenAI-compatible URL)"


@dataclass
class Selection:
    """One session's choice; `remote` is None for the embedded engine."""

    remote: RemoteBackend | None = None

    @property
    def kind(self) -> str:
        return "embedded" if self.remote is None else "remote"

    def model(self, service: Any) -> str:
        return self.remote.model if self.remote is not None else service.served_name

    def label(self) -> str:
        if self.remote is None:
            return "backend: embedded engine"
        return f"backend: remote {self.remote.url} · {self.remote.model}"

    async def start(self, policy: RequestPolicy, req: ChatCompletionRequest, caller: CallContext) -> Any:
        """The running request: the embedded engine's, through the deployment's request policy (the API's own
        admission, limits, timeout, moderation, metrics and access log), or the remote one, primed (the remote
        server applies its own)."""
        if self.remote is None:
            return await policy.run(req, caller)
        return await self.remote.start(req)


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


async def connect(kind: str, url: str, api_key: str, model: str, settings: Any = None) -> Selection:
    """A Selection for the form's values; a remote one asks the server's /v1/models when no model is named (and
    raises RemoteError or httpx.HTTPError when it cannot be reached, ValueError when it may not be used)."""
    if kind != REMOTE:
        return Selection()
    if not (url or "").strip():
        raise ValueError("enter the remote server's URL, e.g. http://host:8000/v1")
    reason = refusal(url.strip(), settings)
    if reason is not None:
        raise ValueError(reason)
    backend = await asyncio.to_thread(connect_backend, url.strip(), model=(model or "").strip() or None,
                                      api_key=(api_key or "").strip() or None)  # fmt: skip
    assert isinstance(backend, RemoteBackend)
    return Selection(backend)
