"""Decode and preprocessing time per media type through `engine.media.load_media` (data URL in, decoded out),
plus Whisper tiny.en transcription. Media is generated here, so nothing needs downloading but the Whisper wheel.

    .venv/bin/python bench/media_decode.py [--repeat 5] [--no-whisper]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import statistics
import sys
import time
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import engine  # noqa: F401
from engine.config import Settings
from engine.media import load_media
from tests.media_samples import audio_bytes, data_url, tone


def photo(size: tuple[int, int], fmt: str) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(0)
    noise = rng.integers(0, 64, (size[1] // 8, size[0] // 8, 3), dtype=np.uint8)
    gradient = np.linspace(0, 190, size[0], dtype=np.uint8)[None, :, None]
    pixels = np.kron(noise, np.ones((8, 8, 1), np.uint8)) + gradient
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt, quality=90)
    return buf.getvalue()


def clip(seconds: float, fps: int, size: tuple[int, int]) -> bytes:
    import av

    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        stream.codec_context.time_base = Fraction(1, fps)
        x = np.linspace(0, 4 * np.pi, size[0])[None, :]
        for i in range(round(seconds * fps)):
            level = (127 + 100 * np.sin(x + i / fps)).astype(np.uint8)
            frame = av.VideoFrame.from_ndarray(np.repeat(np.repeat(level, size[1], 0)[..., None], 3, 2), format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()


def measure(name: str, part: dict, repeat: int) -> None:
    settings = Settings(max_request_length_mb=100)
    times = []
    for _ in range(repeat):
        media = asyncio.run(load_media(part, settings))
        times.append(media.fetch_seconds + media.decode_seconds)
    extra = f", {media.frames_sampled} frames" if media.frames_sampled else ""
    extra += f", {media.duration:.1f} s" if media.duration else ""
    print(f"{name:34s} {media.size / 1e6:6.2f} MB  median {statistics.median(times) * 1000:7.1f} ms{extra}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-whisper", action="store_true")
    args = parser.parse_args()
    for fmt, mime in (("JPEG", "image/jpeg"), ("PNG", "image/png")):
        data = photo((1920, 1080), fmt)
        measure(f"image 1920x1080 {fmt}", {"type": "image_url", "image_url": data_url(mime, data)}, args.repeat)
    video = clip(10.0, 30, (640, 360))
    part = {"type": "video_url", "video_url": data_url("video/mp4", video)}
    measure("video 10 s 640x360 30 fps h264 @2fps", part, args.repeat)
    for fmt, mime in (("wav", "audio/x-wav"), ("flac", "audio/flac"), ("mp3", "audio/mpeg")):
        data = audio_bytes(fmt, tone(30.0, 44100, 440.0, 2), 44100)
        measure(
            f"audio 30 s 44.1 kHz stereo {fmt}", {"type": "audio_url", "audio_url": data_url(mime, data)}, args.repeat
        )
    if args.no_whisper:
        return
    from engine.media import Transcriber

    start = time.perf_counter()
    transcriber = Transcriber.load()
    print(f"whisper tiny.en load (converted cache)   {time.perf_counter() - start:7.2f} s")
    speech = Path(__file__).resolve().parents[1] / "tests" / "data" / "speech.flac"  # 4 s of espeak-ng
    part = {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(speech.read_bytes()).decode(), "format": "flac"},
    }
    once = asyncio.run(load_media(part, Settings())).audio
    for repeats in (1, 7):  # one sentence, then seven in a row (28 s: still one 30-second window)
        audio = np.concatenate([once] * repeats)
        transcriber.transcribe(audio)
        runs = []
        for _ in range(max(1, args.repeat // 2)):
            start = time.perf_counter()
            text = transcriber.transcribe(audio)
            runs.append(time.perf_counter() - start)
        seconds = audio.size / 16000
        print(
            f"whisper transcribe {seconds:4.1f} s of speech       median {statistics.median(runs):7.2f} s, {len(text.split())} words"
        )


if __name__ == "__main__":
    main()
