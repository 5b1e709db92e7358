"""The notebooks' name for the ChatBackend seam, which lives in playground/backend.py (the page uses it too)."""

from playground.backend import (
    ChatBackend,
    LocalBackend,
    Messages,
    RemoteBackend,
    RemoteError,
    SSEChunks,
    as_messages,
    connect,
    error_message,
    run_sync,
)

__all__ = ["ChatBackend", "LocalBackend", "Messages", "RemoteBackend", "RemoteError", "SSEChunks", "as_messages",
           "connect", "error_message", "run_sync"]  # fmt: skip
