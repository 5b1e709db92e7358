"""Every content-part form of spec §3.1 against the tiny multimodal models, through /v1/chat/completions.

The same media sent in any form (data URL as a string or `{url}`, `file://` under `--media-local-root`, a plain
local path, raw base64 for images, a remote URL, `input_audio`) must reach the model as the same bytes: a 200
whose `usage.prompt_tokens` counts the media report's `tokens`, and top logprobs identical to the data-URL form.
Each form's failures give the spec's message (§3.2-§3.5) on these models too.

Remote URLs come from `media_http` on loopback, so those tests use the test-only `private_fetch` allowance; one
test checks that without it the live server refuses loopback like production does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from engine.media.local import NOT_ALLOWED
from engine.media.remote import FAILED
from tests import media_samples as ms
from tests.conftest import AUDIO, VL, LiveServer, extra_server

MiB = 1 << 20
JPEG = ms.image_bytes("JPEG", (64, 48), (200, 30, 30))
BLUE = ms.image_bytes("JPEG", (64, 48), (20, 30, 200))
MP4 = ms.video_bytes("mp4", seconds=1.0, fps=4, size=(64, 48))
_TONE = ms.tone(seconds=1.0, rate=16000, freq=440.0, channels=1) * np.linspace(0.2, 1.0, 16000, dtype=np.float32)
WAV, FLAC, MP3 = (ms.audio_bytes(fmt, _TONE, rate=16000) for fmt in ("wav", "flac", "mp3"))
FILES = {
    "red.jpg": JPEG,
    "blue.jpg": BLUE,
    "clip.mp4": MP4,
    "tone.wav": WAV,
    "tone.flac": FLAC,
    "tone.mp3": MP3,
    "not-image.png": WAV,
}
# sparse files just over the limits: 20 MiB for images and audio, 512 MiB for video
BIG = {"big.png": (b"\x89PNG\r\n\x1a\n", 20), "big.wav": (b"RIFF\0\0\0\0WAVE", 20), "big.mp4": (b"\0\0\0\x18ftyp", 512)}

SAMPLE = {  # part type -> (file name, bytes, data-URL MIME type)
    "image_url": ("red.jpg", JPEG, "image/jpeg"),
    "video_url": ("clip.mp4", MP4, "video/mp4"),
    "audio_url": ("tone.flac", FLAC, "audio/flac"),
}
URL_FORMS = ["string data URL", "object data URL", "file URL", "string local path", "object local path", "remote"]


@pytest.fixture(scope="session")
def media_files(mm_media_root: Path, tmp_path_factory: Any) -> Path:
    for name, data in FILES.items():
        (mm_media_root / name).write_bytes(data)
    for name, (head, limit) in BIG.items():
        with open(mm_media_root / name, "wb") as f:
            f.write(head)
            f.truncate(limit * MiB + 1)
    for path in mm_media_root.iterdir():
        path.chmod(0o644)
    outside = tmp_path_factory.mktemp("outside") / "red.jpg"  # a real readable file, outside the root
    outside.write_bytes(JPEG)
    outside.chmod(0o644)
    return outside


def source(form: str, part_type: str, root: Path, base: str) -> Any:
    name, data, mime = SAMPLE[part_type]
    return {
        "string data URL": ms.data_url(mime, data),
        "object data URL": {"url": ms.data_url(mime, data)},
        "file URL": {"url": f"file://{root}/{name}"},
        "string local path": name,
        "object local path": {"url": f"{root}/{name}"},
        "remote": {"url": f"{base}/{name}"},
        "string raw base64": ms.b64(data),
        "object raw base64": {"url": ms.b64(data)},
    }[form]


def ask(server: LiveServer, model: str, parts: list[dict], **extra: Any) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": [*parts, {"type": "text", "text": "What?"}]}],
        "max_tokens": 2,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 3,
    } | extra
    with server.client() as c:
        return c.post("/v1/chat/completions", json=body)


def tops(body: dict) -> list[list[tuple[str, float]]]:
    return [
        [(t["token"], round(t["logprob"], 5)) for t in entry["top_logprobs"]]
        for entry in body["choices"][0]["logprobs"]["content"]
    ]


_plain: dict[str, int] = {}
_reference: dict[str, dict] = {}


def plain_tokens(server: LiveServer, model: str) -> int:
    if model not in _plain:
        _plain[model] = ask(server, model, []).json()["usage"]["prompt_tokens"]
    return _plain[model]


def reference(server: LiveServer, model: str, part_type: str) -> dict:
    """The answer to the sample sent as a data URL object: what every other form must reproduce."""
    if part_type not in _reference:
        name, data, mime = SAMPLE[part_type]
        r = ask(server, model, [{"type": part_type, part_type: {"url": ms.data_url(mime, data)}}])
        assert r.status_code == 200, r.text
        _reference[part_type] = r.json()
    return _reference[part_type]


def check_same_answer(body: dict, server: LiveServer, model: str, part_type: str) -> None:
    (report,) = body["media"]
    assert report["tokens"] > 0
    # the media's tokens plus its two markers (vision_start/end, audio_bos/eos) on top of the text prompt
    assert body["usage"]["prompt_tokens"] == plain_tokens(server, model) + 2 + report["tokens"]
    ref = reference(server, model, part_type)
    assert report == ref["media"][0]
    assert tops(body) == tops(ref)


@pytest.fixture
def remote_ready(request: pytest.FixtureRequest, form: str) -> None:
    if form == "remote":
        request.getfixturevalue("private_fetch")


# ---- the VL model: images and videos ---------------------------------------------------------------------------------


@pytest.mark.parametrize("form", [*URL_FORMS, "string raw base64", "object raw base64"])
def test_image_in_every_form(vl_live, media_files, mm_media_root, media_http, remote_ready, form: str) -> None:
    part = {"type": "image_url", "image_url": source(form, "image_url", mm_media_root, media_http)}
    r = ask(vl_live, VL, [part])
    assert r.status_code == 200, r.text
    check_same_answer(r.json(), vl_live, VL, "image_url")


@pytest.mark.parametrize("form", URL_FORMS)
def test_video_in_every_form(vl_live, media_files, mm_media_root, media_http, remote_ready, form: str) -> None:
    part = {"type": "video_url", "video_url": source(form, "video_url", mm_media_root, media_http)}
    r = ask(vl_live, VL, [part])
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["media"][0]["frames_sampled"] == 2  # 1 s at 2 frames/s
    check_same_answer(body, vl_live, VL, "video_url")


def test_no_kv_reuse_across_different_images(vl_live, media_files) -> None:
    red = ask(vl_live, VL, [{"type": "image_url", "image_url": "red.jpg"}])
    blue = ask(vl_live, VL, [{"type": "image_url", "image_url": "blue.jpg"}])
    assert red.status_code == blue.status_code == 200, (red.text, blue.text)
    assert blue.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert tops(blue.json()) != tops(red.json())


VL_ERRORS = [
    ({"type": "image_url", "image_url": "data:image/png;base64,abc"}, "invalid base64 data"),
    ({"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,ab=c"}}, "invalid base64 data"),
    ({"type": "image_url", "image_url": "not base64!"}, "invalid base64 data"),
    ({"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA="}}, "invalid base64 data"),
    (
        {"type": "image_url", "image_url": ms.data_url("image/png", JPEG)},
        "image content does not match its declared type image/png",
    ),
    (
        {"type": "image_url", "image_url": {"url": ms.data_url("video/mp4", MP4)}},
        "image_url parts cannot carry video/mp4 data",
    ),
    (
        {"type": "video_url", "video_url": ms.data_url("video/x-msvideo", MP4)},
        "video content does not match its declared type video/x-msvideo",
    ),
    ({"type": "image_url", "image_url": ms.b64(WAV)}, "image content is not a supported format (JPEG, PNG)"),
    ({"type": "image_url", "image_url": {"url": "not-image.png"}}, NOT_ALLOWED),  # §3.4: wrong type, generic
    (
        {"type": "video_url", "video_url": ms.b64(MP4)},
        "unsupported video source: expected a data URL, an http(s) URL or a .mp4/avi/wmv file path",
    ),
    ({"type": "image_url", "image_url": "file:///etc/passwd.png"}, NOT_ALLOWED),
    ({"type": "image_url", "image_url": {"url": "../outside/red.jpg"}}, NOT_ALLOWED),
    ({"type": "image_url", "image_url": {"url": "OUTSIDE"}}, NOT_ALLOWED),
    ({"type": "video_url", "video_url": {"url": "file://missing.mp4"}}, NOT_ALLOWED),
    ({"type": "image_url", "image_url": {"url": "big.png"}}, NOT_ALLOWED),  # over 20 MiB: refused before reading
    ({"type": "video_url", "video_url": "big.mp4"}, NOT_ALLOWED),  # over 512 MiB
]


@pytest.mark.parametrize(("part", "message"), VL_ERRORS)
def test_vl_errors_per_form(vl_live, media_files, part: dict, message: str) -> None:
    kind = part["type"]
    if part[kind] == {"url": "OUTSIDE"}:
        part = {"type": kind, kind: {"url": f"file://{media_files}"}}
    r = ask(vl_live, VL, [{"type": "text", "text": "Look:"}, part])
    assert r.status_code == 422, r.text
    assert r.json()["error"] == f"messages[0].content[1]: {message}"


def test_remote_errors(vl_live, media_files, media_http, private_fetch) -> None:
    for part in (
        {"type": "image_url", "image_url": f"{media_http}/big.png"},  # over 20 MiB
        {"type": "video_url", "video_url": f"{media_http}/big.mp4"},  # over 512 MiB
        {"type": "image_url", "image_url": {"url": f"{media_http}/missing.jpg"}},  # 404
        {"type": "image_url", "image_url": {"url": f"{media_http}/not-image.png"}},  # wrong content
        {"type": "video_url", "video_url": {"url": f"http://example.com/{media_http}/clip.mp4"}},
    ):
        r = ask(vl_live, VL, [part])
        assert r.status_code == 422, r.text
        assert r.json()["error"] == f"messages[0].content[0]: {FAILED}"


def test_loopback_stays_refused_without_the_test_allowance(vl_live, media_files, media_http) -> None:
    r = ask(vl_live, VL, [{"type": "image_url", "image_url": f"{media_http}/red.jpg"}])
    assert r.status_code == 422
    assert r.json()["error"] == f"messages[0].content[0]: {FAILED}"


def test_oversize_inline_image(vl_live) -> None:
    """Under the default 4 MiB body cap inline media that large is a 413; with a larger cap, the item limit."""
    big = "data:image/png;base64," + "A" * (4 * (20 * MiB // 3 + 2))
    r = ask(vl_live, VL, [{"type": "image_url", "image_url": big}])
    assert r.status_code == 413
    body = {
        "model": VL,
        "max_tokens": 1,
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": big}}]}],
    }
    with extra_server(vl_live.settings, vl_live.service, ui=False, max_request_length_mb=32) as http:
        r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "messages[0].content[0] must be at most 20 MiB decoded, got 20971524."


# ---- the audio model ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", URL_FORMS)
def test_audio_url_in_every_form(audio_live, media_files, mm_media_root, media_http, remote_ready, form: str) -> None:
    part = {"type": "audio_url", "audio_url": source(form, "audio_url", mm_media_root, media_http)}
    r = ask(audio_live, AUDIO, [part])
    assert r.status_code == 200, r.text
    check_same_answer(r.json(), audio_live, AUDIO, "audio_url")


@pytest.mark.parametrize(("fmt", "data"), [("flac", FLAC), ("wav", WAV), ("mp3", MP3)])
def test_input_audio_formats(audio_live, fmt: str, data: bytes) -> None:
    r = ask(audio_live, AUDIO, [{"type": "input_audio", "input_audio": {"data": ms.b64(data), "format": fmt}}])
    assert r.status_code == 200, r.text
    body = r.json()
    (report,) = body["media"]
    assert report["duration"] == pytest.approx(1.0, abs=0.06)  # mp3 pads a frame
    assert body["usage"]["prompt_tokens"] == plain_tokens(audio_live, AUDIO) + 2 + report["tokens"]
    if fmt != "mp3":  # FLAC and WAV of the same samples decode to the same audio; MP3 is lossy
        check_same_answer(body, audio_live, AUDIO, "audio_url")


AUDIO_ERRORS = [
    ({"type": "input_audio", "input_audio": {"data": "abc", "format": "wav"}}, "invalid base64 data"),
    ({"type": "audio_url", "audio_url": "data:audio/x-wav;base64,abc"}, "invalid base64 data"),
    (
        {"type": "input_audio", "input_audio": {"data": ms.b64(FLAC), "format": "wav"}},
        "audio content does not match its declared type audio/x-wav",
    ),
    (
        {"type": "audio_url", "audio_url": {"url": ms.data_url("audio/mpeg", WAV)}},
        "audio content does not match its declared type audio/mpeg",
    ),
    (
        {"type": "audio_url", "audio_url": ms.data_url("image/jpeg", JPEG)},
        "audio_url parts cannot carry image/jpeg data",
    ),
    (
        {"type": "input_audio", "input_audio": {"data": ms.b64(WAV), "format": "ogg"}},
        ".input_audio.format must be one of mp3, wav, flac, got 'ogg'.",
    ),
    (
        {"type": "audio_url", "audio_url": ms.b64(WAV)},
        f".audio_url must be at most 4096 characters long, got {len(ms.b64(WAV))}.",
    ),
    (
        {"type": "audio_url", "audio_url": ms.b64(WAV[:600])},
        "unsupported audio source: expected a data URL, an http(s) URL or a .mp3/wav/flac file path",
    ),
    ({"type": "audio_url", "audio_url": "file:///etc/passwd.wav"}, NOT_ALLOWED),
    ({"type": "audio_url", "audio_url": {"url": "big.wav"}}, NOT_ALLOWED),
]


def test_remote_audio_errors(audio_live, media_files, media_http, private_fetch) -> None:
    for part in (
        {"type": "audio_url", "audio_url": {"url": f"{media_http}/clip.mp4"}},  # a video, not audio
        {"type": "audio_url", "audio_url": f"{media_http}/big.wav"},
    ):
        r = ask(audio_live, AUDIO, [part])
        assert r.status_code == 422, r.text
        assert r.json()["error"] == f"messages[0].content[0]: {FAILED}"


@pytest.mark.parametrize(("part", "message"), AUDIO_ERRORS)
def test_audio_errors_per_form(audio_live, media_files, part: dict, message: str) -> None:
    r = ask(audio_live, AUDIO, [part])
    assert r.status_code == 422, r.text
    where = "messages[0].content[0]" + ("" if message.startswith(".") else ": ")  # request checks name the field
    assert r.json()["error"] == where + message
