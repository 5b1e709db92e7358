"""Decoding: pillow images (EXIF, RGB, bomb guard), PyAV video frame sampling, PyAV audio resampling."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from engine.media import DecodeOptions, MediaError
from engine.media.decode import decode_audio, decode_image, decode_video, sample_times
from tests.media_samples import audio_bytes, tone, video_bytes

OPTIONS = DecodeOptions()


def encode(image: Image.Image, fmt: str = "PNG", **kw: object) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **kw)
    return buf.getvalue()


def test_image_becomes_rgb_with_exif_orientation_applied() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    jpeg = encode(Image.new("RGB", (40, 20), (10, 200, 10)), "JPEG", exif=exif)
    assert decode_image(jpeg, OPTIONS).size == (20, 40)
    for mode in ("RGBA", "L", "P", "I;16"):
        image = decode_image(encode(Image.new(mode, (8, 6))), OPTIONS)
        assert (image.mode, image.size) == ("RGB", (8, 6))


def test_image_pixel_cap_guards_against_decompression_bombs() -> None:
    small = encode(Image.new("1", (1000, 1000)))
    with pytest.raises(MediaError, match="at most 999999 pixels"):
        decode_image(small, DecodeOptions(max_pixels=999_999))
    bomb = encode(Image.new("1", (10_000, 10_000)))  # 100 Mpx in a few kB: past pillow's own warning level
    assert len(bomb) < 100_000
    with pytest.raises(MediaError, match="could not decode image data|at most"):
        decode_image(bomb, OPTIONS)


def test_truncated_and_foreign_images_are_refused() -> None:
    png = encode(Image.new("RGB", (64, 64)))
    with pytest.raises(MediaError, match="could not decode image data"):
        decode_image(png[: len(png) // 2], OPTIONS)
    with pytest.raises(MediaError, match="could not decode image data"):
        decode_image(encode(Image.new("RGB", (4, 4)), "GIF"), OPTIONS)  # only JPEG and PNG are opened


@pytest.mark.parametrize(
    ("duration", "fps", "max_frames", "count", "expected"),
    [(3.0, 2.0, 32, 0, 6), (3.0, 2.0, 4, 0, 4), (0.1, 2.0, 32, 0, 1), (3.0, 20.0, 100, 30, 30), (60.0, 1.0, 8, 0, 8)],
)
def test_sample_times(duration: float, fps: float, max_frames: int, count: int, expected: int) -> None:
    times = sample_times(duration, fps, max_frames, count)
    assert len(times) == expected and times[0] == 0.0 and times[-1] < duration
    assert np.allclose(np.diff(times), duration / expected)


@pytest.mark.parametrize("container", ["mp4", "avi", "asf"])
def test_video_frames_are_sampled_by_fps_and_capped(container: str) -> None:
    clip = video_bytes(container, seconds=3.0, fps=10, size=(64, 48))  # frame i has gray level 4 * i
    video = decode_video(clip, DecodeOptions(video_fps=2.0, video_max_frames=32))
    assert video.frames.shape == (6, 48, 64, 3) and video.frames.dtype == np.uint8
    assert video.times == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.5])
    assert video.duration == pytest.approx(3.0) and video.source_fps == pytest.approx(10.0)
    levels = video.frames.reshape(6, -1).mean(axis=1)
    assert levels == pytest.approx([0, 20, 40, 60, 80, 100], abs=4)  # frames 0, 5, 10, ... were the ones kept
    capped = decode_video(clip, DecodeOptions(video_fps=2.0, video_max_frames=4))
    assert len(capped.frames) == 4 and capped.times == pytest.approx([0.0, 0.75, 1.5, 2.25], abs=0.06)
    every = decode_video(clip, DecodeOptions(video_fps=30.0, video_max_frames=1000))
    assert len(every.frames) == 30  # never more frames than the clip has, and no duplicates
    one = decode_video(clip, DecodeOptions(video_fps=0.1, video_max_frames=32))
    assert len(one.frames) == 1


def test_video_frame_pixel_cap_and_garbage() -> None:
    clip = video_bytes("mp4", seconds=0.5, fps=10, size=(64, 48))
    with pytest.raises(MediaError, match="video frames must have at most"):
        decode_video(clip, DecodeOptions(max_frame_pixels=64 * 48 - 1))
    with pytest.raises(MediaError, match="could not decode|no video stream"):  # the mp4 index is at the end
        decode_video(clip[: len(clip) // 3], OPTIONS)
    with pytest.raises(MediaError, match="could not decode"):
        decode_video(b"\0\0\0\x18ftypisom" + b"\xff" * 200, OPTIONS)
    with pytest.raises(MediaError, match="no video stream"):
        decode_video(audio_bytes("wav"), OPTIONS)


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3"])
@pytest.mark.parametrize(("rate", "channels"), [(44100, 2), (22050, 1), (8000, 1), (48000, 2)])
def test_audio_is_resampled_to_mono_float32(fmt: str, rate: int, channels: int) -> None:
    samples, duration = decode_audio(audio_bytes(fmt, tone(1.5, rate, 440.0, channels), rate), OPTIONS)
    assert samples.dtype == np.float32 and samples.ndim == 1
    assert duration == pytest.approx(1.5, abs=0.01) and samples.size == pytest.approx(24000, abs=160)
    spectrum = np.abs(np.fft.rfft(samples))
    assert np.argmax(spectrum) * 16000 / samples.size == pytest.approx(440.0, abs=2)  # same pitch at 16 kHz
    assert np.abs(samples).max() == pytest.approx(0.5, abs=0.05)  # channels averaged, not summed


def test_audio_target_rate_and_length_cap() -> None:
    wav = audio_bytes("wav", tone(2.0, 16000, 1000.0, 1), 16000)
    samples, duration = decode_audio(wav, DecodeOptions(audio_rate=8000))
    assert samples.size == 16000 and duration == pytest.approx(2.0)
    with pytest.raises(MediaError, match="at most 1 seconds long"):
        decode_audio(wav, DecodeOptions(max_audio_seconds=1.0))
    with pytest.raises(MediaError, match="no audio stream"):
        decode_audio(video_bytes("mp4", 0.5), OPTIONS)
