"""`load_media`: one content part -> checked, decoded media (spec §3). The only module that reads settings.

Network I/O is awaited; file reads, base64, sniffing and decoding run in a worker thread, so the event loop is
never blocked by a large or slow item.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.config import MediaSettings
from engine.media import decode, sources
from engine.media.errors import MediaError
from engine.media.local import NOT_ALLOWED, read_local
from engine.media.remote import FAILED, Timeouts, fetch_remote
from engine.media.sources import AUDIO_FORMATS, MAX_BYTES, Kind, MediaInput, Origin


@dataclass
class LoadedMedia:
    kind: Kind
    mime: str  # from the magic bytes (equal to the declared type where one was declared)
    origin: Origin  # "remote", "local", "data_url" or "base64"; never the path or URL itself
    size: int  # bytes before decoding
    digest: str  # sha256 of kind, type, decode options and bytes: salt for prefix-cache keys
    image: Any = None  # PIL.Image.Image in RGB, for kind "image"
    video: decode.Video | None = None  # sampled frames, for kind "video"
    audio: np.ndarray | None = None  # mono float32 at `sample_rate`, for kind "audio"
    sample_rate: int | None = None
    duration: float | None = None  # seconds, video and audio
    frames_sampled: int | None = None
    fetch_seconds: float = 0.0  # reading or downloading the bytes
    decode_seconds: float = 0.0  # checking and decoding them


async def load_media(
    part: Any,
    settings: MediaSettings,
    options: decode.DecodeOptions = decode.DecodeOptions(),
    *,
    timeouts: Timeouts = Timeouts(),
) -> LoadedMedia:
    """A content part (pydantic model, JSON dict or `MediaInput`) -> `LoadedMedia`, or MediaError."""
    item = sources.media_input(part)
    origin = sources.classify(item)
    if origin in ("remote", "local"):
        sources.check_url_length(item.source)
    elif not settings.media_allow_data_urls:
        raise MediaError("inline base64 media is disabled on this server")
    start = time.perf_counter()
    raw: bytes | None = None
    if origin == "remote":
        if not settings.media_allow_remote:
            raise MediaError(FAILED)
        raw = await fetch_remote(
            item.source, MAX_BYTES[item.kind], allowed_domains=settings.media_remote_allowed_domains, timeouts=timeouts
        )
    elif origin == "local":
        allow, root = settings.media_allow_local, settings.media_local_root
        raw = await asyncio.to_thread(read_local, item.source, item.kind, allow=allow, root=root)
    fetched = time.perf_counter()
    try:
        loaded = await asyncio.to_thread(_prepare, item, origin, raw, options)
    except MediaError:
        if origin == "remote":  # §3.5: any failure of a remote part, wrong or broken content included
            raise MediaError(FAILED) from None
        if origin == "local":  # §3.4: every failure of a local file, wrong type and too large included
            raise MediaError(NOT_ALLOWED) from None
        raise
    loaded.fetch_seconds, loaded.decode_seconds = fetched - start, time.perf_counter() - fetched
    return loaded


async def load_all(
    parts: Sequence[Any], settings: MediaSettings, options: decode.DecodeOptions = decode.DecodeOptions()
) -> list[LoadedMedia]:
    """Every media part of one request, in order, within the count and total-size limits (§2.3). One at a time,
    so memory stays bounded by the limits; a MediaError carries the `index` of the failing part."""
    sources.check_count(len(parts))
    loaded: list[LoadedMedia] = []
    total = 0
    for index, part in enumerate(parts):
        try:
            media = await load_media(part, settings, options)
        except MediaError as exc:
            raise MediaError(exc.message, index=index) from None
        total += media.size
        if total > sources.MAX_TOTAL_BYTES:
            limit = sources.MAX_TOTAL_BYTES // sources.MiB
            raise MediaError(f"media of one request must be at most {limit} MiB in total", index=index)
        loaded.append(media)
    return loaded


def _prepare(item: MediaInput, origin: Origin, raw: bytes | None, options: decode.DecodeOptions) -> LoadedMedia:
    declared: str | None = None
    if origin == "data_url":
        mime, text = sources.parse_data_url(item.source, item.kind)
        declared = sources.MIME_TABLE[item.kind][mime]
        raw = sources.decode_base64(text, item.kind)
    elif origin == "base64":
        if item.audio_format is not None:
            if item.audio_format not in AUDIO_FORMATS:
                raise MediaError(f"input_audio.format must be one of {', '.join(AUDIO_FORMATS)}")
            declared = AUDIO_FORMATS[item.audio_format]
        raw = sources.decode_base64(item.source, item.kind)
    assert raw is not None
    sources.check_size(len(raw), item.kind)
    mime = sources.check_content(raw, item.kind, declared)
    salt = f"{item.kind}:{mime}:"
    if item.kind == "video":
        salt += f"{options.video_fps}:{options.video_max_frames}:{options.max_frame_pixels}:"
    elif item.kind == "audio":
        salt += f"{options.audio_rate}:"
    digest = hashlib.sha256(salt.encode() + raw).hexdigest()
    media = LoadedMedia(item.kind, mime, origin, len(raw), digest)
    if item.kind == "image":
        media.image = decode.decode_image(raw, options)
    elif item.kind == "video":
        media.video = decode.decode_video(raw, options)
        media.duration, media.frames_sampled = media.video.duration, len(media.video.frames)
    else:
        media.audio, media.duration = decode.decode_audio(raw, options)
        media.sample_rate = options.audio_rate
    return media
