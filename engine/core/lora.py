"""LoRA adapters served beside the base model, many in one batch (S-LoRA / punica style).

An adapter is a PEFT LoRA directory: `adapter_config.json` (peft_type LORA, r, lora_alpha, target_modules) and
`adapter_model.safetensors` (`...layers.<i>.self_attn.q_proj.lora_A.weight` [r, in] and `lora_B.weight` [out, r]).
The engine reads those two files itself (the JSON and safetensors; no PEFT at run time: PEFT would wrap the HF
modules, which the lean runner does not call, and it is only a test dependency).

`read_adapter` checks a directory on its own (files, format, ranks): `preflight` runs it for every
`--lora-adapters id=DIR` before the server binds. `check_against` then checks it against the loaded base model
(every target a projection the model has, layer indices in range, the in / out sizes of every matrix), and
`LoraSet` stacks all adapters per projection of the lean runner (model_runner.DecoderRunner): for each of a
layer's four fused projections (qkv, o, gate_up, down), A [n + 1, R, in] and B [n + 1, out, R] with index 0 all
zeros (the base model), alpha / r folded into B, ranks padded to the largest. PEFT's q_proj / k_proj / v_proj
(gate_proj / up_proj) deltas land on their slices of the fused output: their A matrices are stacked along the rank
axis and their B matrices placed block-diagonally, so one pair of matmuls gives the three deltas exactly.

A step (`LoraSet.step`) maps each token row to its segment's adapter and groups the rows by adapter; each
projection then adds `(x[rows] @ A[a].T) @ B[a].T` to its output for every adapter group in the step. Rows of the
base model do no LoRA work, and a step with no adapter row skips all of it (`step` returns None).
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
# The lean runner's fused projections (model_runner.DecoderRunner.proj order) and the HF modules that feed each,
# in the order of their slices of the fused output.
FUSED = (
    ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    ("self_attn.o_proj",),
    ("mlp.gate_proj", "mlp.up_proj"),
    ("mlp.down_proj",),
)
MODULES = {name.split(".")[1]: name for group in FUSED for name in group}  # q_proj -> self_attn.q_proj
KEY = re.compile(r"(?:.*\.)?layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])(?:\.default)?\.weight")
ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


class LoraError(ValueError):
    """An adapter that cannot be served: the message names the file and the reason."""


@dataclass
class LoraAdapter:
    id: str
    path: Path
    rank: int
    alpha: float
    scale: float  # alpha / r (alpha / sqrt(r) with use_rslora)
    targets: frozenset[str]  # HF module names: self_attn.q_proj, mlp.down_proj, ...
    # (layer, module) -> (A [r, in], B [out, r]) as stored
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


def parse_specs(specs: list[str]) -> list[tuple[str, Path]]:
    """`id=DIR` entries -> [(id, DIR)]; a malformed or repeated id raises LoraError."""
    out: list[tuple[str, Path]] = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not name or not path:
            raise LoraError(f"--lora-adapters: {spec!r} is not id=DIR")
        if not ID.fullmatch(name):
            raise LoraError(f"--lora-adapters: adapter id {name!r} must match {ID.pattern}")
        if name in (n for n, _ in out):
            raise LoraError(f"--lora-adapters: adapter id {name!r} is given twice")
        out.append((name, Path(path).expanduser()))
    return out


def preflight(specs: list[str], served_name: str = "", load: bool = False) -> list[LoraAdapter]:
    """Every adapter of `--lora-adapters` checked on its own (before any model loads); `load` reads the weights."""
    adapters = [read_adapter(name, path, load) for name, path in parse_specs(specs)]
    for a in adapters:
        if served_name and a.id == served_name:
            raise LoraError(f"--lora-adapters: adapter id {a.id!r} is the served model's name")
    return adapters


def _safetensors_header(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise LoraError(f"{path}: not a safetensors file (too short)")
        (size,) = struct.unpack("<Q", head)
        if size > 100 << 20:
            raise LoraError(f"{path}: not a safetensors file (header of {size} bytes)")
        try:
            return json.loads(f.read(size))
        except ValueError:
            raise LoraError(f"{path}: not a safetensors file (unreadable header)") from None


def read_adapter(name: str, path: Path, load: bool = True) -> LoraAdapter:
    """The adapter in `path`, format-checked: a LoraError names the file and the reason."""
    cfg_path, w_path = path / CONFIG, path / WEIGHTS
    if not path.is_dir():
        raise LoraError(f"adapter {name!r}: {path} is not a directory")
    for p in (cfg_path, w_path):
        if not p.is_file():
            raise LoraError(f"adapter {name!r}: {p} is missing (a PEFT LoRA adapter has {CONFIG} and {WEIGHTS})")
    try:
        cfg = json.loads(cfg_path.read_text())
    except ValueError as exc:
        raise LoraError(f"{cfg_path}: not valid JSON ({exc})") from None
    if str(cfg.get("peft_type", "LORA")).upper() != "LORA":
        raise LoraError(f"{cfg_path}: peft_type {cfg.get('peft_type')!r} is not LORA")
    for key, ok in (("use_dora", False), ("fan_in_fan_out", False)):
        if bool(cfg.get(key) or False) != ok:
            raise LoraError(f"{cfg_path}: {key}={cfg.get(key)!r} is not supported")
    if (cfg.get("bias") or "none") != "none":
        raise LoraError(f"{cfg_path}: bias={cfg.get('bias')!r} is not supported (only 'none')")
    for key in ("rank_pattern", "alpha_pattern", "modules_to_save"):
        if cfg.get(key):
            raise LoraError(f"{cfg_path}: {key} is not supported")
    rank, alpha = cfg.get("r"), cfg.get("lora_alpha")
    if not isinstance(rank, int) or rank < 1 or not isinstance(alpha, int | float):
        raise LoraError(f"{cfg_path}: r must be a positive integer and lora_alpha a number (got {rank!r}, {alpha!r})")
    header = _safetensors_header(w_path)
    seen: dict[tuple[int, str, str], list[int]] = {}
    for key, meta in header.items():
        if key == "__metadata__":
            continue
        m = KEY.fullmatch(key)
        if m is None or m.group(3) not in MODULES:
            raise LoraError(
                f"{w_path}: tensor {key!r} is not a LoRA matrix of a layer projection ({', '.join(MODULES)})"
            )
        shape = list(meta.get("shape", []))
        if len(shape) != 2:
            raise LoraError(f"{w_path}: tensor {key!r} has shape {shape}, not a matrix")
        ab = m.group(4)
        if (shape[0] if ab == "A" else shape[1]) != rank:
            raise LoraError(f"{w_path}: tensor {key!r} has shape {shape}, rank {rank} expected (r in {CONFIG})")
        seen[(int(m.group(1)), MODULES[m.group(3)], ab)] = shape
    if not seen:
        raise LoraError(f"{w_path}: no LoRA matrices")
    for layer, module, ab in seen:
        if (layer, module, "B" if ab == "A" else "A") not in seen:
            raise LoraError(f"{w_path}: layer {layer} {module} has lora_{ab} without its pair")
    scale = alpha / math.sqrt(rank) if cfg.get("use_rslora") else alpha / rank
    adapter = LoraAdapter(name, path, rank, float(alpha), scale, frozenset(m for _, m, _ in seen))
    if load:
        from safetensors.torch import load_file

        tensors = load_file(str(w_path))
        for key, t in tensors.items():
            m = KEY.fullmatch(key)
            assert m is not None
            slot = (int(m.group(1)), MODULES[m.group(3)])
            pair = adapter.weights.get(slot, (None, None))
            adapter.weights[slot] = (t, pair[1]) if m.group(4) == "A" else (pair[0], t)  # type: ignore[assignment]
    return adapter


def check_against(adapter: LoraAdapter, layers: list[Any]) -> None:
    """Every matrix of `adapter` fits the base model's decoder `layers` (the HF modules): LoraError if not."""
    w_path = adapter.path / WEIGHTS
    for (li, module), (a, b) in sorted(adapter.weights.items()):
        if li >= len(layers):
            raise LoraError(f"{w_path}: layer {li} {module}: the base model has {len(layers)} layers")
        base = layers[li].get_submodule(module).weight
        out_f, in_f = base.shape
        if a.shape[1] != in_f or b.shape[0] != out_f:
            raise LoraError(
                f"{w_path}: layer {li} {module}: lora_A {list(a.shape)} / lora_B {list(b.shape)} do not "
                f"fit the base model's {out_f}x{in_f} weight"
            )


@dataclass
class LoraStep:
    """One step's adapter rows: (stack index, row indices or None when that adapter has every row)."""

    groups: list[tuple[int, torch.Tensor | None]]


class LoraSet:
    """Every adapter stacked per fused projection of the lean runner; index 0 is the base model (no delta)."""

    def __init__(self, adapters: list[LoraAdapter], layers: list[Any], dtype: torch.dtype, device: Any) -> None:
        self.ids = [a.id for a in adapters]
        self.index = {a.id: i + 1 for i, a in enumerate(adapters)}
        for a in adapters:
            check_against(a, layers)
        # stacks[li][k] = (A [n+1, R, in], B [n+1, out, R]) or None where no adapter targets that projection
        self.stacks: list[list[tuple[torch.Tensor, torch.Tensor] | None]] = []
        n = len(adapters)
        for li, layer in enumerate(layers):
            row: list[tuple[torch.Tensor, torch.Tensor] | None] = []
            for group in FUSED:
                shapes = [layer.get_submodule(m).weight.shape for m in group]  # [out, in] each
                ranks = [sum(a.weights[(li, m)][0].shape[0] for m in group if (li, m) in a.weights) for a in adapters]
                big = max(ranks, default=0)
                if big == 0:
                    row.append(None)
                    continue
                in_f, out_total = shapes[0][1], sum(s[0] for s in shapes)
                a_st = torch.zeros(n + 1, big, in_f, dtype=torch.float32)
                b_st = torch.zeros(n + 1, out_total, big, dtype=torch.float32)
                for ai, ad in enumerate(adapters, start=1):
                    r0, o0 = 0, 0
                    for m, shape in zip(group, shapes):
                        if (li, m) in ad.weights:
                            a_m, b_m = ad.weights[(li, m)]
                            r = a_m.shape[0]
                            a_st[ai, r0 : r0 + r] = a_m.float()
                            b_st[ai, o0 : o0 + shape[0], r0 : r0 + r] = b_m.float() * ad.scale
                            r0 += r
                        o0 += shape[0]
                row.append(
                    (a_st.to(device=device, dtype=dtype).contiguous(), b_st.to(device=device, dtype=dtype).contiguous())
                )
            self.stacks.append(row)

    def step(self, adapters: list[int], bounds: list[tuple[int, int, int]], device: Any) -> LoraStep | None:
        """The step's adapter groups from each segment's adapter index and its rows [a, b); None when every row is
        the base model's."""
        if not any(adapters):
            return None
        rows: dict[int, list[int]] = {}
        for ad, (a, b, _) in zip(adapters, bounds):
            if ad:
                rows.setdefault(ad, []).extend(range(a, b))
        total = bounds[-1][1] if bounds else 0
        if len(rows) == 1:
            ((ad, r),) = rows.items()
            if len(r) == total:
                return LoraStep([(ad, None)])
        return LoraStep([(ad, torch.tensor(r, device=device)) for ad, r in rows.items()])

    def add(self, step: LoraStep, li: int, k: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y (projection k of layer li applied to x, a fresh tensor) plus each adapter row's low-rank delta, in
        place."""
        stack = self.stacks[li][k]
        if stack is None:
            return y
        a_st, b_st = stack
        x = x.to(a_st.dtype)
        for ad, rows in step.groups:
            if rows is None:
                y.add_((x @ a_st[ad].t()) @ b_st[ad].t())
            else:
                delta = (x.index_select(0, rows) @ a_st[ad].t()) @ b_st[ad].t()
                y.index_add_(0, rows, delta.to(y.dtype))
        return y
