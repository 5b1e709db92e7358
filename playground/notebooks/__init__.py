"""What the notebooks in notebooks/ call: a backend seam, chat, widgets, sweeps, latency anatomy, and the messages
of audio, tool and tool-result turns.

Cells stay thin; everything here is tested in tests/notebooks/test_notebook_helpers.py. Like the Gradio page, this layer
builds the request the API parses and renders only the service's chunks.

Imports are lazy (PEP 562): a name pulls in only its own module, so a helper that needs no ipywidgets (or anything
else only `requirements-notebooks.txt` installs) works without them. The result object lives in playground/client/
(the page reads it too).
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "backend": ("ChatBackend", "LocalBackend", "RemoteBackend", "RemoteError", "connect", "run_sync"),
    "latency": (
        "aconcurrency",
        "concurrency",
        "plot_concurrency",
        "plot_timeline",
        "summarize_concurrency",
        "timeline_frame",
    ),
    "messages": ("audio_part", "tool_result_message", "user_message"),
    "playground.client.heatmap": ("heatmap_html",),
    "playground.client.result": ("ChatResult", "ToolCall"),
    "sweeps": ("asweep", "distinct_n", "diversity", "expand_grid", "plot_sweep", "sweep"),
    "widgets": ("ChatPanel", "ParameterExplorer"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module if "." in module else f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULE_OF])


__all__ = [
    "ChatBackend",
    "ChatPanel",
    "ChatResult",
    "LocalBackend",
    "ParameterExplorer",
    "RemoteBackend",
    "RemoteError",
    "ToolCall",
    "aconcurrency",
    "asweep",
    "audio_part",
    "concurrency",
    "connect",
    "distinct_n",
    "diversity",
    "expand_grid",
    "heatmap_html",
    "plot_concurrency",
    "plot_sweep",
    "plot_timeline",
    "run_sync",
    "summarize_concurrency",
    "sweep",
    "timeline_frame",
    "tool_result_message",
    "user_message",
]
