"""The notebooks' name for the ChatBackend seam, which lives in playground/backend.py and playground/remote.py (the
page uses it too)."""

from playground.backend import ChatBackend, LocalBackend, Messages, as_messages, connect, run_sync
from playground.remote import RemoteBackend, RemoteError, SSEChunks, error_message

__all__ = [
    "ChatBackend",
    "LocalBackend",
    "Messages",
    "RemoteBackend",
    "RemoteError",
    "SSEChunks",
    "as_messages",
    "connect",
    "error_message",
    "run_sync",
]
