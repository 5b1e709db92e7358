"""Many chat requests at once, each folded into a ChatResult: the one runner of the notebooks' sweeps and the grid
(the page's Grid tab and the notebooks')."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from engine.protocol.errors import ApiError
from playground.client.backend import ChatBackend, Messages
from playground.client.result import ChatResult


async def arun(
    jobs: Sequence[tuple[ChatBackend, Messages, dict[str, Any]]],
    *,
    concurrency: int = 32,
    on_done: Callable[[int, int], None] | None = None,
    cancel: asyncio.Event | None = None,
    ctx: Any = None,
) -> list[ChatResult | str]:
    """The one runner of sweeps (playground/notebooks/sweeps.py) and grids (playground/client/grid.py): each (backend,
    messages, params) request folded into a ChatResult, or the server's refusal message; all in flight together so the
    engine batches them, at most `concurrency` at once. `on_done(done, total)` after each; once `cancel` is set, jobs
    not started end as "cancelled" (those running finish). `ctx`: who asks, for the embedded policy (None: a
    notebook)."""
    gate = asyncio.Semaphore(concurrency)
    done = 0

    async def one(backend: ChatBackend, messages: Messages, params: dict[str, Any]) -> ChatResult | str:
        nonlocal done
        async with gate:
            if cancel is not None and cancel.is_set():
                out: ChatResult | str = "cancelled"
            else:
                try:
                    out = await backend.achat(messages, ctx, **params)
                except ApiError as exc:
                    out = exc.message
        done += 1
        if on_done is not None:
            on_done(done, len(jobs))
        return out

    return list(await asyncio.gather(*(one(*job) for job in jobs)))
