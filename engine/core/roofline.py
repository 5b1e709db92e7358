"""Each step's floor (issue 19, point 6): the bytes a step must read over the memory bandwidth of this machine.

A decode step reads every weight matrix once, whatever its batch, and the keys and values its rows attend over; it
cannot take less time than those bytes over the memory bandwidth. `measure_bandwidth` times a copy of a buffer
much larger than any cache (STREAM's "copy": read + write bytes over the best of a few rounds) once per device
and process, on the engine thread before its loop (Engine.start waits for it, so nothing else of the process
competes for the cores): about 0.2-0.3 s on a 2-core CPU, a few ms on an accelerator. Another process busy on the
same cores makes it read low, and the steps' share of the limit high; `pct` over 100 says exactly that.
`weight_bytes` and `kv_bytes_per_token` come from the runner's own tensors and the model's config.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from engine import device as devices
from engine.core.kv import PagePool
from engine.core.window_kv import WindowPages

log = logging.getLogger(__name__)

CPU_BUFFER_MB = 128  # per buffer (source and destination): well past the last-level cache of any CPU
DEVICE_BUFFER_MB = 512
ROUNDS = 5  # timed copies after one untimed (which faults the pages in); the best counts

_measured: dict[str, float] = {}  # device -> bytes/s, once per process
_lock = threading.Lock()


@dataclass(frozen=True)
class Roofline:
    bandwidth: float  # bytes per second, measured
    weight_bytes: int  # what one step reads of the weights
    kv_bytes_per_token: int  # keys and values of one token over every layer
    window: int = 0  # sliding-window layers (Gemma 3) read only the last `window` positions of a context
    window_bytes_per_token: int = 0  # their share of kv_bytes_per_token

    def kv_bytes(self, lengths: list[int]) -> int:
        """The keys and values a step's rows read over contexts of these lengths."""
        full = self.kv_bytes_per_token - self.window_bytes_per_token
        return sum(n * full + min(n, self.window or n) * self.window_bytes_per_token for n in lengths)

    def floor_ms(self, lengths: list[int]) -> float:
        """The least time a step can take that reads every weight and the KV of contexts of these lengths."""
        return (self.weight_bytes + self.kv_bytes(lengths)) / self.bandwidth * 1000

    def as_json(self) -> dict[str, Any]:
        return {
            "bandwidth_gbs": round(self.bandwidth / 1e9, 2),
            "weight_bytes": self.weight_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
        }


def measure_bandwidth(device: str = "cpu") -> float:
    """Bytes per second of a large copy on `device` (read + write counted), best of ROUNDS; measured once per
    device and process (a second engine of the process reuses it)."""
    with _lock:
        if device not in _measured:
            _measured[device] = _copy_bandwidth(device)
            log.info("memory bandwidth on %s: %.1f GB/s (copy)", device, _measured[device] / 1e9)
        return _measured[device]


def _copy_bandwidth(device: str) -> float:
    cpu = device == "cpu"
    n = (CPU_BUFFER_MB if cpu else DEVICE_BUFFER_MB) * (1 << 20) // 4
    with torch.inference_mode():
        src = torch.ones(n, dtype=torch.float32, device=device)
        dst = torch.empty_like(src)
        dst.copy_(src)  # faults every page in: the timed rounds measure the memory, not the allocator
        devices.synchronize(device)
        best = float("inf")
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            dst.copy_(src)
            devices.synchronize(device)
            best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * src.element_size() / best


def weight_bytes(runner: Any) -> int:
    """The bytes a step reads of the model's weights: every parameter storage once (views of the fused matrices
    and a tied head count once), less an untied input embedding, of which a step reads only its tokens' rows."""
    model = getattr(runner, "model", None)
    if model is None:
        return 0
    seen: dict[int, int] = {}
    for p in model.parameters():
        s = p.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    if embed is not None and (
        head is None or embed.weight.untyped_storage().data_ptr() != head.weight.untyped_storage().data_ptr()
    ):
        seen.pop(embed.weight.untyped_storage().data_ptr(), None)
    return sum(seen.values())


def window_bytes_per_token(runner: Any) -> tuple[int, int]:
    """A DecoderRunner's sliding window and its sliding layers' share of one token's keys and values."""
    window = getattr(runner, "window", None)
    return (window.window, window.pool.bytes_per_token) if isinstance(window, WindowPages) else (0, 0)


def kv_bytes_per_token(runner: Any) -> int:
    """Keys and values of one token over every layer: layers x 2 x kv_heads x head_dim x the cache's dtype size."""
    pool = getattr(runner, "pool", None)
    if isinstance(pool, PagePool):  # DecoderRunner: its own page pools' layout
        return pool.bytes_per_token + window_bytes_per_token(runner)[1]
    model = getattr(runner, "model", None)
    if model is None:
        return 0
    cfg = getattr(model.config, "text_config", None) or model.config
    layers = getattr(cfg, "num_hidden_layers", 0)
    heads = getattr(cfg, "num_attention_heads", 0) or 1
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or getattr(cfg, "hidden_size", 0) // heads
    size = torch.empty((), dtype=getattr(runner, "dtype", torch.float32)).element_size()
    return int(layers * 2 * kv * head_dim * size)


def measure(runner: Any, device: str) -> Roofline:
    """The engine's roofline: the device's bandwidth and what the runner's model reads per step and per token."""
    return Roofline(
        measure_bandwidth(device), weight_bytes(runner), kv_bytes_per_token(runner), *window_bytes_per_token(runner)
    )
