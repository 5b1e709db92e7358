"""What the server makes of one media part before it is sent: the request's own source checks, limits and decode
(engine/media, spec §3), summarised for the playground's attachment preview.

A preview is never an error: a part the server would refuse comes back with `error` set to the very message a
request with that part would get (without the `messages[i].content[j]: ` prefix, which only a request has).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from engine.config import ServingSettings
from engine.media import DecodeOptions, MediaError, load_media, media_input


@dataclass
class MediaPreview:
    kind: str | None  # image | video | audio; None when the part is not a media part at all
    mime: str | None = None  # sniffed from the bytes
    bytes: int | None = None  # decoded size, the number the limits apply to
    origin: str | None = None  # data_url | base64 | local | remote
    width: int | None = None  # image, or the sampled video frames
    height: int | None = None
    frames: int | None = None  # video: frames sampled, at `fps` a second and at most `max_frames`
    fps: float | None = None
    max_frames: int | None = None
    duration_s: float | None = None  # video and audio
    error: str | None = None  # why the server would refuse the part

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


async def preview_media(part: Any, settings: ServingSettings, options: DecodeOptions = DecodeOptions()) -> MediaPreview:
    """One content part (JSON dict or pydantic model) -> its MediaPreview, through the same loader a request uses."""
    try:
        kind = media_input(part).kind
    except MediaError as exc:
        return MediaPreview(None, error=exc.message)
    except (AttributeError, TypeError):
        return MediaPreview(None, error="not a media content part")
    try:
        media = await load_media(part, settings, options)
    except MediaError as exc:
        return MediaPreview(kind, error=exc.message)
    out = MediaPreview(kind, media.mime, media.size, media.origin)
    if media.image is not None:
        out.width, out.height = media.image.size
    if media.video is not None:
        out.frames = media.frames_sampled
        out.fps, out.max_frames = options.video_fps, options.video_max_frames
        out.height, out.width = media.video.frames.shape[1:3]
    if media.duration is not None:
        out.duration_s = round(media.duration, 3)
    return out
