"""The attachment preview runs the request's own media checks and decode (engine/serving/media_preview.py)."""

from __future__ import annotations

import asyncio
import base64

from engine.config import Settings
from engine.serving.media_preview import preview_media
from tests.media_samples import image_bytes, video_bytes
from tests.paths import DATA

SPEECH = DATA / "speech.flac"


def data_url(mime: str, raw: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def preview(part: dict) -> dict:
    return asyncio.run(preview_media(part, Settings().serving)).as_json()


def test_image_preview_has_mime_bytes_and_size() -> None:
    raw = image_bytes("PNG", (32, 24))
    got = preview({"type": "image_url", "image_url": {"url": data_url("image/png", raw)}})
    assert got == {
        "kind": "image",
        "mime": "image/png",
        "bytes": len(raw),
        "origin": "data_url",
        "width": 32,
        "height": 24,
    }


def test_video_preview_counts_the_frames_the_server_samples() -> None:
    raw = video_bytes("mp4", seconds=2.0, fps=10)
    got = preview({"type": "video_url", "video_url": {"url": data_url("video/mp4", raw)}})
    assert got["kind"] == "video" and got["mime"] == "video/mp4" and got["bytes"] == len(raw)
    assert got["frames"] == 4 and got["fps"] == 2.0 and got["max_frames"] == 32  # 2 s at 2 frames a second
    assert abs(got["duration_s"] - 2.0) < 0.2 and (got["width"], got["height"]) == (64, 48)


def test_audio_preview_has_its_duration() -> None:
    data = base64.b64encode(SPEECH.read_bytes()).decode()
    got = preview({"type": "input_audio", "input_audio": {"data": data, "format": "flac"}})
    assert got["kind"] == "audio" and got["mime"] == "audio/flac" and 2.0 < got["duration_s"] < 10.0


def test_refusals_carry_the_servers_own_message() -> None:
    png = image_bytes("PNG")
    wrong = preview({"type": "image_url", "image_url": {"url": data_url("image/jpeg", png)}})
    assert wrong["kind"] == "image" and "error" in wrong and "bytes" not in wrong
    local = preview({"type": "image_url", "image_url": {"url": "file:///etc/x.png"}})
    assert local["error"] == "local media path is not allowed or not readable"
    assert preview({"type": "text", "text": "hi"})["error"].startswith("not a media part")
