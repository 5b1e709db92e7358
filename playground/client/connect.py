"""A backend from what a notebook, a test or bench/ has at hand: a URL, the server's RequestPolicy or a ChatService."""

from __future__ import annotations

from typing import Any

from engine.serving.policy import RequestPolicy
from playground.client.backend import ChatBackend, LocalBackend
from playground.client.remote import RemoteBackend


def connect(target: Any, **kw: Any) -> ChatBackend:
    """A URL string -> RemoteBackend(url, **kw) (model=, api_key=, timeout=); a RequestPolicy -> the embedded engine
    through it; a ChatService -> LocalBackend(service, **kw)."""
    if isinstance(target, str):
        return RemoteBackend(target, **kw)
    if isinstance(target, RequestPolicy):
        return LocalBackend(policy=target)
    return LocalBackend(target, **kw)
