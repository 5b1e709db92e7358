"""Tiny random multimodal models on the real Qwen tokenizer: a Qwen2-VL (image and video) and a Qwen2-Audio.

No package ships a small Qwen2-VL or Qwen2-Audio checkpoint and nothing may come from a hub, so this builds them:
random weights (what they show is that media reaches the model and changes its logits, not what it says), the
Qwen tokenizer of demo_models/tiny_qwen_tokenizer.py, a processor saved beside the weights (the PIL image
processor, since torchvision is not installed; Whisper's feature extractor for audio) and our own chat template
that writes the media placeholders. Cached under the cache root's demo-models/, keyed by a hash of these sources
and the library versions, built under a file lock.

The vision ids are Qwen2-VL's real ones (<|vision_start|> 151652 ... <|video_pad|> 151656, present in the Qwen3
tokenizer). Qwen2-Audio's real audio ids (151646-151648) are taken by <|object_ref_start|>... in that tokenizer,
so <|AUDIO|>, <|audio_bos|> and <|audio_eos|> are added after it (151669-151671) and the config points there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from demo_models.cache import built, default_cache_dir, source_key
from demo_models.tiny_qwen_tokenizer import EOS, PAD, SPECIAL_IDS, build_tokenizer
from engine.models import save_atomically

HERE = Path(__file__).parent
SOURCES = ("tiny_mm.py", "tiny_qwen_tokenizer.py", "tiny_mm_chat_template.jinja")
CHAT_TEMPLATE = (HERE / "tiny_mm_chat_template.jinja").read_text(encoding="utf-8")
AUDIO_TOKENS = ("<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>")
CONTEXT = 8192
# Small images: at most 256 merged tokens per image (the real default is 1280 * 4 patches).
MIN_PIXELS, MAX_PIXELS = 56 * 56, 256 * 28 * 28


def tokenizer() -> Any:
    from tokenizers import AddedToken

    tok = build_tokenizer(CHAT_TEMPLATE, CONTEXT)
    tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in AUDIO_TOKENS], special_tokens=True)
    return tok


def _text_config(vocab: int) -> dict[str, Any]:
    return dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=SPECIAL_IDS[EOS],
        pad_token_id=SPECIAL_IDS[PAD],
    )


def vl_model(vocab: int) -> Any:
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    text = _text_config(vocab) | {
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]}
    }
    vision = dict(
        depth=1,
        embed_dim=32,
        hidden_size=64,
        num_heads=2,
        mlp_ratio=2,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
    )
    config = Qwen2VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=True)
    return Qwen2VLForConditionalGeneration(config).eval()


def vl25_model(vocab: int) -> Any:
    """A tiny random Qwen2.5-VL (windowed vision attention, seconds-aware video positions); built in memory."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    text = _text_config(vocab) | {
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]}
    }
    vision = dict(
        depth=2,
        hidden_size=32,
        out_hidden_size=64,
        intermediate_size=64,
        num_heads=2,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
        window_size=56,
        fullatt_block_indexes=[1],
    )
    return Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(text_config=text, vision_config=vision)).eval()


def audio_model(vocab: int, audio_id: int) -> Any:
    from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration

    audio = dict(
        num_mel_bins=128,
        encoder_layers=1,
        encoder_attention_heads=2,
        encoder_ffn_dim=64,
        d_model=32,
        max_source_positions=1500,
    )
    text = _text_config(vocab) | {"model_type": "qwen2"}
    config = Qwen2AudioConfig(audio_config=audio, text_config=text, audio_token_index=audio_id)
    config.tie_word_embeddings = True
    return Qwen2AudioForConditionalGeneration(config).eval()


def image_processor() -> Any:
    from transformers import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)


def audio_processor(tok: Any) -> Any:
    from transformers import Qwen2AudioProcessor, WhisperFeatureExtractor

    features = WhisperFeatureExtractor(feature_size=128)
    return Qwen2AudioProcessor(feature_extractor=features, tokenizer=tok, chat_template=CHAT_TEMPLATE)


def build(kind: str, cache_dir: Path | None = None) -> Path:
    """The model directory for `kind` ("vl" or "audio"), built on first use (seconds) and reused afterwards."""
    out = (cache_dir or default_cache_dir()) / f"tiny-qwen2-{kind}-{source_key(SOURCES)}"
    return built(out, lambda path: _build(kind, path))


def _build(kind: str, out: Path) -> None:
    import torch

    with torch.random.fork_rng(devices=[]):  # seeding must not change the caller's random state
        torch.manual_seed(0)
        tok = tokenizer()
        if kind == "vl":
            # Qwen2VLProcessor insists on a video processor, which needs torchvision: save its parts instead
            # (what the server loads anyway: tokenizer with the template, image processor).
            model, processor = vl_model(len(tok)), image_processor()
        else:
            model = audio_model(len(tok), tok.convert_tokens_to_ids(AUDIO_TOKENS[0]))
            processor = audio_processor(tok)
        model.generation_config.eos_token_id = [SPECIAL_IDS[EOS], SPECIAL_IDS[PAD]]
        model.generation_config.pad_token_id = SPECIAL_IDS[PAD]
        save_atomically(out, model, processor, tok)


if __name__ == "__main__":  # python -m demo_models.tiny_mm [vl|audio]: build (or find) the model and print where it is
    import sys
    import time

    began = time.monotonic()
    print(build(sys.argv[1] if len(sys.argv) > 1 else "vl"), f"{time.monotonic() - began:.1f}s")
