"""The playground in a real browser: Debian's Chromium, headless, driven by Playwright against the live app.

Each test opens its own page (its own Gradio session). Screenshots of each main state go to $PLAYGROUND_SHOTS
(default: <tmp>/playground-shots) so a person can look at what the tests saw.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser_helpers import (
    FINISHED_JS,
    NEEDS_CHROMIUM,
    attach_png,
    check_says,
    expect_check_clear,
    import_file,
    open_page,
    open_tab,
    precise,
    send,
    set_number,
    shot,
    stat,
    sync_api,
)
from tests.conftest import chat, extra_server
from tests.paths import DATA

pytestmark = NEEDS_CHROMIUM


def test_a_reply_streams_with_engine_stats_that_match_the_api(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    precise(page, 24)
    time.sleep(0.5)  # let the controls' change events land before sending
    send(page, "Count from one to twenty in words.")
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    paints = page.evaluate("window.pgPaints.map(p => [p[0] - window.pgStart, p[1]])")
    shot(page, "1-streamed-reply")

    assert len({n for _, n in paints}) >= 4, f"the reply did not stream: {paints}"
    first, last = paints[0][0], paints[-1][0]
    rate = (len(paints) - 1) / ((last - first) / 1000) if last > first else 0
    print(f"\nfirst paint {first:.0f} ms after Send, {len(paints)} paints, {rate:.1f} paints/s")
    assert rate < 25, "updates should be throttled to about 10 a second"

    api = chat(
        live.client(),
        messages=[{"role": "user", "content": "Count from one to twenty in words."}],
        temperature=0,
        max_tokens=24,
    ).json()
    assert stat(page, "prompt tokens") == str(api["usage"]["prompt_tokens"])
    assert stat(page, "completion tokens") == str(api["usage"]["completion_tokens"])
    assert stat(page, "finish reason") == api["choices"][0]["finish_reason"]
    assert page.locator("#pg-chat").inner_text().count(api["choices"][0]["message"]["content"][:20]) >= 1
    assert page.locator("#pg-timeline svg circle").count() >= 10
    assert "tok/s" in stat(page, "decode speed")

    page.reload()  # the conversation is kept in the browser's storage
    page.wait_for_selector("#pg-input textarea")
    sync_api.expect(page.locator("#pg-chat")).to_contain_text(api["choices"][0]["message"]["content"][:20])
    page.close()


def test_stop_aborts_the_engine_request(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    page.get_by_role("tab", name="Sampling").click()
    set_number(page, "max_tokens", 400)
    page.locator("#pg-ignore_eos input").check()
    page.get_by_role("tab", name="Stats").click()
    time.sleep(0.5)
    send(page, "Tell me a long story.")
    page.wait_for_function(
        "() => +document.querySelector(\"#pg-stats td[data-stat='completion tokens']\")?.textContent > 3"
    )
    page.click("#pg-stop")
    page.wait_for_function(FINISHED_JS, timeout=30_000)
    tokens = int(stat(page, "completion tokens"))
    shot(page, "2-stopped")
    assert stat(page, "finish reason") == "stopped" and tokens < 400
    assert "stopped" in page.locator("#pg-chat").inner_text()
    deadline = time.monotonic() + 10
    while live.service.engine._active and time.monotonic() < deadline:  # the engine let go of the request
        time.sleep(0.05)
    assert live.service.engine._active == 0
    page.close()


def test_an_invalid_combination_is_explained_and_nothing_is_sent(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    page.get_by_role("tab", name="Sampling").click()
    page.locator("#pg-preset label", has_text="Precise").click()
    page.get_by_text("Candidates and log-probabilities").click()
    set_number(page, "n", 2)
    check = page.locator("#pg-check")
    sync_api.expect(check).to_contain_text("temperature must be greater than 0 when n or best_of is greater than 1")
    steps = live.service.engine.steps
    page.fill("#pg-input textarea", "Hello there")
    page.click("#pg-send")
    sync_api.expect(check).to_contain_text("Not sent")
    sync_api.expect(page.locator("#pg-n")).to_have_class(re.compile("pg-fault"))  # the field at fault, outlined
    time.sleep(1)
    shot(page, "3-invalid-combination")
    assert page.input_value("#pg-input textarea") == "Hello there"
    assert page.locator("#pg-chat .message").count() == 0
    assert live.service.engine.steps == steps
    page.close()


def test_a_page_message_over_the_clients_limit_gets_the_apis_refusal_and_is_kept(
    browser: Any, settings: Any, service: Any
) -> None:
    from tests.engine.serving.test_policy_entry_points import LIMIT, api_stream_running

    with extra_server(settings, service, max_concurrent_per_client=1) as http:
        page = open_page(browser, str(http.base_url).rstrip("/"))
        with api_stream_running(http):  # this machine's one allowed request is an API stream
            page.fill("#pg-input textarea", "Hello there")
            page.click("#pg-send")
            check = page.locator("#pg-check")
            sync_api.expect(check).to_contain_text(f"Refused by the API: {LIMIT}")
            shot(page, "3b-refused-by-the-client-limit")
            assert page.input_value("#pg-input textarea") == "Hello there"
            assert page.locator("#pg-chat .message").count() == 0
        page.click("#pg-send")  # the stream is closed: the kept message goes through now
        page.wait_for_function(FINISHED_JS)
        expect_check_clear(page)
        page.close()


def test_the_request_tab_shows_what_send_would_send_while_typing(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    steps = live.service.engine.steps
    page.get_by_role("tab", name="Sampling").click()
    set_number(page, "max_tokens", 33)
    page.locator("#pg-input textarea").press_sequentially("What is 2 + 2?")
    open_tab(page, "Request")
    body = page.locator("#pg-request .cm-content")
    sync_api.expect(body).to_contain_text('"content": "What is 2 + 2?"')
    sync_api.expect(body).to_contain_text('"max_tokens": 33')
    sync_api.expect(page.locator("#pg-curl .cm-content")).to_contain_text(live.url + "/v1/chat/completions")
    shot(page, "3c-request-before-sending")
    assert live.service.engine.steps == steps  # nothing was sent
    page.locator("#pg-input textarea").press_sequentially(" And 3 + 3?")
    sync_api.expect(body).to_contain_text('"content": "What is 2 + 2? And 3 + 3?"')
    page.close()


def test_tiny_qwen_thinks_beside_the_answer_and_calls_a_tool(browser: Any, qwen_live: Any) -> None:
    page = open_page(browser, qwen_live.url)
    precise(page)  # the tiny model's replies are its greedy ones
    time.sleep(0.5)
    send(page, "What is 2+2?")
    page.wait_for_function(FINISHED_JS)
    chat_box = page.locator("#pg-chat")
    sync_api.expect(chat_box).to_contain_text("Thought")
    sync_api.expect(chat_box).to_contain_text("The answer is 4.")
    assert int(stat(page, "reasoning tokens")) > 0
    shot(page, "4-thinking")

    page.get_by_role("button", name="Clear").last.click()
    page.get_by_role("tab", name="Tools").click()
    page.click("#pg-tool-example input")
    page.keyboard.type("get_weather")
    page.keyboard.press("Enter")
    sync_api.expect(page.locator("#pg-tools-check")).to_contain_text("1 tool(s) valid")
    send(page, "Weather in Paris?")
    page.wait_for_selector("#pg-tool-row:visible")
    sync_api.expect(chat_box).to_contain_text("get_weather")
    sync_api.expect(chat_box).to_contain_text("arguments match")
    shot(page, "5-tool-call")
    page.fill("#pg-tool-result textarea", '{"temperature": 22, "sky": "sunny"}')
    page.click("#pg-tool-send")
    sync_api.expect(chat_box).to_contain_text("It is sunny and 22 °C in Paris.", timeout=60_000)
    page.wait_for_function(FINISHED_JS)
    shot(page, "6-tool-result-answered")
    page.close()


def test_the_page_speaks_chinese_to_a_chinese_browser(browser: Any, live: Any) -> None:
    context = browser.new_context(locale="zh-CN", viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto(live.url + "/")
    page.wait_for_selector("#pg-input textarea")
    sync_api.expect(page.get_by_role("tab", name="▥ 统计")).to_be_visible()
    sync_api.expect(page.locator("#pg-send")).to_have_text("发送")
    context.close()


SPEECH = DATA / "speech.flac"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # gradio's gr.Image leaks the upload
def test_attachments_are_summarised_refused_or_transcribed(browser: Any, live: Any, tmp_path: Path) -> None:

    page = open_page(browser, live.url)
    precise(page, 24)
    header = page.locator(".pg-header")
    # The header names what the model can do; what it cannot is said in the attach panel, never struck through.
    sync_api.expect(header.locator(".pg-badge", has_text="image")).to_have_count(0)
    sync_api.expect(header.locator(".pg-badge", has_text="video")).to_have_count(0)
    sync_api.expect(header.locator(".pg-badge:not(.off)", has_text="audio → text (Whisper)")).to_have_count(1)
    page.get_by_text("Attach image · audio · video · URL").click()
    caps = page.locator("#pg-attach-caps")  # what this model does with each kind, before anything is sent
    sync_api.expect(caps).to_contain_text("image ✗ refused (no image input)")
    sync_api.expect(caps).to_contain_text("audio → transcribed by Whisper, the model reads the text")
    png, pending = attach_png(page, tmp_path, (32, 24))
    sync_api.expect(pending).to_contain_text(f"image/png · {png.stat().st_size} B · 32×24 · sent as data URL")
    sync_api.expect(pending).to_contain_text("has no image input: the API will refuse this message")
    shot(page, "7-image-attached")

    page.fill("#pg-input textarea", "What is in the picture?")
    page.click("#pg-send")
    check = page.locator("#pg-check")
    sync_api.expect(check).to_contain_text("messages[0].content[0]: model does not accept image input.")
    sync_api.expect(pending).to_contain_text("image/png")  # the attachment and the text wait, unchanged
    assert page.input_value("#pg-input textarea") == "What is in the picture?"
    shot(page, "8-image-refused")

    page.click("#pg-attach-clear")
    sync_api.expect(pending).not_to_contain_text("image/png")
    page.set_input_files("#pg-attach-audio input[type=file]", str(SPEECH))
    sync_api.expect(pending).to_contain_text("audio/flac")
    sync_api.expect(pending).to_contain_text("sent as input_audio base64")
    shot(page, "9-audio-attached")
    send(page, "Repeat what I said.")
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    chat_box = page.locator("#pg-chat")
    sync_api.expect(chat_box).to_contain_text("speech.flac · audio/flac")
    sync_api.expect(chat_box).to_contain_text("Transcribed by the server")
    assert "milk" in chat_box.inner_text().lower()
    assert check_says(page) == ""
    player = chat_box.locator("audio.pg-player")  # the sent audio keeps a player in the chat (its upload's file)
    sync_api.expect(player).to_have_count(1)
    assert "gradio_api/file=" in (player.get_attribute("src") or "")
    shot(page, "10-audio-transcribed")
    page.reload()  # the attachment line, its player and the transcript come back from the browser's storage
    page.wait_for_selector("#pg-input textarea")
    sync_api.expect(chat_box).to_contain_text("speech.flac · audio/flac")
    sync_api.expect(chat_box).to_contain_text("Transcribed by the server")
    sync_api.expect(chat_box.locator("audio.pg-player")).to_have_count(1)
    page.wait_for_function("() => document.querySelector('#pg-chat audio.pg-player')?.readyState >= 1")  # it loads
    page.close()


def test_a_remote_backend_answers_and_the_stats_say_what_it_did_not_send(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)  # this page's remote backend is this same server's API, over HTTP
    open_tab(page, "Backend")
    page.locator("#pg-backend label", has_text="Remote").click()
    page.fill("#pg-backend-url textarea", live.url + "/v1")
    page.click("#pg-backend-go")
    sync_api.expect(page.locator(".pg-header")).to_contain_text(f"backend: remote {live.url}")
    page.get_by_text("Attach image · audio · video · URL").click()
    sync_api.expect(page.locator("#pg-attach-caps")).to_contain_text("A remote backend: the server decides")
    precise(page, 16)
    time.sleep(0.5)
    send(page, "Name three colours.")
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    # this server sends MindIE's perf stats: batch sizes and queue waits are its own; the engine timeline is not sent
    assert stat(page, "batch size (max)").isdigit() and stat(page, "queue wait").endswith(" ms")
    assert stat(page, "prefill") == "not provided" and stat(page, "preparation") == "not provided"
    sync_api.expect(page.locator("#pg-stats")).to_contain_text("Not provided by the remote backend: engine timeline")
    shot(page, "11-remote-backend")

    open_tab(page, "Request")
    page.click("#pg-replay")
    out = page.locator("#pg-replay-out")
    sync_api.expect(out).to_contain_text("identical to the original request", timeout=60_000)
    sync_api.expect(out).to_contain_text("Reply:")
    shot(page, "12-replay-identical")
    page.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # gradio's gr.Image leaks the upload
def test_the_vl_model_sees_an_image_and_the_page_reports_its_tokens(browser: Any, vl_live: Any, tmp_path: Path) -> None:

    page = open_page(browser, vl_live.url)
    header = page.locator(".pg-header")
    sync_api.expect(header.locator(".pg-badge:not(.off)", has_text="image")).to_have_count(1)
    sync_api.expect(header.locator(".pg-badge", has_text="audio")).to_have_count(0)  # no transcription here
    precise(page, 8)
    page.get_by_text("Attach image · audio · video · URL").click()
    caps = page.locator("#pg-attach-caps")
    sync_api.expect(caps).to_contain_text("image ✓ the model sees it")
    sync_api.expect(caps).to_contain_text("video ✓ the model sees it")
    sync_api.expect(caps).to_contain_text("audio ✗ refused (no audio input)")
    png, pending = attach_png(page, tmp_path, (100, 70))
    sync_api.expect(pending).to_contain_text("100×70 · sent as data URL")
    assert "refuse" not in pending.inner_text()
    send(page, "What is in the picture?")
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    chat_box = page.locator("#pg-chat")
    sync_api.expect(chat_box).to_contain_text("Taken by the model")
    sync_api.expect(chat_box).to_contain_text("red.png · image/png")
    report = chat_box.get_by_text("▣ image · ").last.inner_text()
    tokens = int(report.split("·")[1].split()[0])
    assert tokens > 1 and int(stat(page, "prompt tokens")) > tokens  # the image's tokens are in the prompt
    assert stat(page, "media tokens") == str(tokens)
    assert int(stat(page, "completion tokens")) > 0 and check_says(page) == ""
    assert page.locator("#pg-timeline svg").count() == 1
    shot(page, "13-vl-image-taken")
    page.reload()  # the report comes back from the browser's storage
    page.wait_for_selector("#pg-input textarea")
    sync_api.expect(chat_box).to_contain_text(f"▣ image · {tokens} tokens")
    page.close()


def test_tools_json_is_checked_as_it_is_typed(browser: Any, live: Any) -> None:
    page = open_page(browser, live.url)
    open_tab(page, "Tools")
    sync_api.expect(page.locator("#pg-tools-note")).to_contain_text("has no tool-call format, so tools are rejected")
    editor = page.locator("#pg-tools .cm-content")
    check = page.locator("#pg-tools-check")
    editor.fill('[{"type": "function", "function": {"name": "get_weather",}}]')
    sync_api.expect(check).to_contain_text(
        "Tools are not valid JSON: Expecting property name enclosed in double quotes"
    )
    # before anything is sent the check line says what Send would meet, not that something was not sent
    sync_api.expect(page.locator("#pg-check")).to_contain_text("Send would be refused: Tools are not valid JSON")
    shot(page, "14-tools-bad-json")
    editor.fill('[{"type": "function", "function": {"parameters": {}}}]')
    sync_api.expect(check).to_contain_text("Field 'tools[0].function.name' is required.")  # the API's own check
    shot(page, "15-tools-bad-schema")
    editor.fill('[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]')
    sync_api.expect(check).to_contain_text("1 tool(s) valid")
    # valid JSON, but the model has no tool-call format
    sync_api.expect(page.locator("#pg-check")).to_contain_text("Send would be refused")
    shot(page, "16-tools-valid-model-cannot")
    page.close()


def test_a_conversation_is_exported_and_imported_back(browser: Any, live: Any, tmp_path: Path) -> None:
    import json

    page = open_page(browser, live.url)
    precise(page, 8)
    time.sleep(0.5)
    send(page, "Name a colour.")
    page.wait_for_function(FINISHED_JS, timeout=120_000)
    chat_box = page.locator("#pg-chat")
    reply = chat_box.inner_text()
    time.sleep(1)  # the export file is written after the reply (a chained event)
    with page.expect_download() as download:
        page.click("#pg-export")
    saved = tmp_path / "conversation.json"
    download.value.save_as(saved)
    doc = json.loads(saved.read_text(encoding="utf-8"))
    assert doc["format"] == "llm-playground/conversation@2" and doc["settings"]["max_tokens"] == 8
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant"]
    assert doc["messages"][0]["content"] == "Name a colour."
    shot(page, "17-exported")

    page.get_by_role("button", name="Clear").last.click()
    sync_api.expect(chat_box).not_to_contain_text("Name a colour.")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    import_file(page, broken)
    sync_api.expect(page.locator("#pg-check")).to_contain_text("Not imported: not JSON")
    import_file(page, saved)
    sync_api.expect(chat_box).to_contain_text("Name a colour.")
    sync_api.expect(chat_box).to_contain_text(doc["messages"][1]["content"][:20])
    assert check_says(page) == ""
    page.get_by_role("tab", name="Sampling").click()
    assert page.input_value("#pg-max_tokens input[type=number]") == "8"
    shot(page, "18-imported")
    assert reply
    page.close()
