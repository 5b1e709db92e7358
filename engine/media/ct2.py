"""Read a CTranslate2 Whisper `model.bin` and turn it into transformers' WhisperForConditionalGeneration weights.

The format (CTranslate2's python/ctranslate2/specs/model_spec.py, binary version <= 6), little-endian: u32
version, string spec name, u32 spec revision, u32 variable count, then per variable: string name, u8 rank, rank
x u32 dims, u8 dtype (0 f32, 1 i8, 2 i16, 3 i32, 4 f16, 5 bf16), u32 byte count, raw data; then u32 alias
count and (alias, target) string pairs. A string is u16 length (with its NUL), the bytes, a NUL.

Layout: encoder/decoder `layer_{i}`, `self_attention` with fused q|k|v in `linear_0` (zero k bias, which
Whisper lacks) and the output in `linear_1`; the decoder's cross `attention` has q in `linear_0`, fused k|v in
`linear_1` and the output in `linear_2`; `ffn/linear_0|1` are fc1/fc2; layer norms are gamma/beta.
"""

from __future__ import annotations

import re
import struct
from typing import Any

import numpy as np

_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: np.uint16}
_GELU = 3  # CTranslate2's ActivationType::GELU


class CT2FormatError(ValueError):
    pass


def read_model_bin(data: bytes) -> tuple[str, dict[str, np.ndarray]]:
    """(spec name, variables) with aliases resolved; bfloat16 is widened to float32."""
    pos = 0

    def take(fmt: str) -> Any:
        nonlocal pos
        (value,) = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal pos
        size = take("H")
        pos += size
        return data[pos - size : pos - 1].decode()

    version = take("I")
    if not 1 <= version <= 6:
        raise CT2FormatError(f"unsupported CTranslate2 binary version {version}")
    name = string() if version >= 2 else ""
    if version >= 3:
        take("I")  # spec revision
    variables: dict[str, np.ndarray] = {}
    for _ in range(take("I")):
        key = string()
        shape = [take("I") for _ in range(take("B"))]
        dtype = _DTYPES.get(take("B"))
        size = take("I")
        if dtype is None:
            raise CT2FormatError(f"unsupported dtype for {key}")
        array = np.frombuffer(data, dtype, size // np.dtype(dtype).itemsize, pos).reshape(shape)
        if dtype is np.uint16:  # bfloat16: the high half of a float32
            array = (array.astype(np.uint32) << 16).view(np.float32)
        variables[key] = array
        pos += size
    if version >= 5:
        for _ in range(take("I")):
            alias, target = string(), string()
            variables[alias] = variables[target]
    return name, variables


def whisper_config(v: dict[str, np.ndarray]) -> dict[str, Any]:
    """WhisperConfig arguments read off the variable shapes; refuses what the mapping below cannot express."""
    if any(k.endswith("weight_scale") for k in v):
        raise CT2FormatError("quantized CTranslate2 weights are not supported")
    if int(v["decoder/activation"]) != _GELU or int(v["decoder/scale_embeddings"]) or not int(v["decoder/pre_norm"]):
        raise CT2FormatError("not a Whisper decoder (activation, embedding scale or norm placement differ)")
    layers = {
        side: len({m[1] for k in v if (m := re.match(rf"{side}/layer_(\d+)/", k))}) for side in ("encoder", "decoder")
    }
    vocab, d_model = v["decoder/embeddings/weight"].shape
    return {
        "vocab_size": int(vocab),
        "d_model": int(d_model),
        "num_mel_bins": int(v["encoder/conv1/weight"].shape[1]),
        "encoder_layers": layers["encoder"],
        "decoder_layers": layers["decoder"],
        "encoder_attention_heads": int(v["encoder/num_heads"]),
        "decoder_attention_heads": int(v["decoder/num_heads"]),
        "encoder_ffn_dim": int(v["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "decoder_ffn_dim": int(v["decoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "max_source_positions": int(v["encoder/position_encodings/encodings"].shape[0]),
        "max_target_positions": int(v["decoder/position_encodings/encodings"].shape[0]),
        "tie_word_embeddings": v["decoder/projection/weight"] is v["decoder/embeddings/weight"],
    }


def whisper_state_dict(v: dict[str, np.ndarray], config: dict[str, Any]) -> dict[str, np.ndarray]:
    """HF parameter name -> array, for WhisperForConditionalGeneration."""
    d = config["d_model"]
    out: dict[str, np.ndarray] = {}

    def linear(dst: str, src: str) -> None:
        out[f"{dst}.weight"], out[f"{dst}.bias"] = v[f"{src}/weight"], v[f"{src}/bias"]

    def norm(dst: str, src: str) -> None:
        out[f"{dst}.weight"], out[f"{dst}.bias"] = v[f"{src}/gamma"], v[f"{src}/beta"]

    def split(dst: str, src: str, names: str) -> None:
        weight, bias = v[f"{src}/weight"], v[f"{src}/bias"]
        for i, n in enumerate(names):
            out[f"{dst}.{n}_proj.weight"] = weight[i * d : (i + 1) * d]
            if n != "k":  # Whisper's key projections have no bias; CTranslate2 stores zeros
                out[f"{dst}.{n}_proj.bias"] = bias[i * d : (i + 1) * d]

    for side in ("encoder", "decoder"):
        out[f"model.{side}.embed_positions.weight"] = v[f"{side}/position_encodings/encodings"]
        norm(f"model.{side}.layer_norm", f"{side}/layer_norm")
        for i in range(config[f"{side}_layers"]):
            hf, ct = f"model.{side}.layers.{i}", f"{side}/layer_{i}"
            split(f"{hf}.self_attn", f"{ct}/self_attention/linear_0", "qkv")
            linear(f"{hf}.self_attn.out_proj", f"{ct}/self_attention/linear_1")
            norm(f"{hf}.self_attn_layer_norm", f"{ct}/self_attention/layer_norm")
            linear(f"{hf}.fc1", f"{ct}/ffn/linear_0")
            linear(f"{hf}.fc2", f"{ct}/ffn/linear_1")
            norm(f"{hf}.final_layer_norm", f"{ct}/ffn/layer_norm")
            if side == "decoder":
                linear(f"{hf}.encoder_attn.q_proj", f"{ct}/attention/linear_0")
                split(f"{hf}.encoder_attn", f"{ct}/attention/linear_1", "kv")
                linear(f"{hf}.encoder_attn.out_proj", f"{ct}/attention/linear_2")
                norm(f"{hf}.encoder_attn_layer_norm", f"{ct}/attention/layer_norm")
    linear("model.encoder.conv1", "encoder/conv1")
    linear("model.encoder.conv2", "encoder/conv2")
    out["model.decoder.embed_tokens.weight"] = v["decoder/embeddings/weight"]
    if not config["tie_word_embeddings"]:
        out["proj_out.weight"] = v["decoder/projection/weight"]
    return out
