"""The playground's attachments, remote statistics, replay diffs and media history, without a browser or a model."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from engine.protocol.request import parse_chat_request
from engine.protocol.response import ChatCompletionChunk, ChunkChoice, Delta, TokenTimeline, Usage
from playground.client import stats
from playground.client.reply import ChoiceView, ReplyView
from playground.page import attachments, export
from playground.page.conversation import Conversation, Turn, display
from playground.page.request_diff import request_diff, text_diff
from tests.media_samples import image_bytes
from tests.paths import DATA

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

SPEECH = DATA / "speech.flac"


def png_file(tmp_path: Path) -> Path:
    path = tmp_path / "red.png"
    path.write_bytes(image_bytes("PNG", (32, 24)))
    return path


def test_files_become_the_content_parts_the_api_parses(tmp_path: Path) -> None:
    png = png_file(tmp_path)
    image = attachments.file_part(str(png), "image")
    assert image == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()},
    }
    audio = attachments.file_part(str(SPEECH), "audio")
    assert audio["type"] == "input_audio" and audio["input_audio"]["format"] == "flac"
    assert base64.b64decode(audio["input_audio"]["data"]) == SPEECH.read_bytes()
    assert attachments.file_part(str(png), "image", attachments.URL) == {
        "type": "image_url",
        "image_url": {"url": f"file://{png.resolve()}"},
    }
    url = attachments.url_part(" https://example.com/clip.mp4 ", "video")
    assert url == {"type": "video_url", "video_url": {"url": "https://example.com/clip.mp4"}}
    body = {"model": "m", "messages": [{"role": "user", "content": [image, audio, url, {"type": "text", "text": "?"}]}]}
    parse_chat_request(body)  # the API's own parser takes every form
    assert attachments.kind_of("https://h/a.WAV?x=1") == "audio" and attachments.kind_of("a.gif") is None


def test_summary_names_what_the_server_saw_and_how_it_is_sent() -> None:
    part = attachments.url_part("data:image/png;base64,AAAA", "image")
    line = attachments.summary(
        {"kind": "image", "mime": "image/png", "bytes": 2048, "width": 32, "height": 24}, part, "red.png"
    )
    assert line == "▣ red.png · image/png · 2.0 KiB · 32×24 · sent as data URL (26 chars in the body)"
    video = {
        "kind": "video",
        "mime": "video/mp4",
        "bytes": 10,
        "frames": 4,
        "fps": 2.0,
        "max_frames": 32,
        "duration_s": 2.0,
    }
    assert "4 frames sampled (2 fps, max 32) · 2.0 s" in attachments.summary(video, part)
    refused = attachments.summary({"kind": "image", "error": "invalid base64 data"}, part)
    assert refused.endswith("⚠️ the server refuses it: invalid base64 data")
    assert "bad" in attachments.pending_html([{"summary": refused, "preview": {"error": "x"}}])


def test_long_media_is_elided_in_the_copy_views_only() -> None:
    data = "A" * 4000
    body = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}},
                    {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}},
                    {"type": "image_url", "image_url": {"url": "https://h/cat.png"}},
                    {"type": "text", "text": "hi"},
                ],
            }
        ],
    }
    short = attachments.elide(body)
    parts = short["messages"][0]["content"]
    assert parts[0]["image_url"]["url"] == "data:image/png;base64,<4,000 base64 chars elided>"
    assert parts[1]["input_audio"] == {"data": "<4,000 base64 chars elided>", "format": "wav"}
    assert parts[2:] == body["messages"][0]["content"][2:]
    assert body["messages"][0]["content"][0]["image_url"]["url"].endswith(data)  # the original is untouched


def test_request_diff_shows_what_changed_and_nothing_when_identical() -> None:
    a = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    assert request_diff(a, json.loads(json.dumps(a))) is None
    diff = request_diff(a, {**a, "max_tokens": 2})
    assert diff is not None and '-  "max_tokens": 8' in diff and '+  "max_tokens": 2' in diff
    assert diff.startswith("--- original request\n+++ replay request")
    assert text_diff("a\nb", "a\nb") is None and "+c" in (text_diff("a\nb", "a\nc") or "")


def remote_chunk(times: list[float], finish: str | None = None, **delta: str) -> ChatCompletionChunk:
    choice = ChunkChoice(index=0, delta=Delta(**delta), finish_reason=finish)
    return ChatCompletionChunk(
        id="c", created=0, model="m", choices=[choice], timeline=TokenTimeline(token_times_ms=times)
    )


def test_remote_stats_say_what_the_backend_did_not_provide() -> None:
    view = ReplyView(backend="remote")
    for i, word in enumerate(["Hel", "lo", "!"]):
        view.add(remote_chunk([10.0 * (i + 1)], content=word))
    view.add(remote_chunk([40.0], finish="stop"))
    s = view.stats()
    assert s.not_provided == [
        "engine timeline",
        "preparation",
        "queue wait",
        "prefill",
        "batch size (max)",
        "token ids",
    ]
    html = stats.table_html(s)
    assert 'data-stat="queue wait">not provided<' in html and 'data-stat="batch size (max)">not provided<' in html
    assert "Not provided by the remote backend: engine timeline, preparation, queue wait" in html
    assert 'data-stat="time to first token">10 ms<' in html  # arrival times are still measured, and labelled
    assert ReplyView().stats().not_provided == []  # the embedded engine provides everything
    view.usage = Usage.model_validate({"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8})
    s = view.stats()  # a usage without prompt_tokens_details (vLLM sends null): cached tokens unknown
    assert s.not_provided[-1] == "cached tokens" and 'data-stat="cached tokens">not provided<' in stats.table_html(s)


def test_transcripts_land_under_the_user_turn_they_came_from() -> None:
    part = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "flac"}}
    conv = Conversation(
        [
            Turn("user", "first"),
            Turn("assistant", reply=ReplyView(choices={0: ChoiceView(0, content="ok")}, done=True)),
            Turn("user", "Repeat.", parts=[part], attachments=["♪ speech.flac · audio/flac"]),
        ]
    )
    body = {"messages": [{"role": "system", "content": "s"}, *conv.messages()]}
    assert body["messages"][3]["content"] == [part, {"type": "text", "text": "Repeat."}]
    display(conv)  # caches the user turns' messages
    conv.add_transcripts(body, [{"message": 3, "part": 0, "text": "buy milk"}])
    assert conv.turns[2].transcripts == {0: "buy milk"}
    shown = display(conv)[0][-3:]
    assert shown[0]["content"].startswith("⊕ ♪ speech.flac · audio/flac") and shown[1]["content"] == "Repeat."
    assert '<audio class="pg-player" src="data:audio/flac;base64,AAAA"' in shown[0]["content"]  # a player too
    assert shown[2]["content"] == "buy milk" and shown[2]["metadata"]["title"].startswith("♪")


def test_attachments_survive_export_and_import(tmp_path: Path) -> None:
    part = attachments.file_part(str(png_file(tmp_path)), "image")
    conv = Conversation(
        [Turn("user", "What is this?", parts=[part], attachments=["▣ red.png · image/png"], transcripts={})]
    )
    doc = json.loads(json.dumps(export.dump(export.Snapshot(conv))))
    back = export.load(doc).conv.turns[0]
    assert back.parts == [part] and back.content == "What is this?" and back.attachments == ["▣ red.png · image/png"]
    assert export.load(doc).conv.messages() == conv.messages()
    small = export.dump(export.Snapshot(conv), media_budget=100)  # the browser's copy stays a valid request
    assert "messages" not in small and "blobs" not in small  # the turns hold it all; the image is over budget
    kept = export.load(json.loads(json.dumps(small))).conv.messages()
    assert kept[0]["content"][0] == {"type": "text", "text": "[image_url left out: too large to keep in the browser]"}
    parse_chat_request({"model": "m", "messages": kept})
    roomy = export.dump(export.Snapshot(conv), media_budget=10**7)  # within budget: the image itself, once
    assert list(roomy["blobs"].values()) == [part["image_url"]["url"]]
    assert export.load(json.loads(json.dumps(roomy))).conv.turns[0].parts == [part]


def test_an_attachment_over_the_http_body_limit_says_so() -> None:
    import asyncio
    from types import SimpleNamespace

    from playground.page.attach_panel import AttachHandlers

    async def preview_media(part: dict) -> dict:
        return {"kind": "image", "mime": "image/png", "bytes": 3 << 20}

    service = SimpleNamespace(preview_media=preview_media, settings=SimpleNamespace(max_request_length_mb=1))
    big = attachments.url_part("data:image/png;base64," + "A" * (2 << 20), "image")
    item = asyncio.run(AttachHandlers(lambda: service).attachment(big, "big.png"))
    assert item["summary"].endswith("over the server's 1 MiB HTTP body limit: a curl copy of this request gets 413")
    small = asyncio.run(
        AttachHandlers(lambda: service).attachment(attachments.url_part("https://h/a.png", "image"), "a.png")
    )
    assert "limit" not in small["summary"]


def fake_service(modalities: frozenset[str], transcription: bool) -> object:
    from types import SimpleNamespace

    return SimpleNamespace(
        served_name="m",
        model=SimpleNamespace(modalities=modalities, context_length=4096),
        settings=SimpleNamespace(audio_transcription=transcription),
    )


def test_capabilities_say_what_the_model_does_with_each_media_kind() -> None:
    from playground.page import capabilities as caps

    text = fake_service(frozenset(), transcription=True)
    assert caps.media_modes(text) == {"image": "refuses", "video": "refuses", "audio": "transcribes"}
    badges = caps.media_badges(text)
    assert ">image<" not in badges and "off" not in badges  # what it cannot take is not in the header
    assert ">audio → text (Whisper)</span>" in badges
    note = caps.attach_note(text)
    assert "<s>image</s> ✗ refused (no image input)" in note and "audio → transcribed by Whisper" in note
    assert "python -m demo_models.tiny_mm vl" in note  # where to find a model that takes them
    assert caps.refusal(text, "image") == "m has no image input: the API will refuse this message"
    assert caps.refusal(text, "audio") is None

    vl = fake_service(frozenset({"image", "video"}), transcription=False)
    assert caps.media_modes(vl) == {"image": "takes", "video": "takes", "audio": "refuses"}
    assert "▣ image ✓ the model sees it" in caps.attach_note(vl) and "tiny_mm" not in caps.attach_note(vl)
    assert "remote backend" in caps.attach_note(vl, remote=True) and "loading" in caps.attach_note(None)


def test_the_media_report_shows_under_the_users_turn_and_survives_export() -> None:
    part = attachments.url_part("data:image/png;base64,AAAA", "image")
    clip = attachments.url_part("data:video/mp4;base64,AAAA", "video")
    conv = Conversation([Turn("user", "What?", parts=[part, clip], attachments=["▣ a.png", "▶ b.mp4"])])
    body = {"messages": [{"role": "system", "content": "s"}, *conv.messages()]}
    display(conv)
    chunk = ChatCompletionChunk(
        id="c",
        created=0,
        model="m",
        choices=[],
        media=[
            {"message": 1, "part": 0, "type": "image", "tokens": 252},
            {"message": 1, "part": 1, "type": "video", "tokens": 910, "frames_sampled": 20, "duration": 10.0},
        ],
    )
    reply = ReplyView()
    reply.add(chunk)
    conv.add_media(body, reply.media)
    shown = display(conv)[0][-1]
    assert shown["metadata"] == {"title": "◉ Taken by the model", "log": "1,162 prompt tokens"}
    assert shown["content"] == "▣ image · 252 tokens  \n▶ video · 20 frames · 10.0 s · 910 tokens"
    doc = json.loads(json.dumps(export.dump(export.Snapshot(conv))))
    back = export.load(doc).conv
    assert back.turns[0].media == conv.turns[0].media and display(back)[0][-1] == shown


def test_the_media_report_shows_while_the_reply_is_still_streaming() -> None:
    """From the first chunk, not when the reply ends: the user sees what the model took before it answers."""
    import asyncio
    from dataclasses import fields
    from types import SimpleNamespace

    from engine.protocol.response import ChatCompletionChunk, ChunkChoice, Delta
    from playground.page.chat import ChatHandlers
    from playground.page.chat_outputs import ChatOutputs
    from playground.page.session import Session, caller

    part = attachments.url_part("data:image/png;base64,AAAA", "image")
    gate = asyncio.Event()

    class Gen:
        def abort(self) -> None:
            gate.set()

        def close(self) -> None:
            gate.set()

        async def __aiter__(self):
            def chunk(text: str, **extra: object) -> ChatCompletionChunk:
                return ChatCompletionChunk(
                    id="c", created=0, model="m", choices=[ChunkChoice(index=0, delta=Delta(content=text))], **extra
                )

            yield chunk("Hel", media=[{"message": 0, "part": 0, "type": "image", "tokens": 252}])
            await gate.wait()  # the reply goes on only after the test looked
            yield chunk("lo")

    async def run_request(req: object, ctx: object) -> Gen:  # a request policy whose one request is Gen
        return Gen()

    outputs = ChatOutputs(**{f.name: object() for f in fields(ChatOutputs)})  # stand-ins: the updates' keys
    h = ChatHandlers(SimpleNamespace(get_service=lambda: None, run=run_request), outputs)
    conv = Conversation([Turn("user", "What?", parts=[part], attachments=["▣ a.png"])])
    body = {"model": "m", "messages": conv.messages(), "stream": True}

    async def run() -> list[str]:
        seen = []
        async for out in h.stream(conv, body, Session(), "", caller(None, "chat")):
            chat = out.get(outputs.chatbot)
            if isinstance(chat, list):
                seen.append(" | ".join(str(m["content"]) for m in chat))
            gate.set()
        return seen

    frames = asyncio.run(run())
    mid = next(f for f in frames if "Hel" in f and "Hello" not in f)
    assert "▣ image · 252 tokens" in mid


def test_a_page_reachable_from_outside_connects_only_to_allowed_backends() -> None:
    """The Backend tab makes the server open the connection: on a public bind it must not become a way to probe
    the server's own network."""
    from engine.config import Settings
    from playground.page.tabs.backend_panel import refusal

    local = Settings(host="127.0.0.1").page
    assert refusal("http://127.0.0.1:8000/v1", local) is None  # a loopback bind: this machine's own users
    assert refusal("http://169.254.169.254/latest", local) is None
    public = Settings(host="0.0.0.0").page
    assert "--remote-backend-urls" in refusal("http://127.0.0.1:8000/v1", public)
    assert "--remote-backend-urls" in refusal("http://10.0.0.5:8000/v1", None)  # still loading: refused too
    allowed = Settings(host="0.0.0.0", remote_backend_urls=["http://mindie.internal:1025/v1"]).page
    assert refusal("http://mindie.internal:1025/v1", allowed) is None
    assert refusal("http://mindie.internal:1025/v1/", allowed) is None
    for url in (
        "http://mindie.internal:1026/v1",
        "https://mindie.internal:1025/v1",
        "http://mindie.internal.evil:1025/v1",
        "http://evil/http://mindie.internal:1025/v1",
        "http://mindie.internal:1025/v10",
        "http://169.254.169.254/",
    ):
        assert refusal(url, allowed) is not None, url
    assert refusal("http://127.0.0.1:8000/v1", Settings(host="127.0.0.1", remote_backend_urls=["http://a:1/v1"]).page)
