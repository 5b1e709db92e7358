"""Per-token cost of constrained decoding: mask, apply_mask and accept while feeding a fixed JSON document.

.venv/bin/python bench/constraints.py [--model-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine  # noqa: F401  (process settings before torch)

DOC = {"name": "Ada Lovelace, the first programmer", "age": 36, "tags": ["math", "poetry", "engines"], "ok": True}
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "tags", "ok"],
}


def us(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1e6:.0f} us, mean {statistics.mean(xs) * 1e6:.0f} us"


def main() -> None:
    import torch
    from transformers import AutoTokenizer

    from engine.core.constraints import ConstraintFactory, apply_mask

    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default="", help="an HF model directory (default: the bundled model's cache)")
    args = ap.parse_args()
    if not args.model_dir:
        from engine.models import cache_root, resolve_model_dir

        args.model_dir = str(resolve_model_dir("", cache_root())[0])
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    vocab = json.loads((Path(args.model_dir) / "config.json").read_text())["vocab_size"]
    t0 = time.perf_counter()
    factory = ConstraintFactory(tok, vocab)
    print(f"factory (tokenizer compile): {time.perf_counter() - t0:.2f} s, vocab {vocab}")
    ids = tok.encode(json.dumps(DOC, indent=1), add_special_tokens=False)
    logits = torch.randn(vocab)
    for label, make in [("json_object", factory.json_object), ("json_schema", lambda: factory.json_schema(SCHEMA))]:
        for rep in ("first", "cached"):
            t0 = time.perf_counter()
            c = make()
            compiled = time.perf_counter() - t0
            masks, applies, accepts = [], [], []
            for t in ids:
                row = logits.clone()
                t0 = time.perf_counter()
                mask = c.allowed(vocab)
                t1 = time.perf_counter()
                apply_mask(row, mask)
                t2 = time.perf_counter()
                assert c.accept(t)
                accepts.append(time.perf_counter() - t2)
                masks.append(t1 - t0)
                applies.append(t2 - t1)
            print(
                f"{label} ({rep}): compile {compiled * 1e3:.1f} ms; {len(ids)} tokens; allowed {us(masks)}; "
                f"apply_mask {us(applies)}; accept {us(accepts)}"
            )


if __name__ == "__main__":
    main()
