"""The operator's actions on a running server (issues 19, 22, 34): its live state, its recent engine steps, the
prefix cache's reset, and a model's load and unload, each with its rights check.

One implementation for every front end: the HTTP routes (`/server/*`, `/reset_prefix_cache`:
engine/http/server_routes.py), the page's Server tab (playground/server_panel.py) and a notebook call these; none
reaches into the engine behind a service (tests/test_architecture.py checks it outside engine/).

Rights: reading the state and the steps is for whoever may use the server (each front end authenticates its own
callers: the API's keys, the page's login). Resetting, loading and unloading are an administrator's: open while the
server has no credentials at all (engine/serving/rights.py); once it has any, they take an admin key
(`--admin-keys`): `NoAdminKey` (403) while the server has none, `NotAdmin` (403) for any other credential. The
engine thread empties the prefix cache between two steps, never during one."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from engine.config import Credentials
from engine.protocol.errors import ForbiddenError, NotFoundError
from engine.serving.model_pool import ModelPool
from engine.serving.policy import RequestPolicy
from engine.serving.rights import admin_needed, is_admin
from engine.serving.service import ChatService

RESET_TIMEOUT_S = 60  # the engine thread resets between two steps: one step, at most, to wait for
STEPS_SECONDS = 10.0  # the steps' default window (`GET /server/steps`)


class NoAdminKey(ForbiddenError):
    """An administrator's action on a server with credentials but no admin key: nobody may do it."""


class NotAdmin(ForbiddenError):
    """An administrator's action asked with a credential that is not an admin key."""


def check_admin(settings: Credentials, credential: str | None, action: str) -> None:
    """Whether a caller holding `credential` (checked by its front end, or typed on the page) may do `action`;
    raises NoAdminKey or NotAdmin (403) when not (see the module's docstring)."""
    if not admin_needed(settings):
        return
    if not settings.admin_keys:
        raise NoAdminKey(f"{action} needs an admin key, and this server has none (--admin-keys).")
    if not is_admin(credential, settings):
        raise NotAdmin(f"{action} needs an admin key (--admin-keys).")


class ServerOperations:
    """The actions over one server's request policy. `service`, where an action takes one, is the model to act
    on (a page session's picked model); None: the policy's current one, a 503 while it loads."""

    def __init__(self, policy: RequestPolicy) -> None:
        self.policy = policy

    def _service(self, service: ChatService | None) -> ChatService:
        return service if service is not None else self.policy.service()

    def state(self, service: ChatService | None = None) -> dict[str, Any]:
        """The engine's cheap snapshot (the numbers /metrics exports: KV pages, prefix cache, running and queued
        requests) and the admission's in-flight count, as `GET /server/state` answers."""
        state = self._service(service).engine.snapshot()
        admission = self.policy.admission
        state["requests"] |= {"in_flight": admission.in_flight}
        return {"model_loaded": True, **state, "draining": admission.draining}

    def steps(
        self, seconds: float = STEPS_SECONDS, since: int | None = None, service: ChatService | None = None
    ) -> dict[str, Any]:
        """The engine's step records (engine/core/step_log.py) of the last `seconds` (or after step `since`),
        oldest first, as `GET /server/steps` answers; `enabled: false` and no records with the step log off."""
        engine = self._service(service).engine
        log, now = engine.step_log, time.perf_counter()
        roof = engine.roofline.as_json() if engine.roofline is not None else None
        if log is None:
            return {"enabled": False, "capacity": 0, "seconds": seconds, "roofline": roof, "steps": []}
        records = log.since(since) if since is not None else log.recent(seconds, now)
        return {
            "enabled": True,
            "capacity": log.capacity,
            "held": len(log),
            "span_s": round(log.span_s(), 3),
            "seconds": seconds,
            "now": round(now, 6),
            "roofline": roof,
            "steps": [r.as_json(now) for r in records],
        }

    async def reset_prefix_cache(self, credential: str | None, service: ChatService | None = None) -> dict[str, Any]:
        """Empty the prefix cache (an administrator's): `reset` false where the engine has none."""
        check_admin(self.policy.settings, credential, "Resetting the prefix cache")
        engine = self._service(service).engine
        dropped = await asyncio.wait_for(asyncio.wrap_future(engine.reset_prefix_cache()), RESET_TIMEOUT_S)
        return {"reset": engine.prefix_cache is not None, "blocks_dropped": dropped}

    def _pool(self) -> ModelPool:
        if self.policy.models is None:
            raise NotFoundError("This server serves one model (no --models-dir or repeated --model).")
        return self.policy.models

    def load_model(self, model_id: str, credential: str | None) -> dict[str, Any]:
        """Start loading a model (unloading others that would not fit beside it) and make it the current one (an
        administrator's); answers at once with its status, which `GET /v1/models/{id}` then follows."""
        check_admin(self.policy.settings, credential, "Loading a model")
        models = self._pool()
        models.load(model_id, make_current=True)
        return {"id": model_id, **models.entry(model_id)}

    async def unload_model(self, model_id: str, credential: str | None) -> dict[str, Any]:
        """Unload a model once its running requests end (an administrator's)."""
        check_admin(self.policy.settings, credential, "Unloading a model")
        models = self._pool()
        if model_id not in models.candidates:
            raise NotFoundError(f"Model not found: {model_id[:64]!r}.")
        unloaded = await asyncio.to_thread(models.unload, model_id)
        return {"id": model_id, "unloaded": unloaded, **models.entry(model_id)}
