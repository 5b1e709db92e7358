"""Decoded media + templated prompt ids -> the model's inputs: placeholders expanded, tensors for the prefill.

The chat template writes one placeholder per media part (`<|image_pad|>`, `<|video_pad|>`, `<|AUDIO|>`); each is
expanded here to as many copies as the model has embeddings for that item, so `len(ids)` is the prompt as the
model sees it (what `usage.prompt_tokens` counts). The counts follow the processors: Qwen2-VL's grid / merge²
per image or video, Qwen2-Audio's two halvings of the Whisper feature length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from engine.multimodal.loading import MediaProcessors
from engine.multimodal.video import video_patches


class MediaInputError(ValueError):
    """The prompt and the media do not fit together (a template that drops a placeholder); safe to show."""


@dataclass
class MediaInputs:
    ids: list[int]  # prompt ids with every placeholder expanded
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # forward kwargs for the prefill
    tokens: list[int] = field(default_factory=list)  # model tokens per media item, in order


def audio_tokens(feature_length: int) -> int:
    """Qwen2-Audio: the encoder's stride-2 conv, then its stride-2 pooling."""
    return (((feature_length - 1) // 2 + 1) - 2) // 2 + 1


def _images(images: list[Any], procs: MediaProcessors) -> tuple[dict[str, torch.Tensor], list[int]]:
    out = procs.image(images=images, return_tensors="pt")
    grid = out["image_grid_thw"]
    return {"pixel_values": out["pixel_values"], "image_grid_thw": grid}, _merged(grid, procs)


def _videos(videos: list[Any], procs: MediaProcessors) -> tuple[dict[str, torch.Tensor], list[int]]:
    patches, grids, seconds = [], [], []
    for video in videos:
        flat, grid = video_patches(video.frames, procs.image)
        patches.append(flat)
        grids.append(grid)
        times = video.times
        step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 1.0
        seconds.append(step * procs.image.temporal_patch_size)  # seconds per temporal patch (Qwen2.5-VL)
    grid_thw = torch.tensor(grids, dtype=torch.long)
    tensors = {"pixel_values_videos": torch.from_numpy(np.concatenate(patches)), "video_grid_thw": grid_thw}
    if procs.model_type == "qwen2_5_vl":
        tensors["second_per_grid_ts"] = torch.tensor(seconds)
    return tensors, _merged(grid_thw, procs)


def _merged(grid: torch.Tensor, procs: MediaProcessors) -> list[int]:
    return [int(n) for n in grid.prod(-1) // procs.image.merge_size**2]


def _audios(audios: list[np.ndarray], procs: MediaProcessors) -> tuple[dict[str, torch.Tensor], list[int]]:
    fe = procs.audio
    out = fe(
        audios, sampling_rate=fe.sampling_rate, return_attention_mask=True, padding="max_length", return_tensors="pt"
    )
    mask = out["attention_mask"]
    return {"input_features": out["input_features"], "feature_attention_mask": mask}, [
        audio_tokens(int(n)) for n in mask.sum(-1)
    ]


def build_inputs(ids: list[int], media: list[Any], procs: MediaProcessors) -> MediaInputs:
    """`media`: `LoadedMedia` items in the order of their parts in the messages (so of the placeholders)."""
    by_kind: dict[str, list[Any]] = {"image": [], "video": [], "audio": []}
    for item in media:
        by_kind[item.kind].append(item)
    tensors: dict[str, torch.Tensor] = {}
    counts: dict[str, list[int]] = {}
    if by_kind["image"]:
        t, counts["image"] = _images([m.image for m in by_kind["image"]], procs)
        tensors.update(t)
    if by_kind["video"]:
        t, counts["video"] = _videos([m.video for m in by_kind["video"]], procs)
        tensors.update(t)
    if by_kind["audio"]:
        t, counts["audio"] = _audios([m.audio for m in by_kind["audio"]], procs)
        tensors.update(t)
    placeholder = {procs.token_ids[k]: k for k in by_kind if k in procs.token_ids}
    expanded: list[int] = []
    seen = {k: 0 for k in by_kind}
    for token in ids:
        kind = placeholder.get(token)
        if kind is None or not counts.get(kind):
            expanded.append(token)
            continue
        if seen[kind] >= len(counts[kind]):
            raise MediaInputError(f"the chat template wrote more {kind} placeholders than the request has {kind}s")
        expanded.extend([token] * counts[kind][seen[kind]])
        seen[kind] += 1
    for kind, n in counts.items():
        if seen[kind] != len(n):
            raise MediaInputError(f"the chat template placed {seen[kind]} of the request's {len(n)} {kind} parts")
    tokens = []
    at = {k: 0 for k in by_kind}
    for item in media:
        tokens.append(counts[item.kind][at[item.kind]])
        at[item.kind] += 1
    return MediaInputs(expanded, tensors, tokens)
