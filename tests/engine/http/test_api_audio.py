"""Audio to the bundled text model: transcribed by Whisper into the prompt (spec §2.4.1 exception, §3)."""

from __future__ import annotations

import asyncio
import base64

import pytest

from engine.protocol.errors import RequestValidationError
from engine.protocol.request import parse_chat_request
from engine.serving.media_parts import MediaPreparer
from tests.conftest import MODEL, sse_events
from tests.paths import DATA

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

SPEECH = DATA / "speech.flac"  # "Please remember to buy milk and bread on Friday."


def audio_message(question: str = "Repeat what I said.") -> dict:
    data = base64.b64encode(SPEECH.read_bytes()).decode()
    return {
        "role": "user",
        "content": [
            {"type": "input_audio", "input_audio": {"data": data, "format": "flac"}},
            {"type": "text", "text": question},
        ],
    }


def test_audio_is_transcribed_into_the_prompt(http, service) -> None:
    r = http.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": [audio_message()], "max_tokens": 24, "temperature": 0}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    (t,) = body["transcription"]
    assert (t["message"], t["part"]) == (0, 0)
    words = t["text"].lower()
    assert "milk" in words and "bread" in words and "friday" in words
    # the transcript really is in the prompt: it costs prompt tokens a text-only request does not
    plain = http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "Repeat what I said."}]},
    ).json()
    assert body["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"] + 8


def test_stream_reports_the_transcription_on_its_first_chunk(http) -> None:
    r = http.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": [audio_message()], "max_tokens": 4, "stream": True}
    )
    events = [e for e in sse_events(r.text) if e != "[DONE]"]
    assert "milk" in events[0]["transcription"][0]["text"].lower()
    assert all("transcription" not in e for e in events[1:])


def test_images_and_video_are_refused_before_anything_is_fetched(http) -> None:
    for part in (
        {"type": "image_url", "image_url": {"url": "http://169.254.169.254/x.png"}},
        {"type": "video_url", "video_url": "file:///etc/passwd.mp4"},
    ):
        r = http.post(
            "/v1/chat/completions",
            json={"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": [part]}]},
        )
        assert r.status_code == 422
        assert "model does not accept" in r.json()["error"]


def test_bad_audio_gets_the_media_error(http) -> None:
    part = {"type": "input_audio", "input_audio": {"data": "not base64!", "format": "wav"}}
    r = http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": [part]}]},
    )
    assert r.status_code == 422
    assert r.json()["error"].startswith("messages[0].content[0]: ")


def test_without_transcription_audio_is_refused(settings) -> None:
    req = parse_chat_request({"model": MODEL, "messages": [audio_message()]})
    with pytest.raises(RequestValidationError, match="does not accept audio input"):
        asyncio.run(MediaPreparer(settings.replace(audio_transcription=False)).prepare(req))
