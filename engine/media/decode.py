"""Bytes -> what a processor takes: pillow for images, PyAV for video frames and for audio (spec §3, issue 5).

Blocking and CPU-bound: call these off the event loop. Every decoding failure is a MediaError with a generic
message; library exception text never reaches the client.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.media.errors import MediaError


@dataclass(frozen=True)
class DecodeOptions:
    """How media is decoded. Video is sampled at `video_fps` frames per second, evenly over the clip, and at
    most `video_max_frames` frames; audio becomes mono float32 at `audio_rate` Hz."""

    video_fps: float = 2.0
    video_max_frames: int = 32
    audio_rate: int = 16000
    max_pixels: int = 40_000_000  # per image: a decompression-bomb guard
    max_frame_pixels: int = 3840 * 2160  # per video frame (4K UHD): bounds the memory of the sampled frames
    max_audio_seconds: float = 1200.0


@dataclass
class Video:
    frames: np.ndarray  # (frames, height, width, 3) uint8 RGB
    times: list[float] = field(default_factory=list)  # seconds from the start, one per sampled frame
    duration: float = 0.0  # seconds
    source_fps: float = 0.0


def decode_image(data: bytes, options: DecodeOptions) -> Any:
    """JPEG/PNG bytes -> an RGB PIL image, EXIF orientation applied."""
    from PIL import Image, ImageOps

    # No warnings.catch_warnings() here: it swaps the process-wide filter list, which races with every other
    # thread. Image.open reads only the header; our own max_pixels check refuses a large image before load().
    try:
        opened = Image.open(io.BytesIO(data), formats=("JPEG", "PNG"))
        if opened.width * opened.height > options.max_pixels:
            raise MediaError(f"image must have at most {options.max_pixels} pixels")
        opened.load()
        return ImageOps.exif_transpose(opened).convert("RGB")
    except MediaError:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombWarning, Image.DecompressionBombError):
        raise MediaError("could not decode image data") from None


def _open(data: bytes) -> Any:
    import av

    try:
        return av.open(io.BytesIO(data), mode="r")
    except (av.FFmpegError, OSError, ValueError):
        raise MediaError("could not decode media data") from None


def _duration(data: bytes, container: Any, stream: Any) -> float:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / 1_000_000
    # No duration in the headers (some AVI/ASF files): demux the packets, which is cheap (no decoding).
    end = 0.0
    with _open(data) as probe:
        for packet in probe.demux(probe.streams.video[0]):
            if packet.pts is not None and packet.time_base is not None:
                end = max(end, float((packet.pts + (packet.duration or 0)) * packet.time_base))
    return end


def sample_times(duration: float, fps: float, max_frames: int, frame_count: int = 0) -> list[float]:
    """Evenly spaced sampling instants: `fps` per second of video, at least 1 and at most `max_frames` (and at
    most the number of frames, when the container knows it)."""
    n = max(1, min(max_frames, round(duration * fps)))
    if frame_count > 0:
        n = min(n, frame_count)
    return [i * duration / n for i in range(n)]


def decode_video(data: bytes, options: DecodeOptions) -> Video:
    """Decode frames in order and keep, for each sampling instant, the first frame at or after it."""
    import av

    with _open(data) as container:
        if not container.streams.video:
            raise MediaError("video has no video stream")
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        try:
            duration = _duration(data, container, stream)
            start = float(stream.start_time * stream.time_base) if stream.start_time and stream.time_base else 0.0
            rate = float(stream.average_rate or stream.guessed_rate or 25)
            targets = sample_times(duration, options.video_fps, options.video_max_frames, stream.frames)
            tolerance = 0.5 / rate
            frames: list[np.ndarray] = []
            times: list[float] = []
            index = 0
            for n, frame in enumerate(container.decode(stream)):
                t = float(frame.time) - start if frame.time is not None else n / rate
                if t + tolerance < targets[index]:
                    continue
                if frame.width * frame.height > options.max_frame_pixels:
                    raise MediaError(f"video frames must have at most {options.max_frame_pixels} pixels")
                frames.append(frame.to_ndarray(format="rgb24"))
                times.append(t)
                while index < len(targets) and targets[index] <= t + tolerance:
                    index += 1  # one frame covers every instant up to its own time: no duplicates
                if index == len(targets):
                    break
        except (av.FFmpegError, OSError, ValueError, ZeroDivisionError):
            raise MediaError("could not decode video data") from None
    if not frames:
        raise MediaError("video has no decodable frames")
    return Video(np.stack(frames), times, duration or times[-1], rate)


def decode_audio(data: bytes, options: DecodeOptions) -> tuple[np.ndarray, float]:
    """MP3/WAV/FLAC bytes -> (mono float32 samples at `options.audio_rate`, duration in seconds)."""
    import av

    limit = int(options.max_audio_seconds * options.audio_rate)
    chunks: list[np.ndarray] = []
    total = 0
    with _open(data) as container:
        if not container.streams.audio:
            raise MediaError("audio has no audio stream")
        # Resample in the source layout and average the channels here: swresample's mono downmix adds them with
        # a -3 dB gain, which can exceed [-1, 1]; speech models expect the plain mean (as librosa does).
        resampler = av.AudioResampler(format="fltp", rate=options.audio_rate)
        try:
            for frame in container.decode(container.streams.audio[0]):
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().mean(axis=0))
                    total += chunks[-1].size
                if total > limit:
                    raise MediaError(f"audio must be at most {options.max_audio_seconds:g} seconds long")
            chunks.extend(out.to_ndarray().mean(axis=0) for out in resampler.resample(None))
        except (av.FFmpegError, OSError, ValueError):
            raise MediaError("could not decode audio data") from None
    samples = np.concatenate(chunks).astype(np.float32, copy=False) if chunks else np.zeros(0, np.float32)
    if samples.size == 0:
        raise MediaError("audio has no decodable samples")
    return samples, samples.size / options.audio_rate
