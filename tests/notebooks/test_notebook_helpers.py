"""playground/notebooks on the real models: the in-process and the remote backend, widgets, sweeps, latency, and
reasoning, tool calls and audio (the tiny trained Qwen3 for the first two, the bundled SmolLM2 + Whisper for audio)."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from demo_models.tiny_qwen import MATH, TOOLS, WEATHER, WEATHER_ANSWER, WEATHER_QUESTION, WEATHER_RESULT
from engine.protocol.errors import RequestValidationError
from engine.protocol.request import parse_chat_request
from playground.client.result import ChatResult
from playground.notebooks import (
    ChatPanel,
    LocalBackend,
    ParameterExplorer,
    RemoteBackend,
    RemoteError,
    ToolCall,
    audio_part,
    concurrency,
    connect,
    distinct_n,
    diversity,
    expand_grid,
    heatmap_html,
    plot_sweep,
    plot_timeline,
    run_sync,
    summarize_concurrency,
    sweep,
    timeline_frame,
    tool_result_message,
    user_message,
)
from playground.notebooks.backend import SSEChunks
from tests.conftest import MODEL, QWEN_MODEL
from tests.paths import DATA

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)

SPEECH = DATA / "speech.flac"  # "Please remember to buy milk and bread on Friday."

QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def local(service: Any) -> LocalBackend:
    backend = connect(service)
    assert isinstance(backend, LocalBackend)
    return backend


def wait_idle(service: Any) -> None:
    deadline = time.monotonic() + 10
    while service.engine.load()["running"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert service.engine.load()["running"] == 0


# ---- the request and one chat ---------------------------------------------------------------------------------
def test_request_is_the_one_the_api_parses(local: LocalBackend) -> None:
    req = local.request(QUESTION, temperature=0.5, seed=None)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": QUESTION}],
        "temperature": 0.5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert req == parse_chat_request(body)
    with pytest.raises(RequestValidationError, match=r"Parameter temperature must be in \[0.0, 2.0\], got 2.5"):
        local.request(QUESTION, temperature=2.5)


def test_chat_equals_the_services_fold_and_carries_the_engine_stats(local: LocalBackend, service: Any) -> None:
    result = local.chat(QUESTION, temperature=0, max_tokens=12)
    body = {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], "temperature": 0, "max_tokens": 12}
    expected = asyncio.run(service.complete(parse_chat_request(body)))
    assert result.reply == expected.choices[0].message.content and result.reply
    assert result.finish_reason == expected.choices[0].finish_reason
    assert result.reasoning is None  # SmolLM2 has no reasoning part
    n = result.completion_tokens
    assert n == expected.usage.completion_tokens == len(result.token_times_ms) == len(result.token_ids)
    assert len(result.batch_sizes) == len(result.queue_waits_us) == n
    assert result.prefill_time == round(result.token_times_ms[0]) and len(result.decode_time_arr) == n - 1
    stats = result.stats()
    assert stats["prompt_tokens"] == expected.usage.prompt_tokens
    assert stats["ttft_ms"] > 0 and stats["tokens_per_s"] > 0 and stats["max_batch_size"] >= 1
    assert math.isnan(result.mean_logprob)  # no logprobs asked for
    html = result._repr_html_()
    assert "time to first token" in html and "finish reason" in html


def test_sync_chat_works_inside_a_running_loop_as_in_jupyter(local: LocalBackend) -> None:
    async def cell() -> str:
        return local.chat(QUESTION, temperature=0, max_tokens=4).reply

    assert asyncio.run(cell()) == local.chat(QUESTION, temperature=0, max_tokens=4).reply


def test_logprobs_feed_the_heatmap(local: LocalBackend) -> None:
    result = local.chat(QUESTION, temperature=0, max_tokens=6, logprobs=True, top_logprobs=2)
    assert len(result.logprobs) == result.completion_tokens and "".join(result.tokens) == result.reply
    assert result.min_logprob <= result.mean_logprob <= 0
    html = heatmap_html(result.logprobs)
    assert html.count("<span") == result.completion_tokens and "top alternatives" in html


def test_a_branch_continues_a_reply_from_a_token_on_either_backend(live: Any, local: LocalBackend) -> None:
    """The page's branch from a notebook: the most likely token at a greedy reply's position is its own, so the
    branch reproduces the reply; another alternative changes it from there. Also through this server by URL."""
    for backend in (local, connect(live.url + "/v1")):
        result = backend.chat(QUESTION, temperature=0, max_tokens=8, logprobs=True, top_logprobs=2)
        same = backend.branch(result, 3)
        assert same.reply == result.reply and same.view.branched["was"] == same.view.branched["now"]
        other = backend.branch(result, 3, alt=1)
        assert other.reply.startswith("".join(result.tokens[:3]) + other.view.branched["now"])
        assert other.view.branched["now"] != result.tokens[3]
    with pytest.raises(ValueError, match="no longer there"):
        local.branch(result, 99)


def test_heatmap_escapes_and_shades_by_probability() -> None:
    from engine.protocol.response import LogprobEntry
    from playground.client.heatmap import COLOURS

    html = heatmap_html(
        [LogprobEntry(token="<b>", logprob=0.0, bytes=[]), LogprobEntry(token="\n", logprob=-50, bytes=[])]
    )
    assert "&lt;b&gt;" in html and "<b>" not in html
    assert f"background:{COLOURS[9]}" in html and f"background:{COLOURS[0]}" in html and "↵" in html


# ---- remote backend ---------------------------------------------------------------------------------------------
def test_remote_backend_gives_the_same_reply_and_stats_as_the_embedded_one(live: Any, local: LocalBackend) -> None:
    remote = connect(live.url + "/v1")
    assert isinstance(remote, RemoteBackend) and remote.model == MODEL
    params = {"temperature": 0, "max_tokens": 10, "logprobs": True}
    there, here = remote.chat(QUESTION, **params), local.chat(QUESTION, **params)
    assert there.reply == here.reply and there.tokens == here.tokens
    assert there.completion_tokens == here.completion_tokens == len(there.token_times_ms)
    # from the usage: a remote stream carries no timeline
    assert len(there.batch_sizes) == len(there.queue_waits_us) == there.completion_tokens
    assert there.stats()["ttft_ms"] > 0 and len(there.decode_time_arr) == there.completion_tokens - 1


def test_remote_errors_carry_the_servers_message_and_status(live: Any) -> None:
    with pytest.raises(RemoteError, match="Model not found") as err:
        RemoteBackend(live.url, model="nope").chat("hi", max_tokens=2)
    assert err.value.status == 422


def sse(*events: str) -> list[str]:
    return [line for e in events for line in (f"data: {e}", "")]


HEAD = '"id": "x", "created": 1, "model": "m"'


def test_sse_parser_keeps_reasoning_apart_and_counts_tokens_from_usage() -> None:
    lines = [
        ": keep-alive",
        *sse(
            f'{{{HEAD}, "choices": [{{"index": 0, "delta": {{"role": "assistant", "content": ""}}}}]}}',
            f'{{{HEAD}, "choices": [{{"index": 0, "delta": {{"reasoning_content": "think"}}}}]}}',
            f'{{{HEAD}, "choices": [{{"index": 0, "delta": {{"content": "Hi there"}}}}]}}',
            f'{{{HEAD}, "choices": [{{"index": 0, "delta": {{"content": "!"}}, "finish_reason": "stop"}}], '
            '"usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8, "batch_size": [1, 1, 2, 2, 2]}}',
            f'{{{HEAD}, "choices": [], "usage": {{"prompt_tokens": 3, "prompt_tokens_details": null, '
            '"completion_tokens": 5, "total_tokens": 8, "batch_size": [1, 1, 2, 2, 2]}}',
            "[DONE]",
        ),
    ]
    parser, result = SSEChunks(), ChatResult()
    for line in lines:
        chunk = parser.line(line)
        if chunk is not None:
            result.add(chunk)
    assert (result.reasoning, result.reply, result.finish_reason) == ("think", "Hi there!", "stop")
    assert len(result.token_times_ms) == result.completion_tokens == 5  # the closing chunk pads to the usage
    assert result.batch_sizes == [1, 1, 2, 2, 2] and result.stats()["max_batch_size"] == 2
    assert "reasoning" in result._repr_html_()


def test_sse_parser_raises_a_mid_stream_error() -> None:
    with pytest.raises(RemoteError, match="boom"):
        SSEChunks().line('data: {"error": "boom", "error_type": "Error"}')


# ---- widgets ----------------------------------------------------------------------------------------------------
def test_chat_panel_streams_turns_and_keeps_the_history(local: LocalBackend) -> None:
    async def cell() -> tuple[Any, Any, ChatPanel]:
        panel = ChatPanel(local, system="Answer briefly.", temperature=0, max_tokens=8)
        first = await panel.send(QUESTION)
        second = await panel.send("And of Italy?")
        return first, second, panel

    first, second, panel = asyncio.run(cell())
    assert [m["role"] for m in panel.history] == ["user", "assistant", "user", "assistant"]
    assert panel.history[1]["content"] == first.reply
    assert second.usage.prompt_tokens > first.usage.prompt_tokens  # the second turn sent the first one along
    assert len(panel.turns.children) == 4 and panel.box.value == ""
    reply_box = panel.turns.children[1]
    assert first.reply.split()[0] in reply_box.children[1].value and "finish reason" in reply_box.children[2].value
    assert reply_box.children[0].layout.display == "none"  # no reasoning part: its fold stays hidden
    panel.clear()
    assert panel.history == [] and panel.turns.children == ()


def test_chat_panel_stop_aborts_the_request_and_shows_validation_errors(local: LocalBackend, service: Any) -> None:
    async def cell() -> tuple[ChatPanel, Any]:
        panel = ChatPanel(local, temperature=0, max_tokens=400, ignore_eos=True)
        task = panel.send("Count to a thousand.")
        await asyncio.sleep(0.5)
        panel.stop()
        with pytest.raises(asyncio.CancelledError):
            await task
        panel.params["seed"] = -5
        return panel, await panel.send("hi")

    panel, bad = asyncio.run(cell())
    wait_idle(service)
    assert "stopped" in panel.turns.children[1].children[1].value
    assert bad.view.error and "Parameter seed must be in" in panel.turns.children[3].children[1].value


def test_parameter_explorer_reruns_with_the_fixed_seed(local: LocalBackend) -> None:
    async def cell() -> tuple[Any, ...]:
        explorer = ParameterExplorer(local, QUESTION, max_tokens=8, seed=7, temperature=1.0)
        a = await explorer.run()
        b = await explorer.run()
        c = await explorer.set(temperature=0.0, top_k=5)
        d = await explorer.set(seed=-1)
        return explorer, a, b, c, d

    explorer, a, b, c, d = asyncio.run(cell())
    assert a.reply == b.reply and len(a.logprobs) == a.completion_tokens
    assert c.reply == local.chat(QUESTION, temperature=0, max_tokens=8).reply
    assert explorer.values()["top_k"] == 5 and explorer.values()["stop"] is None
    assert d.view.error and "Parameter seed must be in" in explorer.stats.value
    assert explorer.result is d


def test_parameter_explorer_ignores_echoes_and_follows_a_newer_move(local: LocalBackend) -> None:
    """What JupyterLab does while a cell awaits a run (issue 30): the browser reports back the values `set()` gave
    the sliders (top_p snapped to its step: 0.9000000000000001), and a person may move a slider mid-run."""

    async def cell() -> tuple[Any, ...]:
        explorer = ParameterExplorer(local, QUESTION, max_tokens=8, seed=7, temperature=1.0)
        task = explorer.set(temperature=1.4, top_p=0.9)
        explorer.controls["temperature"].value = 1.4  # the browser's echoes
        explorer.controls["top_p"].value = 0.9000000000000001
        echoed, runs = await task, explorer.runs
        task = explorer.run()
        explorer.controls["temperature"].value = 0.0  # a move while the cell awaits the run: it supersedes it
        moved = await task
        stopped = explorer.run()
        stopped.cancel()  # a Stop or a kernel interrupt: the request stops too
        with pytest.raises(asyncio.CancelledError):
            await stopped
        await asyncio.sleep(0)
        return explorer, echoed, runs, moved

    explorer, echoed, runs, moved = asyncio.run(cell())
    assert runs == 1 and echoed.completion_tokens == 8, "an echo of the same values started a run"
    assert explorer.values()["top_p"] == 0.9  # as the slider shows it, not its float noise
    assert moved.reply == local.chat(QUESTION, temperature=0, top_p=0.9, seed=7, max_tokens=8).reply
    assert explorer.runs == 4 and explorer.status.value == "run 4 · stopped", explorer.status.value


# ---- sweeps -----------------------------------------------------------------------------------------------------
def test_expand_grid_and_distinct_n() -> None:
    assert expand_grid({"a": [1, 2], "b": ["x"]}) == [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]
    assert distinct_n(["a", "b", "a", "b"], 1) == 0.5 and distinct_n(["a", "b", "a", "b"], 2) == 2 / 3
    assert math.isnan(distinct_n(["a"], 2))


def test_sweep_runs_the_grid_as_one_batched_job(local: LocalBackend) -> None:
    grid = {"temperature": [0.5, 1.5], "seed": [1, 2]}
    df = sweep(local, grid, QUESTION, max_tokens=6)
    assert list(df[["temperature", "seed"]].itertuples(index=False, name=None)) == [
        (0.5, 1),
        (0.5, 2),
        (1.5, 1),
        (1.5, 2),
    ]
    assert df["error"].isna().all() and (df["length"] <= 6).all() and (df["length"] > 0).all()
    for column in (
        "reply",
        "mean_logprob",
        "min_logprob",
        "distinct_1",
        "distinct_2",
        "ttft_ms",
        "tokens_per_s",
        "finish_reason",
    ):
        assert column in df and df[column].notna().all(), column
    assert df["max_batch_size"].max() > 1  # in flight together: the engine batched them
    again = sweep(local, [{"temperature": 1.5, "seed": 2}], QUESTION, max_tokens=6)
    assert again["reply"][0] == df["reply"][3]  # a seed reproduces its reply inside a batch
    div = diversity(df, by="temperature")
    assert list(div.columns) == ["temperature", "distinct_2_across", "replies"] and (div["replies"] == 2).all()
    fig = plot_sweep(df, x="temperature", hue="seed")
    assert len(fig.axes) == 3


def test_sweep_reports_a_refused_request_as_a_row(local: LocalBackend) -> None:
    df = sweep(local, {"temperature": [0.0, 9.0]}, QUESTION, max_tokens=2)
    assert df["error"].isna().tolist() == [True, False]
    assert "Parameter temperature must be in" in df["error"][1]


# ---- latency ----------------------------------------------------------------------------------------------------
def test_timeline_frame_reads_the_engine_timeline(local: LocalBackend) -> None:
    result = local.chat(QUESTION, temperature=0, max_tokens=8, logprobs=True)
    frame = timeline_frame(result)
    assert len(frame) == result.completion_tokens and "".join(frame["token"]) == result.reply
    assert frame["gap_ms"].sum() == pytest.approx(frame["time_ms"].iloc[-1])
    assert frame["batch_size"].tolist() == result.batch_sizes
    assert len(plot_timeline(result).axes) == 2


def test_concurrency_experiment_batches_the_parallel_requests(local: LocalBackend) -> None:
    df = concurrency(local, QUESTION, levels=(1, 3), max_tokens=4, temperature=0.7)
    assert df["concurrency"].tolist() == [1, 3, 3, 3] and (df["completion_tokens"] == 4).all()
    summary = summarize_concurrency(df)
    assert summary["concurrency"].tolist() == [1, 3]
    assert summary["max_batch_size"].tolist()[0] == 1 and summary["max_batch_size"].tolist()[1] >= 2
    assert (summary["tokens_per_s_total"] > 0).all()


def test_run_sync_returns_the_coroutines_value() -> None:
    async def seven() -> int:
        return 7

    assert run_sync(seven()) == 7


def test_serve_in_thread_serves_the_kernels_engine_to_http_clients(settings: Any, service: Any) -> None:
    from app import serve_in_thread

    server = serve_in_thread(settings.replace(ui=False), service)
    try:
        remote = RemoteBackend(server.url)
        assert (
            remote.chat(QUESTION, temperature=0, max_tokens=4).reply
            == connect(service).chat(QUESTION, temperature=0, max_tokens=4).reply
        )
    finally:
        server.stop()
    assert not server.thread.is_alive()


def test_a_closed_caller_loop_aborts_its_request_and_the_engine_keeps_serving(
    local: LocalBackend, service: Any
) -> None:
    """A sync chat() runs on a loop that closes when it returns; an abandoned request must not take the engine
    thread down when its tokens find that loop closed."""

    async def abandon() -> None:
        await service.start(local.request(QUESTION, max_tokens=300, ignore_eos=True))

    asyncio.run(abandon())
    wait_idle(service)
    assert local.chat(QUESTION, temperature=0, max_tokens=2).completion_tokens == 2


# ---- reasoning, tool calls, audio -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def qwen(qwen_live: Any) -> LocalBackend:
    backend = connect(qwen_live.service)
    assert isinstance(backend, LocalBackend) and backend.model == QWEN_MODEL
    return backend


def complete(service: Any, body: dict[str, Any]) -> Any:
    return asyncio.run(service.complete(parse_chat_request({"model": service.served_name, **body})))


def test_reasoning_comes_apart_as_in_the_services_fold(qwen: LocalBackend) -> None:
    result = qwen.chat(MATH.messages, temperature=0, max_tokens=60)
    expected = complete(qwen.service, MATH.request(max_tokens=60)).choices[0].message
    assert (result.reasoning, result.reply) == (expected.reasoning_content, expected.content)
    assert result.reasoning.strip() == "Two plus two is four." and result.reply.strip() == "The answer is 4."
    assert result.tool_calls == [] and result.message() == {"role": "assistant", "content": result.reply}


def test_the_tool_loop_by_hand(qwen: LocalBackend) -> None:
    asked = qwen.chat([WEATHER_QUESTION], tools=TOOLS, temperature=0, max_tokens=60)
    expected = complete(qwen.service, WEATHER.request(max_tokens=60)).choices[0].message.tool_calls
    assert asked.finish_reason == "tool_calls" and asked.reasoning.strip() == "I should call the tool."
    (call,) = asked.tool_calls
    assert [(call.name, call.arguments)] == [(c.function.name, c.function.arguments) for c in expected]
    assert call.id.startswith("call_") and call.args == {"city": "Paris"}
    turn = asked.message()
    assert turn == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": "get_weather", "arguments": call.arguments}}
        ],
    }
    answer = tool_result_message(call, {"temperature": 22, "sky": "sunny"})
    assert answer == {**WEATHER_RESULT, "tool_call_id": call.id}
    final = qwen.chat([WEATHER_QUESTION, turn, answer], tools=TOOLS, temperature=0, max_tokens=60)
    reference = complete(qwen.service, WEATHER_ANSWER.request(max_tokens=60)).choices[0].message.content
    assert final.reply == reference and final.reply.strip() == "It is sunny and 22 °C in Paris."
    assert final.finish_reason == "stop" and final.tool_calls == []
    assert "get_weather" in repr(asked) and "⚒" in asked._repr_html_() and call.id in asked._repr_html_()


def test_remote_tool_calls_fold_from_the_sse_deltas(qwen_live: Any, qwen: LocalBackend) -> None:
    remote = connect(qwen_live.url)
    there = remote.chat([WEATHER_QUESTION], tools=TOOLS, temperature=0, max_tokens=60)
    here = qwen.chat([WEATHER_QUESTION], tools=TOOLS, temperature=0, max_tokens=60)
    assert [(c.name, c.args) for c in there.tool_calls] == [(c.name, c.args) for c in here.tool_calls]
    assert there.reasoning == here.reasoning and there.finish_reason == "tool_calls"


def test_split_tool_call_deltas_fold_into_calls() -> None:
    def delta(*calls: str) -> str:
        return f'{{{HEAD}, "choices": [{{"index": 0, "delta": {{"tool_calls": [{", ".join(calls)}]}}}}]}}'

    lines = sse(
        delta('{"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}}'),
        delta('{"index": 0, "function": {"arguments": "{\\"x\\": "}}'),
        delta('{"index": 0, "function": {"arguments": "1}"}}'),
        delta('{"index": 1, "id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}}'),
        f'{{{HEAD}, "choices": [{{"index": 0, "delta": {{}}, "finish_reason": "tool_calls"}}]}}',
    )
    parser, result = SSEChunks(), ChatResult()
    for line in lines:
        chunk = parser.line(line)
        if chunk is not None:
            result.add(chunk)
    assert result.tool_calls == [ToolCall("call_a", "f", '{"x": 1}'), ToolCall("call_b", "g", "{}")]
    assert [c.args for c in result.tool_calls] == [{"x": 1}, {}]
    assert result.message()["tool_calls"][1] == {
        "id": "call_b",
        "type": "function",
        "function": {"name": "g", "arguments": "{}"},
    }
    with pytest.raises(ValueError, match="not a JSON object"):
        _ = ToolCall("call_c", "h", "[1]").args
    assert tool_result_message(result.tool_calls[0], "plain text")["content"] == "plain text"


def test_audio_part_carries_the_file_and_the_request_parses() -> None:
    part = audio_part(SPEECH)
    assert part["type"] == "input_audio" and part["input_audio"]["format"] == "flac"
    assert base64.b64decode(part["input_audio"]["data"]) == SPEECH.read_bytes()
    assert audio_part(SPEECH, format="wav")["input_audio"]["format"] == "wav"
    with pytest.raises(ValueError, match="input_audio takes mp3, wav, flac"):
        audio_part(Path(__file__))
    message = user_message(part, "Repeat what I said.")
    assert message["content"][1] == {"type": "text", "text": "Repeat what I said."}
    parse_chat_request({"model": MODEL, "messages": [message]})  # valid on the wire


def test_audio_is_transcribed_and_the_transcription_comes_back(local: LocalBackend, live: Any) -> None:
    message = user_message(audio_part(SPEECH), "Repeat what I said.")
    here = local.chat([message], temperature=0, max_tokens=6)
    (t,) = here.transcription
    assert (t["message"], t["part"]) == (0, 0) and "milk" in t["text"].lower()
    assert "♪" in here._repr_html_() and "milk" in here._repr_html_()
    there = connect(live.url).chat([message], temperature=0, max_tokens=6)  # the first SSE chunk carries it
    assert there.transcription == here.transcription and there.reply == here.reply


def test_structured_output_reply_is_the_json_asked_for(local: LocalBackend) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 20}, "legs": {"type": "integer"}},
        "required": ["name", "legs"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "animal", "schema": schema}}
    result = local.chat(
        "Describe a cat as JSON with its name and number of legs.", response_format=fmt, temperature=0, max_tokens=40
    )
    assert result.finish_reason == "stop" and set(json.loads(result.reply)) == {"name", "legs"}


def test_the_first_timeline_says_how_long_preparation_took(local: LocalBackend, service: Any) -> None:
    """Media loading, transcription and templating happen before the engine sees a request: the first token's
    timeline carries that time, so the page can split it off the queue wait and the prefill."""

    async def first_timeline() -> Any:
        gen = await service.start(local.request(QUESTION, max_tokens=3, temperature=0))
        timelines = [chunk.timeline async for chunk in gen if chunk.timeline is not None]
        return timelines

    timelines = asyncio.run(first_timeline())
    first = timelines[0]
    assert first.prepare_ms is not None and 0 < first.prepare_ms < first.token_times_ms[0]
    assert all(t.prepare_ms is None for t in timelines[1:])
