"""Multimodal models served from a directory: tiny random Qwen2-VL (image, video) and Qwen2-Audio (audio).

Random weights say nothing sensible, so the tests check what reaches the model: prompt tokens that count the media
tokens, logits that change with the media and only with it, the spec's errors for modalities a model lacks, and
M-RoPE positions computed per sequence that reproduce the HF forward's logits.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import numpy as np
import pytest
import torch

from demo_models.tiny_mm import build
from engine.multimodal import build_inputs, load_multimodal
from engine.multimodal.inputs import audio_tokens
from engine.multimodal.video import video_patches
from tests import media_samples as ms
from tests.conftest import AUDIO, VL, LiveServer
from tests.paths import DATA

LAYER = "model"  # what this module's own fixtures or bodies need (tests/conftest.py)

SPEECH = DATA / "speech.flac"


@pytest.fixture(scope="session")
def vl_parts() -> tuple[Any, Any, Any]:
    return load_multimodal(build("vl"), torch.float32)


def image_part(color: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (64, 48)) -> dict:
    return {"type": "image_url", "image_url": {"url": ms.data_url("image/png", ms.image_bytes("PNG", size, color))}}


def audio_part(data: bytes, fmt: str = "flac") -> dict:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def ask(server: LiveServer, model: str, parts: list[dict], **extra: Any) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": [*parts, {"type": "text", "text": "What?"}]}],
        "max_tokens": 2,
        "temperature": 0,
    } | extra
    with server.client() as c:
        return c.post("/v1/chat/completions", json=body)


def top(body: dict) -> list[tuple[str, float]]:
    first = body["choices"][0]["logprobs"]["content"][0]
    return [(t["token"], round(t["logprob"], 5)) for t in first["top_logprobs"]]


# ---- inputs and runner, without a server ---------------------------------------------------------------------------


def test_a_still_video_patchifies_exactly_like_the_image(vl_parts) -> None:
    from PIL import Image

    _, _, procs = vl_parts
    pixels = np.random.RandomState(0).randint(0, 255, (100, 140, 3), dtype=np.uint8)
    ref = procs.image(images=[Image.fromarray(pixels)], return_tensors="np")
    patches, grid = video_patches(np.stack([pixels] * procs.image.temporal_patch_size), procs.image)
    assert grid == tuple(ref["image_grid_thw"][0])
    np.testing.assert_array_equal(patches, ref["pixel_values"])


def test_runner_positions_give_the_hf_forward_logits(vl_parts) -> None:
    """Prefill with an image, then decode, interleaved with a text-only request and a fork: every step's logits
    equal the HF model's own forward over the whole sequence (which computes M-RoPE itself)."""
    from PIL import Image

    from engine.core.model_runner import KVCache, Segment, make_runner
    from engine.media import LoadedMedia

    model, tok, procs = vl_parts
    runner = make_runner(model, "cpu")
    text = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    image = Image.fromarray(np.random.RandomState(1).randint(0, 255, (60, 90, 3), dtype=np.uint8))
    media = LoadedMedia("image", "image/png", "data_url", 1, "x", image=image)
    inputs = build_inputs(tok(text, add_special_tokens=False)["input_ids"], [media], procs)

    def reference(ids: list[int], mm: dict | None) -> torch.Tensor:
        full = torch.tensor([ids])
        types = (full == model.config.image_token_id).int()
        model.model.rope_deltas = None  # the attribute the runner must not depend on
        return model(input_ids=full, mm_token_type_ids=types, **(mm or {})).logits[0, -1]

    with torch.inference_mode():
        cache, plain = KVCache(), KVCache()
        text_ids = tok("A plain question", add_special_tokens=False)["input_ids"]
        logits = runner.forward([Segment(cache, inputs.ids, mm=inputs.tensors), Segment(plain, text_ids)])
        torch.testing.assert_close(logits[0], reference(inputs.ids, inputs.tensors), atol=1e-4, rtol=0)
        torch.testing.assert_close(logits[1], reference(text_ids, None), atol=1e-4, rtol=0)
        assert cache.rope_delta < 0  # the image's tokens take fewer positions than tokens
        ids = inputs.ids + [int(logits[0].argmax())]
        fork = runner.fork(cache)
        assert fork.rope_delta == cache.rope_delta
        for c in (plain, cache, fork):  # interleaved decodes: the text request between the two image sequences
            if c is plain:
                runner.forward([Segment(plain, [7])])
                continue
            step = runner.forward([Segment(c, [ids[-1]])])
            torch.testing.assert_close(step[0], reference(ids, inputs.tensors), atol=1e-4, rtol=0)


def test_vl_decode_rows_batch_with_their_own_rope_deltas(vl_parts) -> None:
    """An image sequence, its fork and a text-only one decode in one batch (the runner's cohort): each row keeps its
    own M-RoPE delta, and every step's logits equal the HF forward over the whole sequence."""
    from PIL import Image

    from engine.core.hf_runner import HFRunner
    from engine.core.model_runner import KVCache, Segment, make_runner
    from engine.media import LoadedMedia

    model, tok, procs = vl_parts
    runner = make_runner(model, "cpu")
    assert isinstance(runner, HFRunner) and runner.batched and runner.mrope
    text = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    image = Image.fromarray(np.random.RandomState(2).randint(0, 255, (60, 90, 3), dtype=np.uint8))
    inputs = build_inputs(
        tok(text, add_special_tokens=False)["input_ids"],
        [LoadedMedia("image", "image/png", "data_url", 1, "x", image=image)],
        procs,
    )

    def reference(ids: list[int], mm: dict | None) -> torch.Tensor:
        full = torch.tensor([ids])
        model.model.rope_deltas = None
        return model(
            input_ids=full, mm_token_type_ids=(full == model.config.image_token_id).int(), **(mm or {})
        ).logits[0, -1]

    with torch.inference_mode():
        img, plain = KVCache(), KVCache()
        history = {"img": list(inputs.ids), "plain": tok("A plain question", add_special_tokens=False)["input_ids"]}
        runner.forward([Segment(img, inputs.ids, mm=inputs.tensors), Segment(plain, history["plain"])])
        caches = {"img": img, "plain": plain}
        for t in range(4):
            if t == 1:
                caches["fork"], history["fork"] = runner.fork(img), list(history["img"])
            names = list(caches)
            for i, n in enumerate(names):
                history[n].append(11 + 3 * t + i)
            out = runner.forward([Segment(caches[n], [history[n][-1]]) for n in names])
            assert runner.cohort is not None and len(runner.cohort.members) == len(names)
            for row, n in zip(out, names):
                torch.testing.assert_close(
                    row, reference(history[n], None if n == "plain" else inputs.tensors), atol=1e-4, rtol=0
                )
        assert img.rope_delta < 0 and caches["fork"].rope_delta == img.rope_delta and plain.rope_delta == 0
        for c in caches.values():
            runner.release(c)


def test_qwen2_5_vl_image_and_video_positions(vl_parts) -> None:
    """Qwen2.5-VL (in memory): an image and a video in one prompt, positions spaced by seconds per temporal patch."""
    from PIL import Image

    from demo_models.tiny_mm import vl25_model
    from engine.core.model_runner import KVCache, Segment, make_runner
    from engine.media import LoadedMedia, Video
    from engine.multimodal import MediaProcessors

    _, tok, vl_procs = vl_parts
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = vl25_model(len(tok))
    cfg = model.config
    procs = MediaProcessors(
        "qwen2_5_vl",
        frozenset({"image", "video"}),
        image=vl_procs.image,
        token_ids={"image": cfg.image_token_id, "video": cfg.video_token_id},
    )
    frames = np.random.RandomState(0).randint(0, 255, (6, 60, 80, 3), dtype=np.uint8)
    media = [
        LoadedMedia("image", "image/png", "data_url", 1, "i", image=Image.fromarray(frames[0])),
        LoadedMedia(
            "video", "video/mp4", "data_url", 1, "v", video=Video(frames, [0.0, 0.5, 1.0, 1.5, 2.0, 2.5], 3.0, 10.0)
        ),
    ]
    parts = [{"type": "image"}, {"type": "video"}, {"type": "text", "text": "Hi"}]
    text = tok.apply_chat_template([{"role": "user", "content": parts}], tokenize=False, add_generation_prompt=True)
    inputs = build_inputs(tok(text, add_special_tokens=False)["input_ids"], media, procs)
    assert float(inputs.tensors["second_per_grid_ts"][0]) == 1.0  # 2 frames per patch, 0.5 s apart
    with torch.inference_mode():
        cache = KVCache()
        first = make_runner(model, "cpu").forward([Segment(cache, inputs.ids, mm=inputs.tensors)])
        full = torch.tensor([inputs.ids])
        types = (full == cfg.image_token_id).int() + 2 * (full == cfg.video_token_id).int()
        ref = model(input_ids=full, mm_token_type_ids=types, **inputs.tensors).logits[0, -1]
    torch.testing.assert_close(first[0], ref, atol=1e-4, rtol=0)


# ---- the VL model through the API ----------------------------------------------------------------------------------


def test_image_counts_its_tokens_in_the_prompt(vl_live, vl_parts) -> None:
    from PIL import Image

    r = ask(vl_live, VL, [image_part(size=(100, 70))])
    assert r.status_code == 200, r.text
    body = r.json()
    _, tok, procs = vl_parts
    text = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What?"}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    placeholders = len(tok(text, add_special_tokens=False)["input_ids"])
    grid = procs.image(images=[Image.new("RGB", (100, 70))], return_tensors="pt")["image_grid_thw"]
    image_tokens = int(grid.prod()) // procs.image.merge_size**2
    assert body["usage"]["prompt_tokens"] == placeholders - 1 + image_tokens  # one placeholder became the image
    assert body["media"] == [{"message": 0, "part": 0, "type": "image", "tokens": image_tokens}]


def test_logits_follow_the_image(vl_live) -> None:
    def run(color: tuple[int, int, int]) -> dict:
        r = ask(vl_live, VL, [image_part(color)], logprobs=True, top_logprobs=5, max_tokens=1)
        assert r.status_code == 200, r.text
        return r.json()

    red, red_again, blue = run((220, 20, 20)), run((220, 20, 20)), run((20, 20, 220))
    assert top(red) == top(red_again)
    assert top(red) != top(blue)
    # same text, other image: no KV reused across different media
    assert blue["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_video_reports_its_frames_and_tokens(vl_live) -> None:
    video = ms.video_bytes("mp4", seconds=2.0, fps=10, size=(64, 48))
    part = {"type": "video_url", "video_url": {"url": ms.data_url("video/mp4", video)}}
    r = ask(vl_live, VL, [part])
    assert r.status_code == 200, r.text
    body = r.json()
    (report,) = body["media"]
    assert report["type"] == "video" and report["frames_sampled"] == 4  # 2 s at the default 2 frames/s
    # 64x48 frames -> 56x56 (4 x 4 patches, 2 x 2 merged); 4 frames -> 2 temporal patches: 8 tokens
    assert report["tokens"] == 8
    plain = ask(vl_live, VL, []).json()["usage"]["prompt_tokens"]
    assert body["usage"]["prompt_tokens"] == plain + 2 + report["tokens"]  # vision_start/end + the video


def test_n2_and_text_only_on_the_vl_model(vl_live) -> None:
    r = ask(vl_live, VL, [image_part()], n=2, temperature=1.0, seed=3, max_tokens=3)
    assert r.status_code == 200, r.text
    assert [c["index"] for c in r.json()["choices"]] == [0, 1]
    with vl_live.client() as c:
        r = c.post(
            "/v1/chat/completions",
            json={"model": VL, "max_tokens": 2, "messages": [{"role": "user", "content": "Hello"}]},
        )
    assert r.status_code == 200, r.text
    assert "media" not in r.json()


def test_stream_reports_media_on_its_first_chunk(vl_live) -> None:
    from tests.conftest import sse_events

    r = ask(vl_live, VL, [image_part()], stream=True)
    assert r.status_code == 200, r.text
    events = [e for e in sse_events(r.text) if e != "[DONE]"]
    assert events[0]["media"][0]["type"] == "image"
    assert all("media" not in e for e in events[1:])


def test_a_template_without_the_placeholder_is_refused(vl_live) -> None:
    template = "{% for m in messages %}{{ m.role }}: {{ m.content if m.content is string else '' }}\n{% endfor %}"
    r = ask(vl_live, VL, [image_part()], chat_template=template)
    assert r.status_code == 422
    assert "chat_template" in r.json()["error"] and "placed 0 of the request's 1 image parts" in r.json()["error"]


def test_vl_model_refuses_audio(vl_live) -> None:
    r = ask(vl_live, VL, [audio_part(SPEECH.read_bytes())])
    assert r.status_code == 422
    assert "messages[0].content[0]: model does not accept audio input" in r.json()["error"]


def test_models_route_reports_input_modalities(vl_live, audio_live) -> None:
    for server, name, modalities in ((vl_live, VL, ["text", "image", "video"]), (audio_live, AUDIO, ["text", "audio"])):
        with server.client() as c:
            (card,) = c.get("/v1/models").json()["data"]
            assert c.get(f"/v1/models/{name}").json() == card
        assert card["id"] == name and card["max_model_len"] > 0  # the spec's fields stay as they are
        assert card["input_modalities"] == modalities


# ---- the audio model -----------------------------------------------------------------------------------------------


def test_audio_reaches_the_audio_model(audio_live) -> None:
    speech = ask(audio_live, AUDIO, [audio_part(SPEECH.read_bytes())], logprobs=True, top_logprobs=5)
    assert speech.status_code == 200, speech.text
    body = speech.json()
    (report,) = body["media"]
    frames = round(report["duration"] * 100)  # Whisper features: 100 frames a second
    assert abs(report["tokens"] - audio_tokens(frames)) <= 1
    plain = ask(audio_live, AUDIO, []).json()["usage"]["prompt_tokens"]
    assert body["usage"]["prompt_tokens"] == plain + 2 + report["tokens"]  # audio_bos/eos + the audio
    tone = ask(audio_live, AUDIO, [audio_part(ms.audio_bytes("wav"), "wav")], logprobs=True, top_logprobs=5)
    assert tone.status_code == 200, tone.text
    assert top(tone.json()) != top(body)


def test_audio_model_refuses_images(audio_live) -> None:
    r = ask(audio_live, AUDIO, [image_part()])
    assert r.status_code == 422
    assert "messages[0].content[0]: model does not accept image input" in r.json()["error"]
