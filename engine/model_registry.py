"""The models a server may serve (`--model`, repeated, and `--models-dir`), described without loading weights.

Each candidate is a Hugging Face model directory (config.json and weights) or a .gguf file. What the page's picker
and `/v1/models` say of it is read from its files alone: bytes on disk, parameter count (the safetensors headers or
the GGUF tensor table), architecture (`model_type`), context length, the media it takes (the multimodal families
engine/multimodal knows, as the loader picks them), and from its chat template and tokenizer whether it can reason
(`<think>` and `</think>` are tokens of their own, as engine/serving/reasoning.py requires) and call tools (the
parser `tool_call_parser` would select, engine/parsers). `memory_bytes` estimates what loading it costs: the weights
at the compute dtype plus the KV page pool the engine reserves (`--kv-cache-tokens`).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.models import DEFAULT_NAME, dir_name
from engine.multimodal import detect_modalities
from engine.parsers import select_parser

# Bytes a parameter at --quantization int4 / int8 (engine/core/quant.py): 4- or 8-bit codes plus a half scale and
# a half offset per group of 32 weights.
PACKED_BYTES = {"int4": (4 + 32 / 32) / 8, "int8": (8 + 32 / 32) / 8}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
THINK = ("<think>", "</think>")


@dataclass(frozen=True)
class Candidate:
    """One model the server can load: `source` is what `--model` would take ("" for the bundled SmolLM2)."""

    id: str
    source: str
    format: str  # "hf" or "gguf"
    size_bytes: int  # weights on disk
    parameters: int | None  # None when the files do not say (a .bin checkpoint)
    architecture: str  # config.json model_type, or the GGUF general.architecture
    context_length: int
    modalities: frozenset[str] = frozenset()  # media the model takes itself: image, video, audio
    reasoning: bool = False
    tools: bool = False
    kv_bytes_per_token: int = 0  # keys and values of every layer, at 2 bytes an element
    # Sliding-window layers (Gemma 3): the window, and their share of kv_bytes_per_token; a sequence holds only its
    # window of them (engine/core/window_kv.py).
    window: int = 0
    window_bytes_per_token: int = 0
    # Not on disk yet (a bundled model before its first use): what loading it downloads first, and the facts above
    # come from what its publisher says (`describe_static`), not from its files.
    download_bytes: int = 0
    # A precision entry (`--models SOURCE@int4`): the same model served at another precision (PRECISIONS), its id
    # the base id + "@" + precision; "" for the model as the server's flags serve it.
    precision: str = ""
    # The GGUF a Hugging Face directory was converted from (the bundled models, a `--model FILE.gguf`), whose
    # blocks `--quantization auto` serves: its bytes; 0 for none.
    gguf_bytes: int = 0

    def memory_bytes(
        self, bytes_per_param: int, kv_tokens: int, seqs: int = 0, kv_element: int = 0, quantization: str = "none"
    ) -> int:
        """What holding this model loaded costs, estimated: its weights as they will be held and its KV pools (the
        sliding layers' sized for `seqs` live sequences, as the runner sizes it) at `kv_element` bytes an element
        (--kv-cache-dtype; 0: the compute dtype's). The weights: packed where they stay quantized (a GGUF under
        `auto`, or the one a directory came from: its bytes on disk; `int4` / `int8`: PACKED_BYTES a parameter), else at the compute dtype
        (`bytes_per_param`); a precision entry's own quantization and dtype win over the server's."""
        from engine.core.window_kv import pool_tokens

        own = PRECISIONS.get(self.precision, {})
        mode = own.get("quantization", quantization)
        dtype_bytes = {"fp32": 4, "bf16": 2}.get(own.get("dtype", ""), bytes_per_param)
        if mode == "auto" and (self.format == "gguf" or self.gguf_bytes):
            weights = self.gguf_bytes or self.size_bytes
        elif mode in PACKED_BYTES and self.parameters:
            weights = int(self.parameters * PACKED_BYTES[mode])
        else:
            weights = self.parameters * dtype_bytes if self.parameters else self.size_bytes
        full = self.kv_bytes_per_token - self.window_bytes_per_token
        window = pool_tokens(self.window, kv_tokens, seqs, 0) if self.window else kv_tokens
        kv = full * kv_tokens + self.window_bytes_per_token * window
        return weights + kv * (kv_element or dtype_bytes) // 2

    def describe(self) -> dict[str, Any]:
        """The fields `/v1/models` and the page show (never a filesystem path, spec §1.3)."""
        out = {
            "architecture": self.architecture,
            "size_bytes": self.size_bytes,
            "parameters": self.parameters,
            "context_length": self.context_length,
            "reasoning": self.reasoning,
            "tools": self.tools,
        }
        out |= {"download_bytes": self.download_bytes} if self.download_bytes else {}
        return out | ({"precision": self.precision} if self.precision else {})


def _safetensors_parameters(path: Path) -> int:
    """Elements of every tensor in one .safetensors file, from its JSON header (the first 8 bytes say its length)."""
    with open(path, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
    return sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")


def _kv_per_token(cfg: dict[str, Any], layers: int | None = None) -> int:
    layers = int(cfg.get("num_hidden_layers") or 0) if layers is None else layers
    heads = int(cfg.get("num_attention_heads") or 0)
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or (int(cfg.get("hidden_size") or 0) // heads if heads else 0))
    return layers * 2 * kv_heads * head_dim * 2


def _window_kv(cfg: dict[str, Any]) -> dict[str, Any]:
    """Candidate.window and window_bytes_per_token of a config whose `layer_types` name sliding layers."""
    kinds = (cfg.get("layer_types") or [])[: int(cfg.get("num_hidden_layers") or 0)]
    sliding = sum(1 for t in kinds if t == "sliding_attention")
    window = int(cfg.get("sliding_window") or 0)
    if not (sliding and window):
        return {}
    return {"window": window, "window_bytes_per_token": _kv_per_token(cfg, sliding)}


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _template(path: Path, tok_cfg: dict[str, Any]) -> str:
    source = tok_cfg.get("chat_template")
    if isinstance(source, list):  # named templates: the default one
        source = next((t.get("template") for t in source if t.get("name") == "default"), None)
    if isinstance(source, str):
        return source
    if (path / "chat_template.jinja").is_file():
        return (path / "chat_template.jinja").read_text(encoding="utf-8")
    return str(_json(path / "chat_template.json").get("chat_template") or "")


def _special_tokens(path: Path, tok_cfg: dict[str, Any]) -> set[str]:
    """The tokenizer's added tokens (tokenizer_config.json, else tokenizer.json), each one id of its own."""
    added = {str(t.get("content")) for t in tok_cfg.get("added_tokens_decoder", {}).values() if isinstance(t, dict)}
    if not added and (path / "tokenizer.json").is_file():
        added = {str(t.get("content")) for t in _added_tokens(path / "tokenizer.json")}
    return added


def _added_tokens(path: Path) -> list[Any]:
    """tokenizer.json's `added_tokens`, decoded alone where they come before the model's vocabulary and merges, as
    the tokenizers library writes the file (SmolLM2's is 3.5 MB, Gemma 3's 33 MB, of which decoding all took 1-2 s
    of every start, and reading it all ~0.4 s: it is read from its start until the list ends); from the whole file
    otherwise."""
    try:
        with path.open("rb") as f:
            data, size = b"", HEAD_BYTES
            while True:  # 256 KiB, then 1 MiB, 4 MiB...: Gemma 3's list ends at 1.2 MB
                chunk = f.read(size - len(data))
                data += chunk
                text = data.decode("utf-8", errors="replace")  # a character cut at the end is never parsed
                tokens = _leading_added_tokens(text)
                if tokens is not None:
                    return tokens
                if len(data) < size:  # the whole file
                    break
                size *= 4
    except OSError:
        return []
    found = _json(path).get("added_tokens", [])
    return [t for t in found if isinstance(t, dict)] if isinstance(found, list) else []


HEAD_BYTES = 256 * 1024


def _leading_added_tokens(text: str) -> list[Any] | None:
    """The `added_tokens` list where it comes before the model's vocabulary in `text` (the file or its start) and
    ends in it; None otherwise. A start of the file gives the same answer as the whole: a `"model"` key it does not
    hold comes after the list, and a list that does not end in it does not parse."""
    at, model = text.find('"added_tokens"'), text.find('"model"')
    if at >= 0 and (model < 0 or at < model):
        start = text.find("[", at)
        if start > 0 and text[at + len('"added_tokens"') : start].strip() == ":":
            try:
                tokens, _ = json.JSONDecoder().raw_decode(text, start)
            except ValueError:
                tokens = None
            if isinstance(tokens, list) and all(isinstance(t, dict) for t in tokens):
                return tokens
    return None


def describe_hf(path: Path, model_id: str, source: str, tool_call_parser: str = "auto") -> Candidate:
    config = _json(path / "config.json")
    sub = config.get("text_config")
    text: dict[str, Any] = sub if isinstance(sub, dict) else config
    weights = [p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file()]
    shards = [p for p in weights if p.suffix == ".safetensors"]
    parameters = sum(_safetensors_parameters(p) for p in shards) if shards else None
    tok_cfg = _json(path / "tokenizer_config.json")
    special = _special_tokens(path, tok_cfg)
    model_type = str(config.get("model_type") or "")
    template = _template(path, tok_cfg)
    return Candidate(
        id=model_id,
        source=source,
        format="hf",
        size_bytes=sum(p.stat().st_size for p in weights),
        parameters=parameters,
        architecture=model_type,
        context_length=int(text.get("max_position_embeddings") or tok_cfg.get("model_max_length") or 2048),
        modalities=detect_modalities(path),
        reasoning=all(t in special for t in THINK),
        tools=select_parser(tool_call_parser, template, model_type, special) is not None,
        kv_bytes_per_token=_kv_per_token(text),
        **_window_kv(text),
    )


def describe_gguf(path: Path, model_id: str, tool_call_parser: str = "auto") -> Candidate:
    """From the GGUF header and tensor table (memory-mapped by the `gguf` package; nothing is dequantized)."""
    from gguf import GGUFReader

    reader = GGUFReader(path)

    def field_value(key: str) -> Any:
        f = reader.fields.get(key)
        return f.contents() if f is not None else None

    arch = str(field_value("general.architecture") or "")
    tokens = field_value("tokenizer.ggml.tokens") or []
    special = {t for t in tokens if isinstance(t, str) and t.startswith("<") and t.endswith(">")}
    heads = int(field_value(f"{arch}.attention.head_count") or 0)
    cfg = {
        "num_hidden_layers": field_value(f"{arch}.block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": field_value(f"{arch}.attention.head_count_kv"),
        "head_dim": field_value(f"{arch}.attention.key_length"),
        "hidden_size": field_value(f"{arch}.embedding_length"),
    }
    template = str(field_value("tokenizer.chat_template") or "")
    return Candidate(
        id=model_id,
        source=str(path),
        format="gguf",
        size_bytes=path.stat().st_size,
        parameters=sum(int(t.n_elements) for t in reader.tensors),
        architecture=arch,
        context_length=int(field_value(f"{arch}.context_length") or 2048),
        reasoning=all(t in special for t in THINK),
        tools=select_parser(tool_call_parser, template, arch, special) is not None,
        kv_bytes_per_token=_kv_per_token(cfg),
    )


def describe_static(
    source: str,
    model_id: str,
    config: dict[str, Any],
    parameters: int,
    download_bytes: int,
    reasoning: bool = False,
    tools: bool = False,
) -> Candidate:
    """A model not on disk yet (a bundled one, fetched on first use), from the facts its publisher states: the
    config.json fields read above and its parameter count; `size_bytes` is its weights at bf16."""
    return Candidate(
        id=model_id,
        source=source,
        format="hf",
        size_bytes=2 * parameters,
        parameters=parameters,
        architecture=str(config.get("model_type") or ""),
        context_length=int(config.get("max_position_embeddings") or 2048),
        modalities=frozenset(),
        reasoning=reasoning,
        tools=tools,
        kv_bytes_per_token=_kv_per_token(config),
        **_window_kv(config),
        download_bytes=download_bytes,
    )


def is_candidate(path: Path) -> bool:
    if path.is_file():
        return path.suffix == ".gguf"
    return (path / "config.json").is_file() and any(p.suffix in WEIGHT_SUFFIXES for p in path.iterdir())


def describe(source: str, model_id: str, resolved: Path | None = None, tool_call_parser: str = "auto") -> Candidate:
    """`source` as `--model` takes it; `resolved`: the HF directory it already became (the bundled model's
    converted cache), read instead of the source."""
    path = resolved or Path(source).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return describe_gguf(path, model_id, tool_call_parser)
    if not is_candidate(path):
        raise FileNotFoundError(f"not a Hugging Face model directory or a .gguf file: {Path(source).name or source}")
    return describe_hf(path, model_id, source, tool_call_parser)


def default_id(source: str) -> str:
    """The id a model gets without `--served-model-name`: its directory name or file stem (as engine/models.py)."""
    if not source:
        return DEFAULT_NAME
    path = Path(source).expanduser()
    return path.stem if path.suffix == ".gguf" else dir_name(path)


def sources(models: Iterable[str], models_dir: str) -> list[str]:
    """Every `--model` given, then each candidate in `--models-dir` (sorted by name), each once."""
    found = list(dict.fromkeys(models))
    if models_dir:
        root = Path(models_dir).expanduser()
        if not root.is_dir():
            raise FileNotFoundError(f"--models-dir is not a directory: {models_dir}")
        seen = {str(Path(s).expanduser().resolve()) for s in found if s}
        found += [str(p) for p in sorted(root.iterdir()) if is_candidate(p) and str(p.resolve()) not in seen]
    return found


# A model's precision entries (issue 32): `--model` / `--models` SOURCE@PRECISION serves SOURCE with these settings
# instead of the server's `--quantization` / `--dtype`, as a pool entry of its own, so A/B, the prompt grid, the
# equivalence check and the quality meter (engine/serving/quality.py) compare precisions directly.
PRECISIONS: dict[str, dict[str, str]] = {
    "none": {"quantization": "none"},  # dequantized, at the server's dtype
    "fp32": {"quantization": "none", "dtype": "fp32"},  # the quality meter's reference
    "bf16": {"quantization": "none", "dtype": "bf16"},
    "int8": {"quantization": "int8"},
    "int4": {"quantization": "int4"},
}


def split_precision(source: str) -> tuple[str, str]:
    """(base source, precision) of a `--models` value: "gemma-3-270m@int4" -> ("gemma-3-270m", "int4"); the bundled
    default by its id ("SmolLM2-135M-Instruct@bf16") or by nothing ("@bf16"); a path that exists as written is
    never split."""
    base, at, precision = source.rpartition("@")
    if not at or precision not in PRECISIONS or Path(source).expanduser().exists():
        return source, ""
    return ("" if base.lower() == DEFAULT_NAME.lower() and not Path(base).exists() else base), precision


def variant(base: Candidate, precision: str) -> Candidate:
    """`base` served at `precision` (PRECISIONS), as an entry of its own."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return replace(base, id=f"{base.id}@{precision}", precision=precision)


def unique(candidates: list[Candidate]) -> list[Candidate]:
    """Refuse two candidates with one id: a request could not say which it means."""
    ids: dict[str, Candidate] = {}
    for c in candidates:
        if c.id in ids:
            raise ValueError(f"two models have the id {c.id!r}: rename one (its directory or file)")
        ids[c.id] = c
    return candidates
