"""Qwen2-VL video inputs from our own sampled frames, without transformers' video processors (torchvision).

Each frame is resized, rescaled and normalised by the model's own image processor (PIL backend) to one size
chosen with Qwen2-VL's `smart_resize`; frames are stacked, the clip is padded to a multiple of
`temporal_patch_size` by repeating its last frame, and cut into the flat patch layout the vision tower takes:
(grid_t * grid_h * grid_w, channels * temporal_patch_size * patch_size**2), ordered by merge window like images.
A clip made of one frame repeated `temporal_patch_size` times gives exactly the image processor's patches.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# A whole video costs at most as many vision tokens as this many images at the processor's largest size.
VIDEO_IMAGE_BUDGET = 4


def frame_size(height: int, width: int, frames: int, processor: Any) -> tuple[int, int]:
    """Resized (height, width) for every frame: the image processor's pixel bounds, shared over the clip."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    factor = processor.patch_size * processor.merge_size
    min_pixels, max_pixels = processor.size["shortest_edge"], processor.size["longest_edge"]
    groups = -(-frames // processor.temporal_patch_size)
    per_frame = max(min_pixels, min(max_pixels, VIDEO_IMAGE_BUDGET * max_pixels // groups))
    return smart_resize(height, width, factor=factor, min_pixels=min_pixels, max_pixels=per_frame)


def _frame(frame: np.ndarray, size: tuple[int, int], processor: Any) -> np.ndarray:
    """One (H, W, 3) uint8 frame -> (3, h, w) float32, through the processor's own resize / rescale / normalise."""
    from transformers.image_processing_backends import PilBackend
    from transformers.image_utils import SizeDict

    image = np.moveaxis(frame, -1, 0)  # channel-first, as the processor holds images
    if processor.do_resize:  # the backend's resize: Qwen2-VL's override would re-run smart_resize per frame
        image = PilBackend.resize(processor, image, SizeDict(height=size[0], width=size[1]), processor.resample)
    if processor.do_rescale:
        image = processor.rescale(image, processor.rescale_factor)
    if processor.do_normalize:
        image = processor.normalize(image, processor.image_mean, processor.image_std)
    return np.asarray(image, dtype=np.float32)


def video_patches(frames: np.ndarray, processor: Any) -> tuple[np.ndarray, tuple[int, int, int]]:
    """(T, H, W, 3) uint8 frames -> (patches, (grid_t, grid_h, grid_w)) as Qwen2-VL's vision tower expects."""
    t, height, width, _ = frames.shape
    size = frame_size(height, width, t, processor)
    clip = np.stack([_frame(f, size, processor) for f in frames])  # (T, C, h, w)
    tps, ps, ms = processor.temporal_patch_size, processor.patch_size, processor.merge_size
    if len(clip) % tps:
        clip = np.concatenate([clip, np.repeat(clip[-1:], tps - len(clip) % tps, axis=0)])
    channels = clip.shape[1]
    grid_t, grid_h, grid_w = len(clip) // tps, size[0] // ps, size[1] // ps
    patches = clip.reshape(grid_t, tps, channels, grid_h // ms, ms, ps, grid_w // ms, ms, ps)
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    flat = patches.reshape(grid_t * grid_h * grid_w, channels * tps * ps * ps)
    return np.ascontiguousarray(flat), (grid_t, grid_h, grid_w)
