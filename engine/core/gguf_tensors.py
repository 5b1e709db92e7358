"""A GGUF file's tensors without its metadata: names, types, shapes and their bytes as memory-mapped arrays.

`gguf.GGUFReader` parses every metadata field into numpy views first: for SmolLM2's GGUF, its 49,152-token
vocabulary and merges made that 2-3 s of a warm start (12.8 s beside 7.6 s for `import torch` on a loaded 2-core
machine, bench/first_start.py), for tensors that `--quantization auto` needs and metadata it does not. This reads
the same file format (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md) skipping the values it does not
need with `struct`, then gives each tensor as the reader would (`name`, `tensor_type`, `shape`, `data`: uint8
[rows, bytes a row] for a block type), on one `np.memmap`. A file it cannot read (big-endian, a version it does
not know) goes to `gguf.GGUFReader`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"GGUF"
VERSIONS = (2, 3)
# Fixed sizes of the metadata value types (gguf.constants.GGUFValueType): 8 is a string, 9 an array.
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY, UINT32 = 8, 9, 4
PLAIN = {0: np.float32, 1: np.float16, 24: np.int8, 25: np.int16, 26: np.int32, 27: np.int64, 28: np.float64}


@dataclass
class Tensor:
    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType: `.name` is "Q4_1", ...
    shape: np.ndarray  # GGUF's order: the row width first
    data: np.ndarray  # uint8 [rows, bytes a row] for a block type; the element type otherwise


class _Cursor:
    def __init__(self, buf: Any, offset: int) -> None:
        self.buf, self.offset = buf, offset

    def take(self, fmt: str) -> Any:
        value = struct.unpack_from("<" + fmt, self.buf, self.offset)
        self.offset += struct.calcsize("<" + fmt)
        return value[0] if len(value) == 1 else value

    def string(self) -> str:
        n = self.take("Q")
        self.offset += n
        return bytes(self.buf[self.offset - n : self.offset]).decode("utf-8")

    def skip_value(self, kind: int) -> None:
        if kind == STRING:
            self.offset += 8 + self.take("Q")
        elif kind == ARRAY:
            item, count = self.take("IQ")
            if item == STRING:
                for _ in range(count):
                    self.offset += 8 + struct.unpack_from("<Q", self.buf, self.offset)[0]
            elif item == ARRAY:
                for _ in range(count):
                    self.skip_value(ARRAY)
            else:
                self.offset += SIZES[item] * count
        else:
            self.offset += SIZES[kind]


def tensors(path: str | Path) -> list[Any]:
    """The tensors of the GGUF at `path`, in the file's order (as `gguf.GGUFReader(path).tensors` lists them)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    data = np.memmap(path, mode="r")
    raw = data.data  # its buffer, for struct
    head = _Cursor(raw, 0)
    if bytes(raw[:4]) != MAGIC or struct.unpack_from("<I", raw, 4)[0] not in VERSIONS:
        from gguf import GGUFReader

        return list(GGUFReader(str(path)).tensors)
    head.offset = 8
    n_tensors, n_fields = head.take("QQ")
    alignment = 32
    for _ in range(n_fields):
        key = head.string()
        kind = head.take("I")
        if key == "general.alignment" and kind == UINT32:
            alignment = head.take("I")
        else:
            head.skip_value(kind)
    infos = []
    for _ in range(n_tensors):
        name = head.string()
        n_dims = head.take("I")
        dims = np.array(struct.unpack_from(f"<{n_dims}Q", raw, head.offset), dtype=np.uint64)
        head.offset += 8 * n_dims
        kind, offset = head.take("IQ")
        infos.append((name, dims, kind, offset))
    start = -(-head.offset // alignment) * alignment
    out = []
    for name, dims, kind, offset in infos:
        ggml = GGMLQuantizationType(kind)
        shape = tuple(int(d) for d in reversed(dims.tolist()))
        count = int(np.prod(shape))
        if kind in PLAIN:
            item, nbytes = np.dtype(PLAIN[kind]), count * np.dtype(PLAIN[kind]).itemsize
        else:
            block, size = GGML_QUANT_SIZES[ggml]
            item, nbytes = np.dtype(np.uint8), count * size // block
            shape = (*shape[:-1], shape[-1] // block * size)
        at = start + offset
        out.append(Tensor(name, ggml, dims, data[at : at + nbytes].view(item).reshape(shape)))
    return out
