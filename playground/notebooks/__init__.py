"""What the notebooks in notebooks/ call: a backend seam, chat, widgets, sweeps, latency anatomy, and the messages
of audio, tool and tool-result turns.

Cells stay thin; everything here is tested in tests/test_notebook_helpers.py. Like the Gradio page, this layer
builds the request the API parses and renders only the service's chunks.
"""

from playground.notebooks.backend import (
    ChatBackend,
    LocalBackend,
    RemoteBackend,
    RemoteError,
    connect,
    run_sync,
)
from playground.notebooks.latency import (
    aconcurrency,
    concurrency,
    plot_concurrency,
    plot_timeline,
    summarize_concurrency,
    timeline_frame,
)
from playground.notebooks.messages import audio_part, tool_result_message, user_message
from playground.notebooks.result import ChatResult, ToolCall, heatmap_html
from playground.notebooks.sweeps import asweep, distinct_n, diversity, expand_grid, plot_sweep, sweep
from playground.notebooks.widgets import ChatPanel, ParameterExplorer

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
