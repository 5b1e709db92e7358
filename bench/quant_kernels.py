"""Which quantized kernel wins at which row count, per matrix shape: what `quant.calibrate` measures at load.

    .venv/bin/python bench/quant_kernels.py [--shape qwen0.5b|smollm2|qwen3b] [--bits 4,8] [--rows 1,4,16,32,64]
                                            [--layers 4] [--threads N] [--per-shape]

For each projection shape of the model (random weights, `--layers` distinct matrices of each so they stream from
memory as in a step) and each bit width, the milliseconds per row count of every candidate calibration has:
`tile` (cpu_kernels.cpp's linear_q), `torch` (torch's int4pack / int8pack matmuls, bf16 activations), `reference`
(the unquantized path on a bf16 copy: oneDNN's bf16 matmul, as `--dtype bf16` runs it) and, where the CPU has
VNNI or AMX, `w8a8` (activations quantized to int8 per row, `torch._int_mm`), and from 16 rows, where the CPU has
AMX-BF16, `amx` (cpu_kernels.cpp's linear_q_amx, no copy), summed over the shapes (`--per-shape`: each shape's
too), with the kernels calibration picked for each shape (with no budget for copies: every candidate is timed).
Prints the CPU flags first.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import engine  # noqa: F401  (process settings before torch)

SHAPES = {  # (out, in) of the fused qkv, o, gate_up and down projections
    "qwen0.5b": [(1152, 896), (896, 896), (9728, 896), (896, 4864)],
    "smollm2": [(960, 576), (576, 576), (3072, 576), (576, 1536)],
    "qwen3b": [(2560, 2048), (2048, 2048), (22016, 2048), (2048, 11008)],
}
FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="qwen0.5b", choices=sorted(SHAPES))
    ap.add_argument("--bits", default="4,8")
    ap.add_argument("--rows", default="1,4,16,32,64")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--per-shape", action="store_true", help="each shape's table too")
    args = ap.parse_args()
    import torch

    from engine.core import quant
    from engine.core.cpu_kernels import cpu_flags, kernels
    from engine.core.projection import Projection

    if args.threads:  # this script is its own process's composition root: the thread count is set here, on purpose
        torch.set_num_threads(args.threads)
    kern = kernels()
    flags = cpu_flags()
    print(
        json.dumps(
            {
                "cpu_flags": [f for f in FLAGS if f in flags],
                "kernels": kern.isa if kern else None,
                "w8a8": quant.w8a8_supported(),
                "threads": torch.get_num_threads(),
            }
        )
    )
    rows = tuple(int(r) for r in args.rows.split(","))
    g = torch.Generator().manual_seed(0)

    def reference(w: torch.Tensor, bias: torch.Tensor | None) -> Projection:
        return Projection(w.to(torch.bfloat16), bias, kern, True)

    for bits in (int(b) for b in args.bits.split(",")):
        total: dict[int, dict[str, float]] = {}
        picked, per_shape = {}, {}
        for shape in SHAPES[args.shape]:
            group = quant.INT4_GROUP if bits == 4 else quant.INT8_GROUP
            projections = [
                quant.QuantProjection(quant.quantize(torch.randn(*shape, generator=g) * 0.02, bits, group), None, kern)
                for _ in range(args.layers)
            ]
            with torch.inference_mode():
                table = quant.calibrate(projections, reference, repeat=args.repeat, rows=rows, int8_activations=True)[
                    shape
                ]
            picked[f"{shape[0]}x{shape[1]}"] = projections[0].kernels_by_rows
            per_shape[f"{shape[0]}x{shape[1]}"] = table
            for r, times in table.items():
                for name, ms in times.items():
                    total.setdefault(r, {})[name] = round(total.get(r, {}).get(name, 0.0) + ms, 2)
        out = {"bits": bits, "ms_per_rows (sum over shapes)": total, "picked": picked}
        print(json.dumps(out | ({"per_shape": per_shape} if args.per_shape else {})), flush=True)


if __name__ == "__main__":
    main()
