"""Small media files made in the test process: PNG/JPEG with pillow, MP4/AVI/WMV and WAV/FLAC/MP3 with PyAV."""

from __future__ import annotations

import base64
import io
from fractions import Fraction

import numpy as np


def image_bytes(
    fmt: str = "PNG", size: tuple[int, int] = (32, 24), color: tuple[int, int, int] = (200, 30, 30)
) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format=fmt)
    return buf.getvalue()


def video_bytes(container: str = "mp4", seconds: float = 2.0, fps: int = 10, size: tuple[int, int] = (64, 48)) -> bytes:
    """A clip whose frame i is filled with gray level i (so a test can tell which frames were sampled)."""
    import av

    codec = {"mp4": "mpeg4", "avi": "mpeg4", "asf": "wmv2"}[container]
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=container) as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        stream.codec_context.time_base = Fraction(1, fps)
        stream.options = {"qscale": "2"} if codec != "wmv2" else {}
        for i in range(round(seconds * fps)):
            level = min(255, i * 4)
            frame = av.VideoFrame.from_ndarray(np.full((size[1], size[0], 3), level, np.uint8), format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()


def tone(seconds: float = 1.0, rate: int = 44100, freq: float = 440.0, channels: int = 2) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    wave = (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)
    return np.repeat(wave[None, :], channels, axis=0)


def audio_bytes(fmt: str = "wav", samples: np.ndarray | None = None, rate: int = 44100) -> bytes:
    """`samples` (channels, n) float32 in [-1, 1] encoded as WAV (s16), FLAC (s16) or MP3."""
    import av

    samples = tone(rate=rate) if samples is None else samples
    layout = "stereo" if samples.shape[0] == 2 else "mono"
    codec, sample_fmt = {"wav": ("pcm_s16le", "s16"), "flac": ("flac", "s16"), "mp3": ("libmp3lame", "fltp")}[fmt]
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=fmt) as out:
        stream = out.add_stream(codec, rate=rate, layout=layout)
        stream.format = sample_fmt
        data = (samples * 32767).astype(np.int16).T.reshape(1, -1) if sample_fmt == "s16" else samples
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(data), format=sample_fmt, layout=layout)
        frame.sample_rate = rate
        frame.pts = 0
        out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{b64(data)}"
