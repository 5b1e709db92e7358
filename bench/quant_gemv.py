"""The quantized projection kernel (cpu_kernels.cpp's linear_q) of this checkout against the same kernel built from
another git revision, per row count, on one core: what a decode step's few rows cost.

    .venv/bin/python bench/quant_gemv.py [--base REV] [--isa avx512,avx2] [--rows 1,2,4,8,15] [--shapes 3072x576,...]

For each build the CPU can run, each bit width (4 and 8, groups of 32) and shape (random weights), the CPU
milliseconds of one call (`time.process_time`, the best of 7 runs of 20 calls, one thread: steadier than wall time
on a shared machine), the packed bytes per millisecond, this checkout's time over the base's, and whether the two
give bit-identical results. The base's source comes from `git show REV:engine/core/cpu_kernels.cpp`, compiled with
this checkout's flags into a temporary folder. Prints the CPU flags first.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import engine  # noqa: F401,E402  (process settings before torch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="HEAD~1")
    ap.add_argument("--isa", default="avx512,avx2")
    ap.add_argument("--rows", default="1,2,4,8,15")
    ap.add_argument("--shapes", default="3072x576,576x1536,49152x576")
    args = ap.parse_args()
    import torch

    from engine.core import cpu_kernels, quant

    # This script is its own process's composition root: one thread, on purpose (a per-core figure).
    torch.set_num_threads(1)
    flags = sorted(cpu_kernels.cpu_flags() & {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "f16c"})
    print(json.dumps({"cpu_flags": flags, "base": args.base}))
    source = subprocess.run(
        ["git", "show", f"{args.base}:engine/core/cpu_kernels.cpp"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    tmp = Path(tempfile.mkdtemp())
    (tmp / "base.cpp").write_bytes(source)
    for isa in [i for i in args.isa.split(",") if i in cpu_kernels.supported_isas()]:
        so = tmp / f"base-{isa}.so"
        subprocess.run(
            ["g++", *cpu_kernels.FLAGS, *cpu_kernels.ISAS[isa][1], str(tmp / "base.cpp"), "-o", str(so)], check=True
        )
        base = ctypes.CDLL(str(so))
        base.linear_q_h.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int] * 6
        new = cpu_kernels.load(isa)

        def run_base(x: torch.Tensor, qw: quant.QuantWeight, base: ctypes.CDLL = base) -> torch.Tensor:
            y = torch.empty(x.shape[0], qw.n)
            mins = qw.minv.data_ptr() if qw.minv.numel() else None
            base.linear_q_h(
                x.data_ptr(),
                qw.q.data_ptr(),
                qw.scale.data_ptr(),
                mins,
                None,
                y.data_ptr(),
                x.shape[0],
                qw.kp,
                qw.n,
                qw.group,
                qw.bits,
                1,
            )
            return y

        fns = {"base": run_base, "this": lambda x, qw, new=new: new.linear_q(x, qw)}
        for bits in (4, 8):
            for shape in args.shapes.split(","):
                n, k = (int(v) for v in shape.split("x"))
                qw = quant.quantize(torch.randn(n, k) * 0.02, bits, 32, symmetric=bits == 8)
                for rows in (int(r) for r in args.rows.split(",")):
                    x = torch.randn(rows, qw.kp)
                    same = torch.equal(fns["base"](x, qw), fns["this"](x, qw))
                    best: dict[str, float] = {}
                    for _ in range(7):
                        for name, fn in fns.items():
                            start = time.process_time()
                            for _ in range(20):
                                fn(x, qw)
                            best[name] = min(best.get(name, 1e9), (time.process_time() - start) / 20 * 1000)
                    out = {"isa": isa, "bits": bits, "shape": shape, "rows": rows}
                    out |= {f"{name}_ms": round(v, 3) for name, v in best.items()}
                    out |= {
                        "this_gb_s": round(qw.nbytes / best["this"] / 1e6, 2),
                        "this/base": round(best["this"] / best["base"], 2),
                    }
                    print(json.dumps(out | {"identical": same}))


if __name__ == "__main__":
    main()
