"""Parameter sweeps: a grid of requests run as one batched job, one DataFrame row per request, and plots."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from playground.client.batch import arun
from playground.client.result import ChatResult
from playground.notebooks.backend import ChatBackend, Messages, run_sync

METRICS = ("length", "distinct_2", "mean_logprob")


def expand_grid(grid: dict[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """{"temperature": [0.5, 1.0], "seed": [1, 2]} -> the 4 combinations, first key varying slowest."""
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def distinct_n(tokens: Sequence[str], n: int) -> float:
    """Distinct n-grams over all n-grams of a token sequence: 1.0 = no repetition; NaN when it has none."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams) if grams else float("nan")


def sweep_row(params: dict[str, Any], result: ChatResult | None, error: str | None = None) -> dict[str, Any]:
    row: dict[str, Any] = dict(params)
    if result is None:
        return {**row, "reply": "", "length": 0, "error": error}
    stats = result.stats()
    tokens = result.tokens
    row.update(
        {
            "reply": result.reply,
            "length": result.completion_tokens,
            "mean_logprob": result.mean_logprob,
            "min_logprob": result.min_logprob,
            "distinct_1": distinct_n(tokens, 1),
            "distinct_2": distinct_n(tokens, 2),
            "ttft_ms": stats["ttft_ms"],
            "tokens_per_s": stats["tokens_per_s"],
            "finish_reason": result.finish_reason,
            "max_batch_size": stats["max_batch_size"],
            "cached_tokens": stats["cached_tokens"],
            "tokens": tuple(tokens),
            "error": None,
        }
    )
    return row


async def asweep(
    backend: ChatBackend,
    grid: dict[str, Sequence[Any]] | Iterable[dict[str, Any]],
    messages: Messages,
    *,
    concurrency: int = 32,
    **fixed: Any,
) -> pd.DataFrame:
    """Every combination of `grid` (a dict of lists, or a list of parameter dicts) with `fixed` parameters, all in
    flight together so the engine batches them; at most `concurrency` at once (32 = the engine's default batch, and
    under its default queue limit). A request the server refuses becomes a row with `error` set."""
    combos = expand_grid(grid) if isinstance(grid, dict) else list(grid)
    jobs = [(backend, messages, {"logprobs": True, **fixed, **params}) for params in combos]
    results = await arun(jobs, concurrency=concurrency)
    return pd.DataFrame(
        [sweep_row(p, None, r) if isinstance(r, str) else sweep_row(p, r) for p, r in zip(combos, results)]
    )


def sweep(
    backend: ChatBackend, grid: dict[str, Sequence[Any]] | Iterable[dict[str, Any]], messages: Messages, **kw: Any
) -> pd.DataFrame:
    return run_sync(asweep(backend, grid, messages, **kw))


def diversity(df: pd.DataFrame, by: str | list[str], n: int = 2) -> pd.DataFrame:
    """Distinct-n over all replies of each group (e.g. the seeds at one temperature): how different the replies
    are from each other, where a row's own distinct-n only says how repetitive one reply is."""
    keys = [by] if isinstance(by, str) else list(by)

    def pooled(tokens: pd.Series) -> float:
        grams = [tuple(t[i : i + n]) for t in tokens for i in range(len(t) - n + 1)]
        return len(set(grams)) / len(grams) if grams else float("nan")

    out = df.groupby(keys)["tokens"].apply(pooled).rename(f"distinct_{n}_across").reset_index()
    return out.merge(df.groupby(keys).size().rename("replies").reset_index(), on=keys)


def plot_sweep(df: pd.DataFrame, x: str, metrics: Sequence[str] = METRICS, hue: str | None = None) -> Any:
    """One panel per metric against `x`, averaged over every other parameter (one line per `hue` value)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.2), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        if hue is None:
            means = df.groupby(x)[metric].mean()
            ax.plot(means.index, means.values, marker="o")
        else:
            for value, part in df.groupby(hue):
                means = part.groupby(x)[metric].mean()
                ax.plot(means.index, means.values, marker="o", label=f"{hue}={value}")
            ax.legend(fontsize="small")
        ax.set_xlabel(x)
        ax.set_title(metric)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    plt.close(fig)  # shown once, as the cell's value, not again by the inline backend
    return fig
