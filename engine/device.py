"""The only module that knows about npu / cuda / mps / cpu and torch_npu.

`prepare_torch_import()` must run before torch is first imported: torch_npu registers itself as a torch device
backend and, installed on a host without Ascend drivers, makes `import torch` fail. When the drivers are absent
we switch that autoload off and later report the NPU as unavailable.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_ASCEND_MARKERS = ("/usr/local/Ascend", "/dev/davinci0")


def ascend_drivers_present() -> bool:
    return any(Path(p).exists() for p in _ASCEND_MARKERS) or bool(os.environ.get("ASCEND_HOME_PATH"))


def prepare_torch_import() -> None:
    """Keep a present-but-unusable torch_npu from breaking `import torch`."""
    if importlib.util.find_spec("torch_npu") is not None and not ascend_drivers_present():
        os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")


def _npu_available() -> tuple[bool, str]:
    if importlib.util.find_spec("torch_npu") is None:
        return False, "torch_npu is not installed"
    if not ascend_drivers_present():
        return False, "torch_npu is installed but no Ascend driver was found"
    try:
        import torch
        import torch_npu  # noqa: F401  (registers torch.npu)

        if torch.npu.is_available():  # type: ignore[attr-defined]  # registered by torch_npu
            return True, ""
        return False, "torch_npu found no usable NPU"
    except Exception as exc:  # torch_npu raises many kinds of errors on a broken install; any means "unusable"
        return False, f"torch_npu failed to initialise ({type(exc).__name__})"


@dataclass(frozen=True)
class Placement:
    device: str  # torch device string: "npu:0", "cuda:0", "mps", "cpu"
    dtype_name: str  # "bf16" | "fp16" | "fp32"

    @property
    def kind(self) -> str:
        return self.device.split(":")[0]

    @property
    def dtype(self):
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[self.dtype_name]


def resolve_device(requested: str = "auto") -> str:
    """npu > cuda > mps > cpu. An explicit request for an unavailable device is an error, except `npu` with
    torch_npu installed and no usable NPU (an Ascend image on a host without its driver): that starts on the next
    device, with a warning, as `auto` does."""
    import torch

    checks = {
        "npu": _npu_available,
        "cuda": lambda: (torch.cuda.is_available(), "CUDA is not available"),
        "mps": lambda: (torch.backends.mps.is_available(), "MPS is not available"),
        "cpu": lambda: (True, ""),
    }
    if requested != "auto":
        ok, why = checks[requested]()
        if ok:
            return {"npu": "npu:0", "cuda": "cuda:0"}.get(requested, requested)
        if requested != "npu" or importlib.util.find_spec("torch_npu") is None:
            raise RuntimeError(f"--device {requested}: {why}")
        log.warning("--device npu: %s; starting on the next device", why)
    for kind in ("npu", "cuda", "mps"):
        ok, why = checks[kind]()
        if ok:
            return {"npu": "npu:0", "cuda": "cuda:0"}.get(kind, kind)
        if kind == "npu" and importlib.util.find_spec("torch_npu") is not None:
            log.warning("NPU skipped: %s; trying the next device", why)
    return "cpu"


def resolve_dtype(requested: str, device: str) -> str:
    """auto: bf16 on accelerators that support it, fp16 on older GPUs, fp32 on CPU.

    CPU: with the kernels (engine/core/cpu_kernels.py) fp32 keeps a bf16 checkpoint's matrices in bf16 (half
    the bytes a decode step streams) and does all the math in float32, the same answers at any batch size.
    `--dtype bf16` there keeps the float32 activations and fused steps but rounds the inputs of projections of
    many rows to bf16 for torch's bf16 matmul: on a CPU with AVX512_BF16, 1.4x aggregate tokens/s at 32 streams
    on SmolLM2 (engine/core/projection.py), at the cost of answers that depend a little on the batch. Without
    the kernels bf16 runs torch's bf16 ops, which on a CPU without native bf16 convert and run 1.6-3x slower.
    """
    if requested != "auto":
        return requested
    kind = device.split(":")[0]
    if kind == "cuda":
        import torch

        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if kind == "npu":
        return "bf16"
    if kind == "mps":
        return "fp16"
    return "fp32"


def placement(device: str = "auto", dtype: str = "auto") -> Placement:
    dev = resolve_device(device)
    return Placement(dev, resolve_dtype(dtype, dev))


def configure_threads(threads: int = 0) -> int:
    """Size torch's intra-op pool on purpose: one thread per core, one inter-op thread (the engine thread
    is the only one running kernels)."""
    import torch

    n = threads or max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    torch.set_num_threads(n)
    # Fails once torch has run parallel work in this process (a second engine in tests): keep the first value.
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)
    return n


def synchronize(device: str) -> None:
    """Wait for queued kernels so that timings measure real work."""
    import torch

    kind = device.split(":")[0]
    if kind == "cuda":
        torch.cuda.synchronize()
    elif kind == "npu":
        torch.npu.synchronize()  # type: ignore[attr-defined]
    elif kind == "mps":
        torch.mps.synchronize()


def is_out_of_memory(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def empty_cache(device: str) -> None:
    import torch

    kind = device.split(":")[0]
    if kind == "cuda":
        torch.cuda.empty_cache()
    elif kind == "npu":
        torch.npu.empty_cache()  # type: ignore[attr-defined]


def device_name(device: str) -> str:
    """The accelerator's product name ("NVIDIA H200", "Ascend910B"), or "" for a CPU or MPS."""
    import torch

    kind = device.split(":")[0]
    if kind == "cuda":
        return str(torch.cuda.get_device_name(device))
    if kind == "npu":
        return str(torch.npu.get_device_name(device))  # type: ignore[attr-defined]  # registered by torch_npu
    return ""


class _DeviceGraphs:
    """engine/core/graphs.py's GraphApi on CUDA (torch.cuda.CUDAGraph) or an Ascend NPU (torch_npu's NPUGraph, as
    torch.npu.NPUGraph): warm-up runs on a side stream, then the capture; every graph of a runner shares one
    memory pool."""

    def __init__(self, kind: str) -> None:
        import torch

        self.kind = kind
        self.mod: Any = torch.cuda if kind == "cuda" else torch.npu  # type: ignore[attr-defined]  # torch_npu's
        self.pool: Any = None

    def new(self) -> Any:
        return self.mod.CUDAGraph() if self.kind == "cuda" else self.mod.NPUGraph()

    def capture(self, graph: Any, fn: Any) -> Any:
        mod = self.mod
        if self.pool is None:
            self.pool = mod.graph_pool_handle()
        side = mod.Stream()
        side.wait_stream(mod.current_stream())
        with mod.stream(side):
            for _ in range(2):  # warm-up: lazy initialisation and allocator growth stay out of the graph
                fn()
        mod.current_stream().wait_stream(side)
        with mod.graph(graph, pool=self.pool):
            out = fn()
        mod.synchronize()
        return out


def graph_api(device: str) -> Any:
    """The device's graphs for engine/core/graphs.py, or a start-up error where there are none (`--graph-capture`
    on a CPU or MPS)."""
    kind = device.split(":")[0]
    if kind not in ("cuda", "npu"):
        raise RuntimeError(
            f"--graph-capture: decode graphs need a CUDA GPU or an Ascend NPU, and this server runs on {device}; "
            "leave --graph-capture off"
        )
    return _DeviceGraphs(kind)


NPU_PAGE = 128  # tokens per KV page on an Ascend NPU


def page_size(device: str, head_dim: int = 128) -> int:
    """Tokens per KV page (and prefix-cache block) on `device`. Ascend's paged-attention kernels take a block size
    that is a multiple of 16 with block_size x head_size <= 128 x 128, and recommend 128, which vLLM-Ascend runs:
    128 up to head_dim 128, less above (64 for Gemma 3's 256). CPU, CUDA and MPS keep engine/core/kv.py's PAGE
    (16), what the CPU kernels and the prefix cache were measured with."""
    from engine.core.kv import PAGE

    if device.split(":")[0] != "npu":
        return PAGE
    return max(16, min(NPU_PAGE, 128 * 128 // max(1, head_dim)) // 16 * 16)


def backend_version(device: str) -> str | None:
    """The device bridge's version where one is imported beside torch: "torch_npu 2.5.1" on an NPU, else None."""
    if device.split(":")[0] != "npu":
        return None
    import torch_npu

    return f"torch_npu {getattr(torch_npu, '__version__', 'unknown')}"


def device_ops(device: str, cpu_kernels: Any = None) -> Any:
    """The table of a decoder layer's device operations for `device` (engine/core/ops.py): the CPU kernels when
    the runner loaded them, torch_npu's fused operations on an NPU (each falling back to the reference on its
    own), the torch reference anywhere else (CUDA, MPS, a CPU without the kernels). Logs what it chose."""
    from engine.core import ops

    kind = device.split(":")[0]
    table: ops.TorchOps
    if kind == "cpu" and cpu_kernels is not None:
        table = ops.CpuOps(cpu_kernels)
    elif kind == "npu":
        import torch_npu  # registered when the NPU was resolved; imported here only, as every device API

        from engine.core import npu_ops

        table = npu_ops.NpuOps(torch_npu, page_size(device))
    else:
        table = ops.TorchOps()
    log.info("device ops on %s: %s", device, ", ".join(f"{k}={v}" for k, v in table.chosen.items()))
    return table
