"""The C++ kernels of cpu_kernels.cpp, compiled once per source version and instruction set with the system's g++
and loaded with ctypes (no torch or Python headers, so it builds in a few seconds).

The instruction set is read off the CPU at run time: `avx512` (AVX-512 F, BW and VL: 16-lane vectors and 32
registers for the projections) where the CPU has it, else `avx2` (AVX2 + FMA, the baseline). The variable
`PLAYGROUND_CPU_ISA=avx2` (or `avx512`) forces one, so the AVX2 path is tested and measured on an AVX-512 machine
too. Used only where they can run: x86-64 with at least AVX2 and FMA, a g++ on the path, and
`PLAYGROUND_CPU_KERNELS` not set to 0. Anywhere else `kernels()` is None and the runner keeps its torch path, so
nothing depends on them.
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
from typing import Any

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("cpu_kernels.cpp")
FLAGS = ["-O3", "-fopenmp", "-shared", "-fPIC", "-std=c++17"]
# Best first: what each build needs of the CPU (/proc/cpuinfo names) and tells the compiler.
ISAS: dict[str, tuple[frozenset[str], list[str]]] = {
    "avx512": (
        frozenset({"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl"}),
        ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl"],
    ),
    "avx2": (frozenset({"avx2", "fma", "f16c"}), ["-mavx2", "-mfma", "-mf16c"]),
}

_lock = threading.Lock()
_loaded: tuple[bool, CpuKernels | None] = (False, None)
_by_isa: dict[str, CpuKernels] = {}


def cpu_flags() -> frozenset[str]:
    """The x86 feature flags of this CPU (empty elsewhere)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return frozenset()
    try:
        line = next((x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("flags")), "")
    except OSError:
        return frozenset()
    return frozenset(line.partition(":")[2].split())


def supported_isas() -> list[str]:
    """The kernel builds this CPU can run, best first."""
    flags = cpu_flags()
    return [name for name, (needs, _) in ISAS.items() if needs <= flags]


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llm-playground" / "kernels"


def _build(isa: str) -> Path:
    src = SOURCE.read_bytes()
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise RuntimeError("no g++ on the path")
    flags = FLAGS + ISAS[isa][1]
    digest = hashlib.sha256(src + " ".join(flags).encode()).hexdigest()[:16]
    out = _cache_dir() / f"cpu_kernels-{isa}-{digest}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".so")
    os.close(fd)
    try:
        subprocess.run([compiler, *flags, str(SOURCE), "-o", tmp], check=True, capture_output=True, timeout=180)
        os.replace(tmp, out)  # another process building the same version wins or loses the race harmlessly
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


class CpuKernels:
    def __init__(self, lib: ctypes.CDLL, isa: str) -> None:
        self.isa = isa  # the instruction set this build uses ("avx512", "avx2")
        self._linear = lib.linear_bf16
        p = ctypes.c_void_p
        self._linear.argtypes = [p, p, p, p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self._linear.restype = None
        self._attention = lib.decode_attention
        i, f = ctypes.c_int, ctypes.c_float
        self._attention.argtypes = [p, p, p, p, i, p, p, p, i, i, i, i, i, f, i]
        self._attention.restype = None
        # The same two kernels over bf16 KV pages (--kv-cache-dtype bf16), picked by the pool's dtype.
        self._attention_bf16 = lib.decode_attention_bf16
        self._attention_bf16.argtypes = self._attention.argtypes
        self._attention_bf16.restype = None
        self._add_rmsnorm = lib.add_rmsnorm
        self._add_rmsnorm.argtypes = [p, p, p, p, i, i, f]
        self._rope_store = lib.rope_store
        self._rope_store.argtypes = [p, p, p, p, p, p, p, i, i, i, i, p, p, f]
        self._rope_store_bf16 = lib.rope_store_bf16
        self._rope_store_bf16.argtypes = self._rope_store.argtypes
        self._silu_mul = lib.silu_mul
        self._silu_mul.argtypes = [p, p, i, i]
        self._gelu_tanh_mul = lib.gelu_tanh_mul
        self._gelu_tanh_mul.argtypes = [p, p, i, i]
        self._linear_q = lib.linear_q
        self._linear_q.argtypes = [p, p, p, p, p, p, i, i, i, i, i, i]
        self._linear_q_h = lib.linear_q_h  # the same with half scales and mins
        self._linear_q_h.argtypes = [p, p, p, p, p, p, i, i, i, i, i, i]
        # linear_q on AMX tiles in bf16 (calibration's "amx" from SPLIT_ROWS rows): the AVX-512 build on a CPU with
        # AMX-BF16 and AVX512_BF16, once Linux lent the process the tile registers (amx_ready asks, once).
        self._linear_q_amx = lib.linear_q_amx
        self._linear_q_amx_h = lib.linear_q_amx_h
        for fn in (self._linear_q_amx, self._linear_q_amx_h):
            fn.argtypes = [p, p, p, p, p, p, i, i, i, i, i, i]
            fn.restype = None
        self._amx_ready = lib.amx_ready
        self._amx_ready.argtypes, self._amx_ready.restype = [], ctypes.c_int
        self._amx: bool | None = None
        self._decode_layers = lib.decode_layers
        self._decode_layers.argtypes = [p, i, p, p, p, p, p, p, i, i, i, i, i, i, f, f, f, i, i, i]
        self._decode_layers.restype = None
        for fn in (
            self._linear_q,
            self._linear_q_h,
            self._add_rmsnorm,
            self._rope_store,
            self._rope_store_bf16,
            self._silu_mul,
            self._gelu_tanh_mul,
        ):
            fn.restype = None

    def add_rmsnorm(self, x: torch.Tensor, delta: torch.Tensor | None, w: torch.Tensor, eps: float) -> torch.Tensor:
        """x += delta in place (when given; x contiguous float32 [N, D]), then RMSNorm(x) * w as a new tensor."""
        delta = delta.contiguous() if delta is not None else None
        y = torch.empty_like(x)
        self._add_rmsnorm(
            x.data_ptr(),
            delta.data_ptr() if delta is not None else None,
            w.data_ptr(),
            y.data_ptr(),
            x.shape[0],
            x.shape[1],
            eps,
        )
        return y

    def rope_store(
        self,
        qkv: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        slots: torch.Tensor,
        k_rows: torch.Tensor,
        v_rows: torch.Tensor,
        heads: int,
        qk_norm: Any = None,
    ) -> torch.Tensor:
        """Rotary embedding on q and k of qkv [N, (H + 2 KV) D], after each head's RMSNorm when `qk_norm` (q and k
        weights [D] float32, eps) is given; k and v stored at row slots[n] of k_rows and v_rows ([rows, KV, D],
        contiguous, float32 or bf16: rounded to nearest even as `.to(torch.bfloat16)` does); returns q as [N, H, D]."""
        n = qkv.shape[0]
        _, kv, d = k_rows.shape
        q = torch.empty(n, heads, d)
        wq, wk, eps = (qk_norm[0].contiguous(), qk_norm[1].contiguous(), qk_norm[2]) if qk_norm else (None, None, 0.0)
        store = self._rope_store_bf16 if _bf16_pages(k_rows, v_rows) else self._rope_store
        store(
            qkv.data_ptr(),
            cos.data_ptr(),
            sin.data_ptr(),
            slots.data_ptr(),
            q.data_ptr(),
            k_rows.data_ptr(),
            v_rows.data_ptr(),
            n,
            heads,
            kv,
            d,
            wq.data_ptr() if wq is not None else None,
            wk.data_ptr() if wk is not None else None,
            eps,
        )
        return q

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        n, width = gate_up.shape
        out = torch.empty(n, width // 2)
        self._silu_mul(gate_up.data_ptr(), out.data_ptr(), n, width // 2)
        return out

    def gelu_tanh_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        n, width = gate_up.shape
        out = torch.empty(n, width // 2)
        self._gelu_tanh_mul(gate_up.data_ptr(), out.data_ptr(), n, width // 2)
        return out

    def decode_attention(
        self,
        q: torch.Tensor,
        k_pool: torch.Tensor,
        v_pool: torch.Tensor,
        table: torch.Tensor,
        lens: torch.Tensor,
        starts: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """q [B, H, D] against each sequence's first lens[b] positions of the pages table[b] lists (from
        position starts[b] when given: a sliding window), in pools of [pages, page, KV, D] (float32 or bf16, both
        pools the same, contiguous); softmax(q k / sqrt(D)) v as [B, H, D], float32."""
        q = q.contiguous()
        b, h, d = q.shape
        _, page, kv, _ = k_pool.shape
        table, lens = table.to(torch.int32).contiguous(), lens.to(torch.int32).contiguous()
        starts = starts.to(torch.int32).contiguous() if starts is not None else None
        out = torch.empty_like(q)
        attend = self._attention_bf16 if _bf16_pages(k_pool, v_pool) else self._attention
        attend(
            q.data_ptr(),
            k_pool.data_ptr(),
            v_pool.data_ptr(),
            table.data_ptr(),
            table.shape[1],
            lens.data_ptr(),
            starts.data_ptr() if starts is not None else None,
            out.data_ptr(),
            b,
            h,
            kv,
            d,
            page,
            d**-0.5,
            torch.get_num_threads(),
        )
        return out

    def linear_bf16(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, K] float32 @ w [N, K] bfloat16 .T (+ bias [N] float32) -> [B, N] float32."""
        x = x.contiguous()
        rows, k = x.shape
        n = w.shape[0]
        y = torch.empty(rows, n, dtype=torch.float32)
        self._linear(
            x.data_ptr(),
            w.data_ptr(),
            bias.data_ptr() if bias is not None else None,
            y.data_ptr(),
            rows,
            k,
            n,
            torch.get_num_threads(),
        )
        return y

    def linear_q(self, x: torch.Tensor, w: Any, bias: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, Kp] float32 @ w.T (+ bias [N] float32) -> [B, N] float32, w a quant.QuantWeight (Kp its padded
        width: the caller pads x); its scales and mins float32 or float16."""
        return self._quantized(self._linear_q, self._linear_q_h, x, w, bias)

    @property
    def amx(self) -> bool:
        """Whether linear_q_amx runs here (asked once: the CPU's flags, then the tile registers' permission)."""
        if self._amx is None:
            needs = {"amx_tile", "amx_bf16", "avx512_bf16"}
            self._amx = self.isa == "avx512" and needs <= cpu_flags() and bool(self._amx_ready())
        return self._amx

    def linear_q_amx(self, x: torch.Tensor, w: Any, bias: torch.Tensor | None = None) -> torch.Tensor:
        """linear_q's product on AMX tiles: the inputs and the decoded weights rounded to bf16, float32 sums; from
        16 rows (fewer are padded with zero rows by the tile shape, and cost the same). Only where `amx`."""
        if not self.amx:
            raise RuntimeError("no AMX-BF16 tiles here")
        return self._quantized(self._linear_q_amx, self._linear_q_amx_h, x, w, bias)

    def _quantized(self, fn: Any, fn_half: Any, x: torch.Tensor, w: Any, bias: torch.Tensor | None) -> torch.Tensor:
        """One of the quantized kernels (fn_half where the scales and mins are float16) on x, w and bias."""
        x = x.contiguous()
        rows = x.shape[0]
        y = torch.empty(rows, w.n, dtype=torch.float32)
        assert w.scale.dtype in (torch.float32, torch.float16) and (not w.minv.numel() or w.minv.dtype == w.scale.dtype)
        (fn_half if w.scale.dtype == torch.float16 else fn)(
            x.data_ptr(),
            w.q.data_ptr(),
            w.scale.data_ptr(),
            w.minv.data_ptr() if w.minv.numel() else None,
            bias.data_ptr() if bias is not None else None,
            y.data_ptr(),
            rows,
            w.kp,
            w.n,
            w.group,
            w.bits,
            torch.get_num_threads(),
        )
        return y

    def decode_layers(
        self,
        plan: Any,
        first_norm: torch.Tensor,
        h: torch.Tensor,
        ropes: list[tuple[torch.Tensor, torch.Tensor]],
        rows: Any,
        dims: tuple[int, int, int, int, int],
        eps: float,
        kv_bf16: bool,
        q_scale: float = 1.0,
        gelu: bool = False,
    ) -> torch.Tensor:
        """Every layer of a decode step in one call (fused_step.py builds `plan`, a ctypes array of StepLayer): h
        [B, hidden] float32 contiguous, the step's embeddings, becomes the last residual in place; returns the final
        norm's output [B, hidden]. ropes: the rotary tables (cos, sin [B, D] float32 contiguous) a layer's `rope`
        picks, rows a ctypes array of StepRows (a layer's `rows`); dims (H, KV, D, hidden, intermediate)."""
        heads, kv, d, hidden, inter = dims
        out = torch.empty_like(h)
        pair = ctypes.c_void_p * 2
        cos = pair(*(c.data_ptr() for c, _ in ropes), *([None] * (2 - len(ropes))))
        sin = pair(*(s.data_ptr() for _, s in ropes), *([None] * (2 - len(ropes))))
        self._decode_layers(
            ctypes.addressof(plan),
            len(plan),
            first_norm.data_ptr(),
            h.data_ptr(),
            out.data_ptr(),
            ctypes.addressof(cos),
            ctypes.addressof(sin),
            ctypes.addressof(rows),
            h.shape[0],
            heads,
            kv,
            d,
            hidden,
            inter,
            d**-0.5,
            q_scale,
            eps,
            int(kv_bf16),
            int(gelu),
            torch.get_num_threads(),
        )
        return out


class StepProj(ctypes.Structure):
    """cpu_kernels.cpp's StepProj: one projection of a fused decode step (kind 0 bf16, 1 quantized with float32
    scales, 2 with half scales)."""

    _fields_ = [
        ("kind", ctypes.c_int32),
        ("n", ctypes.c_int32),
        ("k", ctypes.c_int32),
        ("group", ctypes.c_int32),
        ("bits", ctypes.c_int32),
        ("pad", ctypes.c_int32),
        ("w", ctypes.c_void_p),
        ("scale", ctypes.c_void_p),
        ("minv", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
    ]


class StepLayer(ctypes.Structure):
    """cpu_kernels.cpp's StepLayer: a layer of a fused decode step."""

    _fields_ = [
        ("qkv", StepProj),
        ("o", StepProj),
        ("gate_up", StepProj),
        ("down", StepProj),
        ("norm_mid", ctypes.c_void_p),
        ("norm_next", ctypes.c_void_p),
        ("k_pool", ctypes.c_void_p),
        ("v_pool", ctypes.c_void_p),
        ("q_norm", ctypes.c_void_p),
        ("k_norm", ctypes.c_void_p),
        ("norm_attn_out", ctypes.c_void_p),
        ("norm_mlp_out", ctypes.c_void_p),
        ("qk_eps", ctypes.c_float),
        ("rope", ctypes.c_int32),
        ("rows", ctypes.c_int32),
        ("pad", ctypes.c_int32),
    ]


class StepRows(ctypes.Structure):
    """cpu_kernels.cpp's StepRows: a fused decode step's rows in one pool (int64 slots, int32 table, lens, starts
    or null; the table's width and the pool's page size)."""

    _fields_ = [
        ("slots", ctypes.c_void_p),
        ("table", ctypes.c_void_p),
        ("lens", ctypes.c_void_p),
        ("starts", ctypes.c_void_p),
        ("W", ctypes.c_int32),
        ("page", ctypes.c_int32),
    ]


def _bf16_pages(k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether a pair of KV pools holds bf16 (else float32, what the kernels take otherwise)."""
    if k.dtype != v.dtype or k.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"KV pages must be float32 or bfloat16, both alike; got {k.dtype} and {v.dtype}")
    return k.dtype == torch.bfloat16


def load(isa: str) -> CpuKernels:
    """The kernels built for `isa` (compiled on first use); raises where this CPU or machine cannot run them."""
    if isa not in supported_isas():
        raise RuntimeError(f"this CPU lacks {isa} ({', '.join(sorted(ISAS[isa][0] - cpu_flags()))})")
    with _lock:
        if isa not in _by_isa:
            _by_isa[isa] = CpuKernels(ctypes.CDLL(str(_build(isa))), isa)
        return _by_isa[isa]


def kernels() -> CpuKernels | None:
    """The best kernels this CPU runs (or the PLAYGROUND_CPU_ISA build), or None where none can run (the reason is
    logged once)."""
    global _loaded
    if _loaded[0]:
        return _loaded[1]
    found = None
    isas = supported_isas()
    forced = os.environ.get("PLAYGROUND_CPU_ISA", "")
    if os.environ.get("PLAYGROUND_CPU_KERNELS", "1") == "0":
        log.info("CPU kernels off (PLAYGROUND_CPU_KERNELS=0)")
    elif not isas:
        log.info("CPU kernels off: this CPU has no AVX2 and FMA")
    elif forced and forced not in isas:
        log.warning(
            "CPU kernels off: PLAYGROUND_CPU_ISA=%s, which this CPU cannot run (it has %s)", forced, ", ".join(isas)
        )
    else:
        try:
            found = load(forced or isas[0])
            log.info("CPU kernels: %s", found.isa)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", b"") or b""
            log.warning("CPU kernels off: %s %s", exc, detail.decode(errors="replace")[-500:])
    _loaded = (True, found)
    return found
