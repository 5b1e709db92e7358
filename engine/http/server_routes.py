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
either).

The actions and their admin check are engine/serving/operations.py's, shared with the page's Server tab; here each
route reads its caller's credential off the request."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request

from engine.config import HttpSettings
from engine.http.auth import api_bearer, check_bearer
from engine.protocol.errors import RequestValidationError
from engine.serving.operations import STEPS_SECONDS, ServerOperations
from engine.serving.policy import RequestPolicy
from engine.serving.rights import admin_needed


def admin_credential(headers: Mapping[str, str], settings: HttpSettings) -> str | None:
    """The Bearer credential an administrator's route was called with, checked against every key the server
    takes (AuthError, 401, for a missing or unknown one); None where no key is asked for. Whether it is an admin
    key is the action's own check (engine/serving/operations.py)."""
    keys = [*settings.api_keys, *settings.admin_keys]
    if not keys or not admin_needed(settings):
        return None
    return check_bearer(headers, keys)


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


def install(app: FastAPI, settings: HttpSettings, policy: RequestPolicy) -> None:
    """The routes on the API's app; the reset, load and unload are for administrators when credentials are set."""
    ops = ServerOperations(policy)

    @app.get("/server/state", include_in_schema=False)
    async def state(request: Request) -> dict[str, Any]:
        api_bearer(request.headers, settings, admin_too=True)
        return ops.state()

    @app.get("/server/steps", include_in_schema=False)
    async def steps(request: Request) -> dict[str, Any]:
        api_bearer(request.headers, settings, admin_too=True)
        q = request.query_params
        seconds = _number(q.get("seconds"), "seconds", STEPS_SECONDS)
        since = _number(q.get("since"), "since", None)
        return ops.steps(seconds or 0.0, int(since) if since is not None else None)

    @app.post("/server/models/{model_id}/load", include_in_schema=False)
    async def load_model(model_id: str, request: Request) -> dict[str, Any]:
        """Start loading a model and make it the current one; answers at once with its status."""
        return ops.load_model(model_id, admin_credential(request.headers, settings))

    @app.post("/server/models/{model_id}/unload", include_in_schema=False)
    async def unload_model(model_id: str, request: Request) -> dict[str, Any]:
        return await ops.unload_model(model_id, admin_credential(request.headers, settings))

    @app.post("/reset_prefix_cache", include_in_schema=False)
    async def reset_prefix_cache(request: Request) -> dict[str, Any]:
        return await ops.reset_prefix_cache(admin_credential(request.headers, settings))
