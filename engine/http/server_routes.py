"""The server's live state (issue 19): `GET /server/state` (KV pages, prefix cache, running and queued requests)
and `POST /reset_prefix_cache`, as vLLM's.

The state is the engine's cheap snapshot (Engine.snapshot, the same numbers /metrics exports) plus the admission's
in-flight count; it is guarded as /metrics is (`--api-keys`, and `--admin-keys` too when those are set). The reset
is an administrator's: with no credentials configured at all it is open, like every route; once any are, it takes
`Authorization: Bearer <admin key>` (`--admin-keys`): no or an unknown key is a 401, a valid key that is not an
admin key a 403, and with no admin key configured nobody may reset. The engine thread empties the cache between
two steps, never during one. Neither route is in the OpenAPI document (the operational routes, /metrics and
/health, are not either)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request

from engine.config import Settings
from engine.http.auth import any_credentials, check_bearer, matches
from engine.protocol.errors import ApiError
from engine.serving.policy import RequestPolicy

RESET_TIMEOUT_S = 60  # the engine thread resets between two steps: one step, at most, to wait for


class ForbiddenError(ApiError):
    status = 403


def state_keys(settings: Settings) -> list[str]:
    """The keys /server/state accepts (none: open), as /metrics with the admin keys beside the API keys."""
    return [*settings.api_keys, *settings.admin_keys] if settings.api_keys else []


def check_admin(headers: Mapping[str, str], settings: Settings) -> None:
    """Whether this request may reset the prefix cache (see the module's docstring); raises AuthError (401) or
    ForbiddenError (403)."""
    if not settings.admin_keys and not any_credentials(settings):
        return
    keys = [*settings.api_keys, *settings.admin_keys]
    if not keys:
        raise ForbiddenError("Resetting the prefix cache needs an admin key, and this server has none (--admin-keys).")
    token = check_bearer(headers, keys)
    if not matches(token or "", settings.admin_keys):
        raise ForbiddenError("Resetting the prefix cache needs an admin key (--admin-keys).")


def server_state(policy: RequestPolicy) -> dict[str, Any]:
    """The engine's snapshot and the admission's counts (the service must be loaded: policy.service() raises)."""
    state = policy.service().engine.snapshot()
    state["requests"] |= {"in_flight": policy.admission.in_flight}
    return {"model_loaded": True, **state, "draining": policy.admission.draining}


def install(app: FastAPI, settings: Settings, policy: RequestPolicy) -> None:
    """The routes on the API's app; the reset is for administrators when credentials are set."""

    @app.get("/server/state", include_in_schema=False)
    async def state(request: Request) -> dict[str, Any]:
        check_bearer(request.headers, state_keys(settings))
        return server_state(policy)

    @app.post("/reset_prefix_cache", include_in_schema=False)
    async def reset_prefix_cache(request: Request) -> dict[str, Any]:
        check_admin(request.headers, settings)
        engine = policy.service().engine
        dropped = await asyncio.wait_for(asyncio.wrap_future(engine.reset_prefix_cache()), RESET_TIMEOUT_S)
        return {"reset": engine.prefix_cache is not None, "blocks_dropped": dropped}
