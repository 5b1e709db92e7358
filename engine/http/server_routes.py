"""The server's live state (issue 19): `GET /server/state` (KV pages, prefix cache, running and queued requests),
`GET /server/steps` (the scheduler x-ray: the engine's last steps) and `POST /reset_prefix_cache`, as vLLM's.

The state is the engine's cheap snapshot (Engine.snapshot, the same numbers /metrics exports) plus the admission's
in-flight count; it is guarded as /metrics is (`--api-keys`, and `--admin-keys` too; closed to everyone else once
any credential is set). The reset
is an administrator's: with no credentials configured at all it is open, like every route; once any are, it takes
`Authorization: Bearer <admin key>` (`--admin-keys`): no or an unknown key is a 401, a valid key that is not an
admin key a 403, and with no admin key configured nobody may reset. The engine thread empties the cache between
two steps, never during one.

`GET /server/steps?seconds=N` lists the engine's step records (engine/core/step_log.py) of the last N seconds
(default 10; no further back than the ring holds), oldest first, each with its rows, decode rows, prompt tokens
and chunks beside them, the short anonymous ids of the requests in it (never a request id), preemptions, prefix
reuse, and its time against its floor; `?since=STEP` instead gives the records after that step number. It is
guarded as /server/state. With the step log off (`--step-log 0`) it says so (`enabled: false`, no records).
`POST /server/models/{id}/load` and `/unload` (several models: `--models-dir`, a repeated `--model`;
engine/serving/model_pool.py) are administrators' as the reset is: the load answers at once and the model's
/v1/models card follows it. None of these routes is in the OpenAPI document (the operational routes, /metrics and /health, are not
either)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request

from engine.config import Settings
from engine.http.auth import any_credentials, api_bearer, check_bearer, matches
from engine.protocol.errors import ForbiddenError, NotFoundError, RequestValidationError
from engine.serving.model_pool import ModelPool
from engine.serving.policy import RequestPolicy

RESET_TIMEOUT_S = 60  # the engine thread resets between two steps: one step, at most, to wait for
STEPS_SECONDS = 10.0  # /server/steps' default window


def check_admin(headers: Mapping[str, str], settings: Settings, action: str = "Resetting the prefix cache") -> None:
    """Whether this request may do an administrator's `action` (see the module's docstring); raises AuthError
    (401) or ForbiddenError (403)."""
    if not settings.admin_keys and not any_credentials(settings):
        return
    keys = [*settings.api_keys, *settings.admin_keys]
    if not keys:
        raise ForbiddenError(f"{action} needs an admin key, and this server has none (--admin-keys).")
    token = check_bearer(headers, keys)
    if not matches(token or "", settings.admin_keys):
        raise ForbiddenError(f"{action} needs an admin key (--admin-keys).")


def server_state(policy: RequestPolicy) -> dict[str, Any]:
    """The engine's snapshot and the admission's counts (the service must be loaded: policy.service() raises)."""
    state = policy.service().engine.snapshot()
    state["requests"] |= {"in_flight": policy.admission.in_flight}
    return {"model_loaded": True, **state, "draining": policy.admission.draining}


def _number(raw: str | None, name: str, default: float | None) -> float | None:
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise RequestValidationError(f"`{name}` must be a number >= 0, got {raw[:32]!r}.")
    return value


def server_steps(policy: RequestPolicy, seconds: float = STEPS_SECONDS, since: int | None = None) -> dict[str, Any]:
    """The engine's step records of the last `seconds` (or after step `since`), as /server/steps answers: the one
    reader of the step log for the API, the page's Server tab and the notebooks."""
    engine = policy.service().engine
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


def install(app: FastAPI, settings: Settings, policy: RequestPolicy) -> None:
    """The routes on the API's app; the reset is for administrators when credentials are set."""

    @app.get("/server/state", include_in_schema=False)
    async def state(request: Request) -> dict[str, Any]:
        api_bearer(request.headers, settings, admin_too=True)
        return server_state(policy)

    @app.get("/server/steps", include_in_schema=False)
    async def steps(request: Request) -> dict[str, Any]:
        api_bearer(request.headers, settings, admin_too=True)
        q = request.query_params
        seconds = _number(q.get("seconds"), "seconds", STEPS_SECONDS)
        since = _number(q.get("since"), "since", None)
        return server_steps(policy, seconds or 0.0, int(since) if since is not None else None)

    def pool() -> ModelPool:
        if policy.models is None:
            raise NotFoundError("This server serves one model (no --models-dir or repeated --model).")
        return policy.models

    @app.post("/server/models/{model_id}/load", include_in_schema=False)
    async def load_model(model_id: str, request: Request) -> dict[str, Any]:
        """Start loading a model (unloading others that would not fit beside it) and make it the current one;
        answers at once with its status; GET /v1/models/{id} follows the progress."""
        check_admin(request.headers, settings, "Loading a model")
        models = pool()
        models.load(model_id, make_current=True)
        return {"id": model_id, **models.entry(model_id)}

    @app.post("/server/models/{model_id}/unload", include_in_schema=False)
    async def unload_model(model_id: str, request: Request) -> dict[str, Any]:
        check_admin(request.headers, settings, "Unloading a model")
        models = pool()
        if model_id not in models.candidates:
            raise NotFoundError(f"Model not found: {model_id[:64]!r}.")
        unloaded = await asyncio.to_thread(models.unload, model_id)
        return {"id": model_id, "unloaded": unloaded, **models.entry(model_id)}

    @app.post("/reset_prefix_cache", include_in_schema=False)
    async def reset_prefix_cache(request: Request) -> dict[str, Any]:
        check_admin(request.headers, settings)
        engine = policy.service().engine
        dropped = await asyncio.wait_for(asyncio.wrap_future(engine.reset_prefix_cache()), RESET_TIMEOUT_S)
        return {"reset": engine.prefix_cache is not None, "blocks_dropped": dropped}
