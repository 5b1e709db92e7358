"""Detect a multimodal model directory and load its model, tokenizer and media processors (local files only).

Served families: Qwen2-VL and Qwen2.5-VL (image, video) and Qwen2-Audio (audio). We load the processor's parts,
not the composite processor class: `Qwen2VLProcessor` refuses to exist without a video processor, and every video
processor in transformers needs torchvision, which this project cannot install. The image processor is loaded
with the PIL backend; video inputs are built from our own sampled frames by `engine.multimodal.video`; audio goes
through the directory's Whisper feature extractor. Placeholder expansion is ours too (`inputs.py`), so the
token counts do not depend on a processor class that may not load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# model_type -> modalities its checkpoint accepts
FAMILIES: dict[str, frozenset[str]] = {
    "qwen2_vl": frozenset({"image", "video"}),
    "qwen2_5_vl": frozenset({"image", "video"}),
    "qwen2_audio": frozenset({"audio"}),
}
MROPE_TYPES = {"qwen2_vl", "qwen2_5_vl"}  # 3-D rotary positions from get_rope_index


@dataclass
class MediaProcessors:
    """What turns decoded media into one model's inputs. Token ids are the placeholders the template writes."""

    model_type: str
    modalities: frozenset[str]
    image: Any = None  # transformers image processor (PIL backend): images and, through video.py, video frames
    audio: Any = None  # WhisperFeatureExtractor
    token_ids: dict[str, int] = field(default_factory=dict)  # modality -> placeholder id ("image", "video", "audio")

    @property
    def mrope(self) -> bool:
        return self.model_type in MROPE_TYPES


def detect_modalities(path: Path) -> frozenset[str]:
    """Modalities the model in `path` accepts beyond text; empty for a text-only model."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return frozenset()
    return FAMILIES.get(str(config.get("model_type", "")), frozenset())


def _chat_template(path: Path) -> str | None:
    """A processor-level template (chat_template.jinja / chat_template.json), which VLM checkpoints often keep
    outside tokenizer_config.json."""
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    js = path / "chat_template.json"
    if js.is_file():
        template = json.loads(js.read_text()).get("chat_template")
        return template if isinstance(template, str) else None
    return None


def load_multimodal(path: Path, dtype: Any) -> tuple[Any, Any, MediaProcessors]:
    """(model in eval mode, tokenizer, processors) for a detected multimodal directory."""
    import transformers

    path = Path(path)
    config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    arch = (getattr(config, "architectures", None) or [""])[0]
    cls = getattr(transformers, arch, None) or transformers.AutoModelForImageTextToText
    model = cls.from_pretrained(path, dtype=dtype, local_files_only=True).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = _chat_template(path)
    modalities = FAMILIES[config.model_type]
    procs = MediaProcessors(config.model_type, modalities)
    if "image" in modalities:
        procs.image = transformers.AutoImageProcessor.from_pretrained(path, backend="pil", local_files_only=True)
        procs.token_ids["image"] = int(config.image_token_id)
        procs.token_ids["video"] = int(config.video_token_id)
    if "audio" in modalities:
        procs.audio = transformers.AutoFeatureExtractor.from_pretrained(path, local_files_only=True)
        procs.token_ids["audio"] = int(config.audio_token_index)
    return model, tokenizer, procs
