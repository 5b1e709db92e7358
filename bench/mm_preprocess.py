"""Preprocessing time per media type for the tiny multimodal demo models (demo_models/tiny_mm.py): decode
(engine.media) and then model inputs (engine.multimodal.build_inputs: image processor, our video patchify,
Whisper features), with the media tokens each item costs and one prefill forward of the tiny model over the
expanded prompt.

    .venv/bin/python bench/mm_preprocess.py [--repeat 3]

Media is generated here (the generators of bench/media_decode.py); the tiny models are built on first use.
The tiny VL processor caps an image at 256 merged tokens (real Qwen2-VL: 1280), so a 1080p photo is resized
down to that budget; a video gets at most 4 images' worth of tokens over all its frames.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import engine  # noqa: F401
from bench.media_decode import clip, photo
from demo_models.tiny_mm import build
from engine.config import Settings
from engine.core.model_runner import KVCache, Segment, make_runner
from engine.media import load_media
from engine.multimodal import build_inputs, load_multimodal
from tests.media_samples import audio_bytes, data_url, tone

PLACEHOLDER = {
    "image": "<|vision_start|><|image_pad|><|vision_end|>",
    "video": "<|vision_start|><|video_pad|><|vision_end|>",
    "audio": "<|audio_bos|><|AUDIO|><|audio_eos|>",
}


def measure(name: str, part: dict, kind: str, loaded: tuple, repeat: int) -> None:
    model, tok, procs = loaded
    settings = Settings(max_request_length_mb=100)
    ids = tok(
        f"<|im_start|>user\n{PLACEHOLDER[kind]}Describe it.<|im_end|>\n<|im_start|>assistant\n",
        add_special_tokens=False,
    )["input_ids"]
    decode, prep, prefill = [], [], []
    runner = make_runner(model, "cpu")
    for _ in range(repeat):
        media = asyncio.run(load_media(part, settings))
        decode.append(media.fetch_seconds + media.decode_seconds)
        start = time.perf_counter()
        inputs = build_inputs(ids, [media], procs)
        prep.append(time.perf_counter() - start)
        start = time.perf_counter()
        with torch.inference_mode():
            runner.forward([Segment(KVCache(), inputs.ids, mm=inputs.tensors)])
        prefill.append(time.perf_counter() - start)
    ms = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    extra = f", {media.frames_sampled} frames" if media.frames_sampled else ""
    print(
        f"{name:36s} decode {ms(decode):7.1f} ms  inputs {ms(prep):7.1f} ms  {inputs.tokens[0]:5d} tokens"
        f"  prefill {ms(prefill):7.1f} ms{extra}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    vl = load_multimodal(build("vl"), torch.float32)
    image = photo((1920, 1080), "JPEG")
    measure(
        "image 1920x1080 JPEG",
        {"type": "image_url", "image_url": data_url("image/jpeg", image)},
        "image",
        vl,
        args.repeat,
    )
    video = clip(10.0, 30, (640, 360))
    measure(
        "video 10 s 640x360 h264 @2fps",
        {"type": "video_url", "video_url": data_url("video/mp4", video)},
        "video",
        vl,
        args.repeat,
    )
    audio = load_multimodal(build("audio"), torch.float32)
    wav = audio_bytes("wav", tone(30.0, 44100, 440.0, 2), 44100)
    measure(
        "audio 30 s 44.1 kHz stereo WAV",
        {"type": "audio_url", "audio_url": data_url("audio/x-wav", wav)},
        "audio",
        audio,
        args.repeat,
    )


if __name__ == "__main__":
    main()
