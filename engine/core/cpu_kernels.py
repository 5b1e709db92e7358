"""The C++ kernels of cpu_kernels.cpp, compiled once per source version with the system's g++ and loaded with
ctypes (no torch or Python headers, so it builds in about a second).

Used only where they can run: x86-64 with AVX2 and FMA, a g++ on the path, and `PLAYGROUND_CPU_KERNELS` not set
to 0. Anywhere else `kernels()` is None and the runner keeps its torch path, so nothing depends on them.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("cpu_kernels.cpp")
FLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC", "-std=c++17"]

_lock = threading.Lock()
_loaded: tuple[bool, CpuKernels | None] = (False, None)


def _cpu_has_avx2_fma() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        flags = next(
            (line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), ""
        ).split()
    except OSError:
        return False
    return "avx2" in flags and "fma" in flags


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llm-playground" / "kernels"


def _build() -> Path:
    src = SOURCE.read_bytes()
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no g++ on the path")
    digest = hashlib.sha256(src + " ".join(FLAGS).encode()).hexdigest()[:16]
    out = _cache_dir() / f"cpu_kernels-{digest}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".so")
    os.close(fd)
    try:
        subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", tmp], check=True, capture_output=True, timeout=120)
        os.replace(tmp, out)  # another process building the same version wins or loses the race harmlessly
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


class CpuKernels:
    def __init__(self, lib: ctypes.CDLL) -> None:
        self._linear = lib.linear_bf16
        p = ctypes.c_void_p
        self._linear.argtypes = [p, p, p, p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self._linear.restype = None
        self._attention = lib.decode_attention
        i, f = ctypes.c_int, ctypes.c_float
        self._attention.argtypes = [p, p, p, p, i, p, p, i, i, i, i, i, f, i]
        self._attention.restype = None
        self._add_rmsnorm = lib.add_rmsnorm
        self._add_rmsnorm.argtypes = [p, p, p, p, i, i, f]
        self._rope_store = lib.rope_store
        self._rope_store.argtypes = [p, p, p, p, p, p, p, i, i, i, i]
        self._silu_mul = lib.silu_mul
        self._silu_mul.argtypes = [p, p, i, i]
        for fn in (self._add_rmsnorm, self._rope_store, self._silu_mul):
            fn.restype = None

    def add_rmsnorm(self, x: torch.Tensor, delta: torch.Tensor | None, w: torch.Tensor, eps: float) -> torch.Tensor:
        """x += delta in place (when given; x contiguous float32 [N, D]), then RMSNorm(x) * w as a new tensor."""
        delta = delta.contiguous() if delta is not None else None
        y = torch.empty_like(x)
        self._add_rmsnorm(x.data_ptr(), delta.data_ptr() if delta is not None else None, w.data_ptr(), y.data_ptr(),
                          x.shape[0], x.shape[1], eps)  # fmt: skip
        return y

    def rope_store(
        self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slots: torch.Tensor,
        k_rows: torch.Tensor, v_rows: torch.Tensor, heads: int,
    ) -> torch.Tensor:  # fmt: skip
        """Rotary embedding on q and k of qkv [N, (H + 2 KV) D]; k and v stored at row slots[n] of k_rows and v_rows
        ([rows, KV, D], contiguous); returns q as [N, H, D]."""
        n = qkv.shape[0]
        _, kv, d = k_rows.shape
        q = torch.empty(n, heads, d)
        self._rope_store(qkv.data_ptr(), cos.data_ptr(), sin.data_ptr(), slots.data_ptr(), q.data_ptr(),
                         k_rows.data_ptr(), v_rows.data_ptr(), n, heads, kv, d)  # fmt: skip
        return q

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        n, width = gate_up.shape
        out = torch.empty(n, width // 2)
        self._silu_mul(gate_up.data_ptr(), out.data_ptr(), n, width // 2)
        return out

    def decode_attention(
        self, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, table: torch.Tensor, lens: torch.Tensor
    ) -> torch.Tensor:
        """q [B, H, D] against each sequence's first lens[b] positions of the pages table[b] lists, in pools of
        [pages, page, KV, D] (float32, contiguous); softmax(q k / sqrt(D)) v as [B, H, D]."""
        q = q.contiguous()
        b, h, d = q.shape
        _, page, kv, _ = k_pool.shape
        table, lens = table.to(torch.int32).contiguous(), lens.to(torch.int32).contiguous()
        out = torch.empty_like(q)
        self._attention(
            q.data_ptr(), k_pool.data_ptr(), v_pool.data_ptr(), table.data_ptr(), table.shape[1], lens.data_ptr(),
            out.data_ptr(), b, h, kv, d, page, d**-0.5, torch.get_num_threads(),
        )  # fmt: skip
        return out

    def linear_bf16(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, K] float32 @ w [N, K] bfloat16 .T (+ bias [N] float32) -> [B, N] float32."""
        x = x.contiguous()
        rows, k = x.shape
        n = w.shape[0]
        y = torch.empty(rows, n, dtype=torch.float32)
        self._linear(
            x.data_ptr(), w.data_ptr(), bias.data_ptr() if bias is not None else None, y.data_ptr(),
            rows, k, n, torch.get_num_threads(),
        )  # fmt: skip
        return y


def kernels() -> CpuKernels | None:
    """The compiled kernels, or None where they cannot run (the reason is logged once)."""
    global _loaded
    with _lock:
        if _loaded[0]:
            return _loaded[1]
        found = None
        if os.environ.get("PLAYGROUND_CPU_KERNELS", "1") == "0":
            log.info("CPU kernels off (PLAYGROUND_CPU_KERNELS=0)")
        elif not _cpu_has_avx2_fma():
            log.info("CPU kernels off: this CPU has no AVX2 and FMA")
        else:
            try:
                found = CpuKernels(ctypes.CDLL(str(_build())))
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                detail = getattr(exc, "stderr", b"") or b""
                log.warning("CPU kernels off: %s %s", exc, detail.decode(errors="replace")[-500:])
        _loaded = (True, found)
        return found
