"""Latency anatomy, read from the engine's own statistics: one request's per-token timeline, and how time to
first token and decode speed move as more requests share the batch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pandas as pd

from playground.client.result import ChatResult
from playground.notebooks.backend import ChatBackend, Messages, run_sync

LEVELS = (1, 2, 4, 8, 16)


def timeline_frame(result: ChatResult) -> pd.DataFrame:
    """One row per generated token: its text (with logprobs), when it was ready (ms since the request was
    accepted), the gap since the previous token, and the batch size and queue wait of the step that made it."""
    times = result.token_times_ms
    n = len(times)

    def column(values: Sequence[Any]) -> list[Any]:
        return list(values) if len(values) == n else [None] * n

    return pd.DataFrame(
        {
            "token": column(result.tokens),
            "time_ms": times,
            "gap_ms": result.first.gaps_ms,
            "batch_size": column(result.batch_sizes),
            "queue_wait_us": column(result.queue_waits_us),
        }
    )


def plot_timeline(result: ChatResult) -> Any:
    """Top: when each token was ready (the first gap is prefill). Bottom: the batch each token was decoded in."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    frame = timeline_frame(result)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 4.5), sharex=True, height_ratios=(3, 1))
    top.bar(frame.index, frame["gap_ms"], color="tab:blue", alpha=0.5, label="gap since previous token (ms)")
    top.plot(frame.index, frame["time_ms"], color="tab:red", marker=".", label="time since accepted (ms)")
    top.set_ylabel("ms")
    top.legend(fontsize="small")
    top.grid(alpha=0.3)
    bottom.step(frame.index, frame["batch_size"], where="mid", color="tab:green")
    bottom.yaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_ylabel("batch size")
    bottom.set_xlabel("token")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    plt.close(fig)
    return fig


async def aconcurrency(
    backend: ChatBackend, messages: Messages, levels: Sequence[int] = LEVELS, max_tokens: int = 32, **params: Any
) -> pd.DataFrame:
    """For each level k, k identical requests at once (each exactly `max_tokens` long: ignore_eos), one level after
    another. One row per request with the engine's numbers, plus the level's wall time for throughput."""
    rows = []
    for level in levels:
        started = time.perf_counter()
        results = await asyncio.gather(
            *(
                backend.achat(messages, max_tokens=max_tokens, ignore_eos=True, **{"seed": i, **params})
                for i in range(level)
            )
        )
        wall = time.perf_counter() - started
        for i, result in enumerate(results):
            rows.append({"concurrency": level, "request": i, **result.stats(), "level_wall_s": wall})
    return pd.DataFrame(rows)


def concurrency(backend: ChatBackend, messages: Messages, levels: Sequence[int] = LEVELS, **kw: Any) -> pd.DataFrame:
    return run_sync(aconcurrency(backend, messages, levels, **kw))


def summarize_concurrency(df: pd.DataFrame) -> pd.DataFrame:
    """Per level: TTFT (mean, max), per-request decode tokens/s, aggregate tokens/s over the level's wall time,
    the largest batch the engine reported, and how much of each prompt the prefix cache served."""
    g = df.groupby("concurrency")
    out = pd.DataFrame(
        {
            "ttft_ms_mean": g["ttft_ms"].mean(),
            "ttft_ms_max": g["ttft_ms"].max(),
            "tokens_per_s_per_request": g["tokens_per_s"].mean(),
            "tokens_per_s_total": g["completion_tokens"].sum() / g["level_wall_s"].first(),
            "max_batch_size": g["max_batch_size"].max(),
            "cached_tokens_mean": g["cached_tokens"].mean(),
        }
    )
    return out.reset_index()


def plot_concurrency(summary: pd.DataFrame) -> Any:
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    left.plot(summary["concurrency"], summary["ttft_ms_mean"], marker="o", label="mean")
    left.plot(summary["concurrency"], summary["ttft_ms_max"], marker="o", label="max")
    left.set_title("time to first token (ms)")
    left.legend(fontsize="small")
    right.plot(summary["concurrency"], summary["tokens_per_s_per_request"], marker="o", label="per request")
    right.plot(summary["concurrency"], summary["tokens_per_s_total"], marker="o", label="all requests, wall clock")
    right.set_title("tokens/s")
    right.legend(fontsize="small")
    for ax in (left, right):
        ax.set_xlabel("concurrent requests")
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(summary["concurrency"]), [str(k) for k in summary["concurrency"]])
        ax.grid(alpha=0.3)
    fig.tight_layout()
    plt.close(fig)
    return fig
