"""Load and validate image, video and audio parts from data URLs, an allowed local root and allowed URLs.

Imports nothing of engine/protocol, engine/serving or engine/http: parts come in as pydantic models or plain dicts (duck-typed), and every
refusal is a `MediaError` whose message is safe to show (the API maps it to a validation error).
"""

from engine.media.decode import DecodeOptions, Video
from engine.media.errors import MediaError
from engine.media.loader import LoadedMedia, load_all, load_media
from engine.media.remote import Timeouts
from engine.media.sources import MAX_BYTES, MAX_ITEMS, MAX_TOTAL_BYTES, MediaInput, media_input
from engine.media.transcribe import Transcriber

__all__ = [
    "MAX_BYTES",
    "MAX_ITEMS",
    "MAX_TOTAL_BYTES",
    "DecodeOptions",
    "LoadedMedia",
    "MediaError",
    "MediaInput",
    "Timeouts",
    "Transcriber",
    "Video",
    "load_all",
    "load_media",
    "media_input",
]
