"""A GGUF of an HF model directory made with llama.cpp's own tools: its converter, then its quantizer.

    .venv/bin/python bench/gguf_llamacpp.py --llamacpp-src SRC [--model-dir DIR] [--type Q4_K_M]
                                            [--llamacpp-venv ~/peers/llamacpp]

SRC is a llama.cpp source tree: the one llama-cpp-python's sdist vendors will do (`vendor/llama.cpp` of
llama_cpp_python-0.3.36.tar.gz; bench/README.md says how to get it). Its `convert_hf_to_gguf.py` runs with this
venv's python (torch, transformers, plus `sentencepiece`, which the converter imports for every Qwen2 model) and
SRC's own `gguf-py`, writing a bf16 GGUF; then `llama_model_quantize` of llama-cpp-python's library, from its venv,
writes `--type` beside the model directory as `<dir name>-<type>.gguf`, and the bf16 file is removed. The default
DIR is bench/qwen_shape.py's Qwen2.5-3B shape in the cache, which bench/peer_llamacpp.py `--models qwen3b` serves.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

QUANTIZE = """
import ctypes, sys
import llama_cpp
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + sys.argv[3])
params.nthread = 2
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(params)))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llamacpp-src", type=Path, required=True)
    ap.add_argument("--model-dir", type=Path, default=None)
    ap.add_argument("--type", default="Q4_K_M")
    ap.add_argument("--llamacpp-venv", default=os.environ.get("PLAYGROUND_LLAMACPP_VENV", "~/peers/llamacpp"))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from engine.models import cache_root

    model_dir = args.model_dir or cache_root() / "bench-models" / "qwen2.5-3b-shape"
    src = args.llamacpp_src.expanduser()
    out = model_dir.parent / f"{model_dir.name}-{args.type}.gguf"
    bf16 = model_dir.parent / f"{model_dir.name}-bf16.gguf"
    began = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src / "gguf-py"), str(src)]))
    convert = [sys.executable, str(src / "convert_hf_to_gguf.py"), str(model_dir), "--outtype", "bf16"]
    subprocess.run([*convert, "--outfile", str(bf16)], env=env, check=True)
    converted = time.perf_counter()
    python = str(Path(args.llamacpp_venv).expanduser() / "bin" / "python")
    try:
        subprocess.run([python, "-c", QUANTIZE, str(bf16), str(out), args.type], check=True)
    finally:
        bf16.unlink(missing_ok=True)
    print(
        f"{out} ({out.stat().st_size / 1e6:.0f} MB): converted in {converted - began:.0f} s, "
        f"quantized in {time.perf_counter() - converted:.0f} s"
    )


if __name__ == "__main__":
    main()
