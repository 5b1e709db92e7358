"""The page is served at / on the API's port, and its chat runs through the same service as the API (driven here
through Gradio's own client; tests/playground/browser/test_ui_browser.py drives it in a real browser)."""

from __future__ import annotations

import re
import shutil
import subprocess
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import MODEL, chat, extra_server, sse_events
from tests.media_samples import image_bytes
from tests.paths import DATA

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

QUESTION = "What is the capital of France?"
# /chat returns: chatbot, box, check, stats, timeline, heat, cands, request json, curl, python, raw, tool_call,
# the attachments waiting for the next message
CHATBOT, BOX, CHECK, STATS, TIMELINE, REQUEST, CURL, RAW, PENDING = 0, 1, 2, 3, 4, 7, 8, 10, 12
SPEECH = DATA / "speech.flac"  # "Please remember to buy milk and bread on Friday."
UNCHANGED = {"__type__": "update"}  # what gr.skip() reads as through the client


def text(message: dict) -> str:
    """Gradio 6 returns message content as a list of typed parts."""
    content = message["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def title(message: dict) -> str:
    return (message.get("metadata") or {}).get("title") or ""


def answer(history: list[dict]) -> str:
    return next(text(m) for m in reversed(history) if m["role"] == "assistant" and not title(m))


def client(url: str) -> Any:
    from gradio_client import Client

    return Client(url + "/", verbose=False, download_files=False)


@pytest.fixture
def ui(live):
    return client(live.url)


def test_page_is_served_on_the_api_port(http) -> None:
    r = http.get("/")
    assert r.status_code == 200 and "gradio" in r.text.lower()


def test_ui_reply_and_stats_equal_the_api_for_the_same_request(ui, http) -> None:
    out = ui.predict(message=QUESTION, system="", temperature=0.0, max_tokens=12, api_name="/chat")
    api = chat(http, model=MODEL, messages=[{"role": "user", "content": QUESTION}], temperature=0, max_tokens=12)
    assert answer(out[CHATBOT]) == api.json()["choices"][0]["message"]["content"]
    assert out[CHECK] == ""
    usage = api.json()["usage"]
    assert f'data-stat="prompt tokens">{usage["prompt_tokens"]}<' in out[STATS]
    assert f'data-stat="completion tokens">{usage["completion_tokens"]}<' in out[STATS]
    assert f'data-stat="finish reason">{api.json()["choices"][0]["finish_reason"]}<' in out[STATS]
    assert "<svg" in out[TIMELINE] and '"max_tokens": 12' in out[REQUEST]


@pytest.mark.skipif(not shutil.which("curl"), reason="no curl on this machine")
def test_copy_as_curl_runs_and_streams_the_same_reply(ui) -> None:
    out = ui.predict(message=QUESTION, system="", temperature=0.0, max_tokens=8, api_name="/chat")
    command = out[CURL].replace("curl -sN", "curl -sN --max-time 60", 1)
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=90, check=True)
    events = sse_events(done.stdout)
    assert events[-1] == "[DONE]" and events[-2]["usage"]["completion_tokens"] <= 8
    streamed = "".join(
        c["delta"].get("content") or "" for e in events[:-1] if isinstance(e, dict) for c in e["choices"]
    )
    assert streamed == answer(out[CHATBOT])
    assert len(out[RAW].splitlines()) >= 3 and '"object":"chat.completion.chunk"' in out[RAW]


def test_ui_explains_an_invalid_request_and_sends_nothing(ui) -> None:
    out = ui.predict(message=QUESTION, system="", seed="-5", api_name="/chat")
    assert "Parameter `seed` must be in" in out[CHECK]  # the page names its control in code (outlined there)
    assert out[CHATBOT] == UNCHANGED and out[BOX] == QUESTION  # nothing sent: the message goes back to the box


def test_tiny_qwen_shows_its_thinking_and_a_tool_call_that_continues_with_the_result(qwen_live) -> None:
    from playground.client.tools_panel import GET_WEATHER, dumps

    ui = client(qwen_live.url)
    out = ui.predict(message="What is 2+2?", system="", temperature=0.0, max_tokens=64, api_name="/chat")
    thought = next(m for m in out[CHATBOT] if title(m).startswith("∴"))
    assert thought["metadata"]["status"] == "done" and thought["metadata"]["log"].endswith(" tokens")
    assert thought["metadata"]["duration"] > 0 and text(thought)
    assert answer(out[CHATBOT]) == "The answer is 4."
    ui = client(qwen_live.url)  # the thinking switch goes out as chat_template_kwargs.enable_thinking
    out = ui.predict(
        message="What is 2+2?", system="", enable_thinking="off", temperature=0.0, max_tokens=64, api_name="/chat"
    )
    assert not any(title(m).startswith("∴") for m in out[CHATBOT]) and answer(out[CHATBOT]) == "The answer is 4."
    assert '"enable_thinking": false' in out[REQUEST]

    ui = client(qwen_live.url)  # a fresh conversation: the model learnt this exchange on its own
    tools = dumps([GET_WEATHER])
    out = ui.predict(
        message="Weather in Paris?", system="", tools_text=tools, temperature=0.0, max_tokens=64, api_name="/chat"
    )
    call = next(m for m in out[CHATBOT] if title(m) == "⚒ get_weather")
    assert '"city": "Paris"' in text(call) and "arguments match" in text(call)
    call_id = call["metadata"]["log"]
    out = ui.predict(
        result='{"temperature": 22, "sky": "sunny"}',
        call_id=call_id,
        system="",
        tools_text=tools,
        temperature=0.0,
        max_tokens=64,
        api_name="/tool_result",
    )
    assert any(title(m).startswith("↩ result of get_weather") for m in out[CHATBOT])
    assert answer(out[CHATBOT]) == "It is sunny and 22 °C in Paris."


def test_replay_sends_the_exact_request_again_and_compares(ui) -> None:
    out = ui.predict(message=QUESTION, system="", temperature=0.0, max_tokens=8, api_name="/chat")
    report = ui.predict(body_text=out[REQUEST], api_name="/replay")
    assert "identical to the original reply" in report  # greedy: the same request gives the same reply
    assert "Request:** ✓ identical to the original request" in report
    edited = out[REQUEST].replace('"max_tokens": 8', '"max_tokens": 2')
    report = ui.predict(body_text=edited, api_name="/replay")  # a modified replay: the request diff says how
    assert "Request:** modified" in report and '-  "max_tokens": 8' in report and '+  "max_tokens": 2' in report
    assert "differs from the original reply" in report and "--- original reply" in report
    assert "Not sent" in ui.predict(
        body_text=out[REQUEST].replace('"max_tokens": 8', '"max_tokens": 0'), api_name="/replay"
    )


def test_ab_runs_both_settings_together_in_one_batch(ui) -> None:
    check, a_md, a_stats, b_md, b_stats = ui.predict(
        message=QUESTION, system="", preset_b="Creative", temperature=0.0, max_tokens=8, ignore_eos=True, api_name="/ab"
    )
    assert check == "" and a_md.startswith("**A · current settings**") and b_md.startswith("**B · Creative**")
    for side in (a_stats, b_stats):
        assert 'data-stat="completion tokens">8<' in side and 'data-stat="finish reason">length<' in side
    assert 'data-stat="batch size (max)">2<' in a_stats + b_stats  # the engine decoded them together


# gradio's gr.Image(type="filepath") opens the upload with PIL to read its mode and never closes it (gradio
# image_utils.preprocess_image): a ResourceWarning in the server thread, not ours to fix.
GRADIO_IMAGE_LEAK = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@GRADIO_IMAGE_LEAK
def test_an_image_is_summarised_then_refused_by_the_text_model_and_nothing_else_breaks(ui, tmp_path) -> None:
    from gradio_client import handle_file

    png = tmp_path / "red.png"
    png.write_bytes(image_bytes("PNG", (32, 24)))
    summary, _ = ui.predict(path=handle_file(str(png)), send_as="base64", api_name="/attach_image")
    assert "image/png" in summary and "32×24" in summary and "sent as data URL" in summary
    assert f"⚠️ {MODEL} has no image input: the API will refuse this message</span></li>" in summary  # before sending
    out = ui.predict(message="What is in the picture?", system="", api_name="/chat")
    assert out[CHECK] == "⚠️ **Refused by the API:** messages[0].content[0]: model does not accept image input."
    assert out[BOX] == "What is in the picture?" and "image/png" in out[PENDING]  # back in the input, as it was
    assert out[CHATBOT] == []
    ui.predict(api_name="/attach_clear")
    out = ui.predict(message=QUESTION, system="", temperature=0.0, max_tokens=4, api_name="/chat")
    assert out[CHECK] == "" and answer(out[CHATBOT])  # the chat goes on without the image


@GRADIO_IMAGE_LEAK
def test_the_vl_model_takes_an_image_and_a_video_and_their_tokens_show_under_the_users_turn(vl_live, tmp_path) -> None:
    import json

    from gradio_client import handle_file

    from tests.media_samples import video_bytes

    png, clip = tmp_path / "red.png", tmp_path / "clip.mp4"
    png.write_bytes(image_bytes("PNG", (100, 70)))
    clip.write_bytes(video_bytes("mp4", seconds=2.0, fps=10))
    ui = client(vl_live.url)
    summary, _ = ui.predict(path=handle_file(str(png)), send_as="base64", api_name="/attach_image")
    assert "100×70" in summary and "refuse" not in summary
    summary, _ = ui.predict(path=handle_file(str(clip)), send_as="base64", api_name="/attach_video")
    assert "4 frames sampled" in summary and "refuse" not in summary
    out = ui.predict(message="What is in the picture?", system="", temperature=0.0, max_tokens=4, api_name="/chat")
    assert out[CHECK] == "" and answer(out[CHATBOT])
    body = json.loads(out[REQUEST]) | {"stream": False}
    body.pop("stream_options"), body.pop("return_progress")  # both for streams only
    api = vl_live.client().post("/v1/chat/completions", json=body).json()  # the same request over HTTP
    image, video = api["media"]
    taken = next(m for m in out[CHATBOT] if title(m) == "◉ Taken by the model")
    assert text(taken) == (
        f"▣ image · {image['tokens']} tokens  \n▶ video · 4 frames · 2.0 s · {video['tokens']} tokens"
    )
    media_tokens = image["tokens"] + video["tokens"]
    assert taken["metadata"]["log"] == f"{media_tokens} prompt tokens"
    assert f'data-stat="prompt tokens">{api["usage"]["prompt_tokens"]}<' in out[STATS]
    assert f'data-stat="completion tokens">{api["usage"]["completion_tokens"]}<' in out[STATS]
    assert f'data-stat="media tokens">{media_tokens}<' in out[STATS]


def test_audio_is_summarised_and_its_transcript_shows_under_the_users_turn(ui) -> None:
    from gradio_client import handle_file

    summary, _ = ui.predict(path=handle_file(str(SPEECH)), send_as="base64", api_name="/attach_audio")
    assert "audio/flac" in summary and " s · sent as input_audio base64" in summary
    out = ui.predict(message="Repeat what I said.", system="", temperature=0.0, max_tokens=8, api_name="/chat")
    assert out[CHECK] == ""
    shown = [(title(m), text(m)) for m in out[CHATBOT]]
    assert shown[0][1].startswith("⊕ ♪ speech.flac · audio/flac")
    heard = next(t for head, t in shown if head.startswith("♪ Transcribed by the server"))
    assert "milk" in heard.lower() and "bread" in heard.lower()
    assert "base64 chars elided>" in out[CURL] and '"input_audio"' in out[REQUEST]


def test_the_page_drives_a_remote_server_and_says_which_stats_it_did_not_send(live, settings, service) -> None:
    with extra_server(settings, service) as page:  # a second server of this app; its page points at the first
        ui = client(str(page.base_url))
        header, status = ui.predict(
            kind="Remote (OpenAI-compatible URL)", url=live.url + "/v1", api_key="", model="", api_name="/backend"
        )
        assert f"backend: remote {live.url} · {MODEL}" in header and status.startswith("✓ Connected")
        out = ui.predict(message=QUESTION, system="", temperature=0.0, max_tokens=12, api_name="/chat")
    api = chat(live.client(), messages=[{"role": "user", "content": QUESTION}], temperature=0, max_tokens=12).json()
    assert f'data-stat="completion tokens">{api["usage"]["completion_tokens"]}<' in out[STATS]
    # the first server sends MindIE's perf stats: batch sizes and queue waits are its own, the rest is not sent
    assert re.search(r'data-stat="batch size \(max\)">[1-9]\d*<', out[STATS])
    assert 'data-stat="queue wait">not provided<' not in out[STATS]
    assert 'data-stat="prefill">not provided<' in out[STATS]
    assert "Not provided by the remote backend: engine timeline, preparation, prefill, token ids." in out[STATS]


def test_stats_a_remote_server_does_not_send_are_none_in_a_notebook_and_not_provided_on_the_page(
    live, settings, service
) -> None:
    from playground.notebooks import RemoteBackend

    with extra_server(settings, service, ui=False, perf_stats=False) as bare:  # no batch sizes, no queue waits
        url = str(bare.base_url).rstrip("/")
        result = RemoteBackend(url).chat(QUESTION, temperature=0, max_tokens=8)
        ui = client(live.url)
        ui.predict(kind="Remote (OpenAI-compatible URL)", url=url + "/v1", api_key="", model="", api_name="/backend")
        out = ui.predict(message=QUESTION, system="", temperature=0.0, max_tokens=8, api_name="/chat")
    row = result.stats()
    assert row["max_batch_size"] is None and row["mean_queue_wait_us"] is None  # not 0: nothing was measured
    assert row["completion_tokens"] == result.completion_tokens > 0 and row["ttft_ms"] > 0
    assert result.batch_sizes == [] and result.queue_waits_us == [] and result.token_ids == []
    assert 'data-stat="batch size (max)">not provided<' in out[STATS]
    assert 'data-stat="queue wait">not provided<' in out[STATS]
    assert f'data-stat="completion tokens">{result.completion_tokens}<' in out[STATS]
    assert (
        "Not provided by the remote backend: engine timeline, preparation, queue wait, prefill, batch size "
        "(max), token ids." in out[STATS]
    )


def test_a_video_shows_the_frames_the_server_will_sample(ui, tmp_path) -> None:
    from gradio_client import handle_file

    from tests.media_samples import video_bytes

    clip = tmp_path / "clip.mp4"
    clip.write_bytes(video_bytes("mp4", seconds=2.0, fps=10))
    summary, _ = ui.predict(path=handle_file(str(clip)), send_as="base64", api_name="/attach_video")
    assert "▶ clip.mp4 · video/mp4 · " in summary and "64×48 · 4 frames sampled (2 fps, max 32) · 2.0 s" in summary
    ui.predict(api_name="/attach_clear")


def test_a_pasted_url_goes_as_a_url_and_the_preview_gives_the_servers_refusal(ui) -> None:
    summary, box = ui.predict(url="file:///etc/secret.png", api_name="/attach_url")
    assert box == "" and "sent as URL file:///etc/secret.png" in summary
    assert "the server refuses it: local media path is not allowed or not readable" in summary
    summary, _ = ui.predict(url="https://example.com/cat.gif", api_name="/attach_url")
    assert "The URL must end in one of" in summary
    assert ui.predict(api_name="/attach_clear") == ""


def test_the_first_audio_message_says_that_whisper_loads(service: Any) -> None:
    """Issue 30: the first audio message waited 24.7 s on Whisper with nothing said; the page says it now, and only
    while Whisper is not yet in memory, only for audio, only on the embedded engine that transcribes."""
    from engine.serving.media_parts import MediaPreparer
    from engine.serving.policy import RequestPolicy
    from playground.page.chat import ChatHandlers
    from playground.page.session import Session

    settings = service.settings.replace(audio_transcription=True)
    media = MediaPreparer(settings, "cpu")  # its own Whisper, not yet loaded
    transcribing = SimpleNamespace(settings=settings, model=service.model, media=media)
    h = ChatHandlers(RequestPolicy(settings, lambda: transcribing), None)  # type: ignore[arg-type]
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    spoken = {"messages": [{"role": "user", "content": [audio]}]}
    typed = {"messages": [{"role": "user", "content": "hi"}]}
    assert h.loads_whisper(spoken, Session())
    assert not h.loads_whisper(typed, Session())
    media.transcriber()  # loaded: the next audio message waits for nothing more
    assert not h.loads_whisper(spoken, Session())
