"""The notebooks' name for the ChatBackend seam, which lives in playground/client/ (backend.py, remote.py and
connect.py; the page uses it too)."""

from playground.client.backend import ChatBackend, LocalBackend, Messages, as_messages, run_sync
from playground.client.connect import connect
from playground.client.remote import RemoteBackend, RemoteError, SSEChunks, error_message

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
