"""Source classification, strict base64, data URLs, magic bytes, MIME tables and limits (spec §2.3, §3.1-§3.3)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine.config import Settings
from engine.media import MAX_ITEMS, LoadedMedia, MediaError, MediaInput, load_all, load_media, media_input
from engine.media import sources as src
from engine.protocol.messages import Message
from tests.media_samples import audio_bytes, b64, data_url, image_bytes, video_bytes
from tests.paths import ROOT

SETTINGS = Settings().serving
PNG, JPEG = image_bytes("PNG"), image_bytes("JPEG")


def load(part: Any, settings: Settings = SETTINGS) -> LoadedMedia:
    return asyncio.run(load_media(part, settings))


def refused(part: Any, settings: Settings = SETTINGS) -> str:
    with pytest.raises(MediaError) as info:
        load(part, settings)
    return info.value.message


@pytest.mark.parametrize(
    ("kind", "source", "origin"),
    [
        ("image", "https://example.com/a.png", "remote"),
        ("image", "HTTP://example.com/a", "remote"),
        ("video", "http://example.com/clip.mp4?x=.png", "remote"),
        ("image", "file:///data/a.png", "local"),
        ("image", "file://a.gif", "local"),  # file:// is local whatever the extension; the extension check refuses it
        ("image", "pics/a.PNG", "local"),
        ("video", "/data/clip.wmv", "local"),
        ("audio", "speech.flac", "local"),
        ("image", "data:image/png;base64,AAAA", "data_url"),
        ("audio", "data:audio/x-wav;base64,AAAA", "data_url"),
        ("image", "iVBORw0KGgo=", "base64"),
    ],
)
def test_classification_follows_the_spec_order(kind: str, source: str, origin: str) -> None:
    assert src.classify(MediaInput(kind, source)) == origin  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "source"), [("video", "AAAA"), ("audio", "clip.mp4"), ("video", "a.png")])
def test_raw_base64_and_foreign_extensions_are_only_for_images(kind: str, source: str) -> None:
    with pytest.raises(MediaError, match="unsupported"):
        src.classify(MediaInput(kind, source))  # type: ignore[arg-type]


def test_input_audio_is_always_base64() -> None:
    assert src.classify(MediaInput("audio", "https://x/a.wav", "wav")) == "base64"


def test_media_input_reads_pydantic_parts_and_dicts() -> None:
    parts = [
        {"type": "image_url", "image_url": "a.png"},
        {"type": "image_url", "image_url": {"url": "b.png", "detail": "high"}},
        {"type": "video_url", "video_url": {"url": "c.mp4"}},
        {"type": "audio_url", "audio_url": "d.wav"},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
    ]
    expected = [
        ("image", "a.png", None),
        ("image", "b.png", None),
        ("video", "c.mp4", None),
        ("audio", "d.wav", None),
        ("audio", "AAAA", "wav"),
    ]
    message = Message.model_validate({"role": "user", "content": parts})
    for part in (*parts, *message.media_parts()):
        item = media_input(part)
        assert (item.kind, item.source, item.audio_format) in expected
    assert [media_input(p).source for p in message.media_parts()] == ["a.png", "b.png", "c.mp4", "d.wav", "AAAA"]
    with pytest.raises(MediaError):
        media_input({"type": "text", "text": "hi"})


@pytest.mark.parametrize("text", ["@@@", "AAA", "AA==AA==", "AAAA\n", " AAAA", "AA=A", "A===", "", "AAAA===="])
def test_base64_is_strict(text: str) -> None:
    with pytest.raises(MediaError, match="invalid base64 data"):
        src.decode_base64(text, "image")


def test_base64_size_is_refused_before_decoding() -> None:
    text = "A" * (src.MAX_BYTES["image"] // 3 * 4 + 4)
    with pytest.raises(MediaError, match="image must be at most 20 MiB"):
        src.decode_base64(text, "image")
    assert len(src.decode_base64("A" * (src.MAX_BYTES["image"] // 3 * 4), "image")) <= src.MAX_BYTES["image"]


def test_sniffing_names_every_container_of_the_tables() -> None:
    samples = {
        "png": PNG,
        "jpeg": JPEG,
        "mp4": video_bytes("mp4", 0.2),
        "avi": video_bytes("avi", 0.2),
        "wmv": video_bytes("asf", 0.2),
        "wav": audio_bytes("wav"),
        "flac": audio_bytes("flac"),
        "mp3": audio_bytes("mp3"),
    }
    assert {name: src.sniff(data) for name, data in samples.items()} == {name: name for name in samples}
    assert src.sniff(b"\xff\xfb\x90\x00" + b"\0" * 12) == "mp3"  # a bare MPEG audio frame, no ID3 tag
    assert src.sniff(b"GIF89a" + b"\0" * 10) is None
    assert src.sniff(b"\xff\xd8") is None


def test_every_form_of_an_image_loads() -> None:
    forms = [
        {"type": "image_url", "image_url": data_url("image/png", PNG)},
        {"type": "image_url", "image_url": {"url": data_url("image/jpeg", JPEG)}},
        {"type": "image_url", "image_url": b64(JPEG)},  # form 1: raw base64, treated as JPEG
        {"type": "image_url", "image_url": {"url": b64(PNG)}},  # raw base64 PNG: an allowed container too
    ]
    loaded = [load(part) for part in forms]
    assert [(m.kind, m.mime, m.origin) for m in loaded] == [
        ("image", "image/png", "data_url"),
        ("image", "image/jpeg", "data_url"),
        ("image", "image/jpeg", "base64"),
        ("image", "image/png", "base64"),
    ]
    assert all(m.image.mode == "RGB" and m.image.size == (32, 24) for m in loaded)
    assert loaded[0].digest == loaded[3].digest != loaded[1].digest  # same bytes, whatever the form
    assert loaded[0].size == len(PNG)


def test_digest_depends_on_content() -> None:
    a = load({"type": "image_url", "image_url": b64(image_bytes("PNG", color=(1, 2, 3)))})
    b = load({"type": "image_url", "image_url": b64(image_bytes("PNG", color=(3, 2, 1)))})
    c = load({"type": "image_url", "image_url": data_url("image/png", image_bytes("PNG", color=(1, 2, 3)))})
    assert a.digest != b.digest and a.digest == c.digest and len(a.digest) == 64


def test_video_and_audio_data_urls_and_input_audio_load() -> None:
    video = load({"type": "video_url", "video_url": data_url("video/mp4", video_bytes("mp4", 1.0))})
    assert (video.kind, video.mime, video.frames_sampled) == ("video", "video/mp4", 2)
    for mime, fmt in (("audio/x-wav", "wav"), ("audio/flac", "flac"), ("audio/mpeg", "mp3")):
        data = audio_bytes(fmt)
        by_url = load({"type": "audio_url", "audio_url": {"url": data_url(mime, data)}})
        by_input = load({"type": "input_audio", "input_audio": {"data": b64(data), "format": fmt}})
        for media in (by_url, by_input):
            assert (media.kind, media.mime, media.sample_rate) == ("audio", mime, 16000)
            assert media.duration == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize(
    ("part", "message"),
    [
        ({"type": "image_url", "image_url": "data:image/png;base64,@@@"}, "invalid data URL"),
        ({"type": "image_url", "image_url": "data:image/png;base64,AAA"}, "invalid base64 data"),
        ({"type": "image_url", "image_url": "@@@"}, "invalid base64 data"),
        ({"type": "image_url", "image_url": data_url("image/gif", b"GIF89a")}, "invalid data URL"),
        (
            {"type": "image_url", "image_url": "data:image/png;base64," + b64(JPEG)},
            "does not match its declared type image/png",
        ),
        ({"type": "image_url", "image_url": "data:image/jpeg;charset=x;base64," + b64(JPEG)}, "invalid data URL"),
        ({"type": "image_url", "image_url": "data:image/mp4;base64," + b64(PNG)}, "unsupported image type image/mp4"),
        (
            {"type": "video_url", "video_url": data_url("audio/mpeg", audio_bytes("mp3"))},
            "video_url parts cannot carry audio/mpeg",
        ),
        ({"type": "audio_url", "audio_url": data_url("image/png", PNG)}, "audio_url parts cannot carry image/png"),
        (
            {"type": "video_url", "video_url": data_url("video/x-msvideo", video_bytes("mp4", 0.2))},
            "declared type video/x-msvideo",
        ),
        (
            {"type": "image_url", "image_url": b64(b"GIF89a" + b"\0" * 30)},
            "image content is not a supported format (JPEG, PNG)",
        ),
        ({"type": "video_url", "video_url": b64(video_bytes("mp4", 0.2))}, "unsupported video source"),
        (
            {"type": "input_audio", "input_audio": {"data": b64(audio_bytes("wav")), "format": "mp3"}},
            "declared type audio/mpeg",
        ),
        (
            {"type": "input_audio", "input_audio": {"data": b64(audio_bytes("wav")), "format": "ogg"}},
            "format must be one of mp3",
        ),
        (
            {
                "type": "input_audio",
                "input_audio": {"data": data_url("audio/x-wav", audio_bytes("wav")), "format": "wav"},
            },
            "invalid base64",
        ),
        ({"type": "image_url", "image_url": b64(b"\xff\xd8\xff" + b"\0" * 40)}, "could not decode image data"),
        (
            {"type": "video_url", "video_url": data_url("video/mp4", b"\0\0\0\x18ftypisom" + b"\0" * 64)},
            "could not decode",
        ),
        ({"type": "audio_url", "audio_url": data_url("audio/flac", b"fLaC" + b"\0" * 64)}, "could not decode"),
    ],
)
def test_rejections(part: dict, message: str) -> None:
    assert message in refused(part)


def test_oversize_decoded_image_is_refused() -> None:
    big = b"\xff\xd8\xff" + b"\0" * (src.MAX_BYTES["image"] - 2)  # 20 MiB + 1 byte once decoded
    assert "image must be at most 20 MiB" in refused({"type": "image_url", "image_url": data_url("image/jpeg", big)})
    audio = b"RIFF\0\0\0\0WAVE" + b"\0" * (src.MAX_BYTES["audio"] - 11)
    assert "audio must be at most 20 MiB" in refused(
        {"type": "input_audio", "input_audio": {"data": b64(audio), "format": "wav"}}
    )


def test_video_limit_is_512_mib() -> None:
    src.check_size(src.MAX_BYTES["video"], "video")
    with pytest.raises(MediaError, match="video must be at most 512 MiB"):
        src.check_size(src.MAX_BYTES["video"] + 1, "video")


def test_inline_media_can_be_disabled() -> None:
    off = Settings(media_allow_data_urls=False).serving
    for part in (
        {"type": "image_url", "image_url": data_url("image/png", PNG)},
        {"type": "image_url", "image_url": b64(JPEG)},
        {"type": "input_audio", "input_audio": {"data": b64(audio_bytes("wav")), "format": "wav"}},
    ):
        assert refused(part, off) == "inline base64 media is disabled on this server"


def test_url_length_is_capped_for_urls_and_paths_only() -> None:
    long_path = "a" * 4093 + ".png"
    assert "at most 4096 characters" in refused({"type": "image_url", "image_url": long_path})
    assert "at most 4096 characters" in refused({"type": "image_url", "image_url": "https://e.com/" + long_path})
    assert len(data_url("image/png", PNG + b"\0" * 4096)) > 4096  # inline data is capped by bytes, not characters
    assert load({"type": "image_url", "image_url": data_url("image/png", PNG + b"\0" * 4096)}).kind == "image"


def test_count_and_total_limits() -> None:
    part = {"type": "image_url", "image_url": data_url("image/png", PNG)}
    assert len(asyncio.run(load_all([part] * MAX_ITEMS, SETTINGS))) == MAX_ITEMS
    with pytest.raises(MediaError, match="at most 20 media items are allowed per request, got 21"):
        asyncio.run(load_all([part] * (MAX_ITEMS + 1), SETTINGS))
    with pytest.raises(MediaError) as info:
        asyncio.run(load_all([part, {"type": "image_url", "image_url": "@@@"}], SETTINGS))
    assert info.value.index == 1


def test_total_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(src, "MAX_TOTAL_BYTES", 2 * len(PNG))
    part = {"type": "image_url", "image_url": data_url("image/png", PNG)}
    asyncio.run(load_all([part, part], SETTINGS))
    with pytest.raises(MediaError, match="in total") as info:
        asyncio.run(load_all([part, part, part], SETTINGS))
    assert info.value.index == 2


def test_media_package_imports_nothing_of_the_api() -> None:
    """engine/media may use engine.config (and engine.models for the cache root), never the protocol layer."""
    import ast

    for path in (ROOT / "engine" / "media").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            ours = [n for n in names if n.startswith("engine.") and not n.startswith("engine.media")]
            assert set(ours) <= {"engine.config", "engine.models"}, f"{path.name} imports {ours}"
