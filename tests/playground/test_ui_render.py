"""Chunk rendering, statistics, timeline and conversation logic of the playground, without a browser or a model."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from engine.protocol.response import (
    ChatCompletionChunk,
    ChoiceLogprobs,
    ChunkChoice,
    CompletionTokensDetails,
    Delta,
    FunctionCall,
    LogprobEntry,
    TokenTimeline,
    ToolCallItem,
    TopLogprob,
    Usage,
)
from playground.client import stats
from playground.client.render import Throttle, throttled
from playground.client.reply import ReplyView
from playground.page import heatmap, timeline
from playground.page.conversation import Conversation, Turn, display

LAYER = "api"  # what this module's own fixtures or bodies need (tests/conftest.py)


def chunk(
    index: int = 0,
    times: tuple[float, ...] = (),
    finish: str | None = None,
    usage: Usage | None = None,
    logprobs: list[LogprobEntry] | None = None,
    **delta,
) -> ChatCompletionChunk:
    tl = TokenTimeline(
        token_ids=list(range(len(times))),
        token_times_ms=list(times),
        batch_sizes=[1] * len(times),
        queue_waits_us=[2000] + [0] * (len(times) - 1) if times else [],
    )
    choice = ChunkChoice(
        index=index,
        delta=Delta(**delta),
        finish_reason=finish,
        logprobs=ChoiceLogprobs(content=logprobs) if logprobs else None,
    )
    return ChatCompletionChunk(id="c", created=0, model="m", choices=[choice], usage=usage, timeline=tl)


def usage(prompt: int, completion: int, reasoning: int | None = None) -> Usage:
    u = Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)
    u.prompt_tokens_details.cached_tokens = 3
    if reasoning is not None:
        u.completion_tokens_details = CompletionTokensDetails(reasoning_tokens=reasoning)
    return u


def thinking_reply(done: bool = True) -> ReplyView:
    view = ReplyView()
    view.add(chunk(role="assistant", content=""))
    view.add(chunk(times=(100.0, 110.0), reasoning_content="Let me add."))
    view.add(chunk(times=(120.0,), reasoning_content=" 2+2=4."))
    if done:
        view.add(
            chunk(times=(130.0, 150.0), content="It is 4.", reasoning_content="", finish="stop", usage=usage(15, 5, 3))
        )
        view.add(ChatCompletionChunk(id="c", created=0, model="m", choices=[], usage=usage(15, 5, 3)))
        view.done = True
    return view


def test_reasoning_and_answer_are_kept_apart_with_the_engine_counts() -> None:
    c = thinking_reply().first
    assert c.reasoning == "Let me add. 2+2=4." and c.content == "It is 4."
    assert c.answer_at == 3 and c.reasoning_tokens == 3 and not c.thinking
    assert c.times_ms == [100.0, 110.0, 120.0, 130.0, 150.0]


def test_thinking_block_is_open_while_thinking_and_closed_with_duration_and_tokens_after() -> None:
    live = display(Conversation([Turn("user", "q"), Turn("assistant", reply=thinking_reply(done=False))]))[0]
    assert live[1]["metadata"]["status"] == "pending" and live[1]["metadata"]["log"] == "3 tokens"
    done = display(Conversation([Turn("user", "q"), Turn("assistant", reply=thinking_reply())]))[0]
    meta = done[1]["metadata"]
    assert meta["status"] == "done" and meta["log"] == "3 tokens" and meta["duration"] == 0.12
    assert done[2] == {"role": "assistant", "content": "It is 4."}
    assert done[3]["metadata"]["title"].startswith("▥ 5 tok")


def test_stats_come_from_the_engine_timeline_and_usage() -> None:
    s = thinking_reply().stats()
    assert (s.prompt_tokens, s.cached_tokens, s.completion_tokens, s.reasoning_tokens) == (15, 3, 5, 3)
    assert s.ttft_ms == 100.0 and s.e2e_ms == 150.0 and s.queue_ms == 2.0 and s.prefill_ms == 98.0
    assert s.decode_tps == pytest.approx(4 / 0.05)  # tokens after the first over their time
    assert s.finish_reason == "stop"
    assert "| prompt tokens | 15 |" in stats.markdown(s)
    assert 'data-stat="decode speed">80.0 tok/s<' in stats.table_html(s)


def test_preparation_is_split_off_the_prefill() -> None:
    view = thinking_reply()
    view.first.prepare_ms = 30.0  # what the service puts on the first timeline: media, template, tokens
    s = view.stats()
    assert (s.prepare_ms, s.queue_ms, s.prefill_ms) == (30.0, 2.0, 68.0)
    assert 'data-stat="preparation">30 ms<' in stats.table_html(s)
    assert "preparation 30.0 ms" in timeline.svg(view.first)


def test_reasoning_that_used_up_max_tokens_warns() -> None:
    view = ReplyView()
    view.add(chunk(times=(10.0, 20.0), reasoning_content="hmm"))
    view.add(chunk(times=(30.0,), reasoning_content=" more", content="", finish="length", usage=usage(5, 3, 3)))
    view.done = True
    shown = display(Conversation([Turn("user", "q"), Turn("assistant", reply=view)]))[0]
    assert "used up all 3 tokens of max_tokens" in shown[2]["content"]


def test_streamed_tool_calls_merge_and_are_checked_against_the_schema() -> None:
    from playground.client.tools_panel import GET_WEATHER

    view = ReplyView()
    head = ToolCallItem(index=0, id="call_1", type="function", function=FunctionCall(name="get_weather", arguments=""))
    view.add(chunk(times=(10.0,), tool_calls=[head]))
    view.add(chunk(times=(20.0,), tool_calls=[ToolCallItem(index=0, function=FunctionCall(arguments='{"city": '))]))
    view.add(
        chunk(
            times=(30.0,),
            tool_calls=[ToolCallItem(index=0, function=FunctionCall(arguments='"Paris"}'))],
            finish="tool_calls",
            usage=usage(20, 3),
        )
    )
    view.done = True
    conv = Conversation([Turn("user", "Weather?"), Turn("assistant", reply=view, request={"tools": [GET_WEATHER]})])
    shown = display(conv)[0]
    call = next(m for m in shown if m.get("metadata", {}).get("title") == "⚒ get_weather")
    assert '"city": "Paris"' in call["content"] and "arguments match" in call["content"]
    assert conv.pending_calls() == [("call_1", "get_weather")]
    assert conv.messages()[-1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    conv.turns.append(Turn("tool", '{"t": 1}', tool_call_id="call_1", tool_name="get_weather"))
    assert conv.pending_calls() == []
    assert conv.messages()[-1] == {"role": "tool", "tool_call_id": "call_1", "content": '{"t": 1}'}


def test_empty_replies_stay_out_of_the_history_and_finished_turns_are_rendered_once() -> None:
    stopped = ReplyView(stopped=True, done=True)
    conv = Conversation([Turn("user", "a"), Turn("assistant", reply=stopped), Turn("user", "b")])
    assert [m["role"] for m in conv.messages()] == ["user", "user"]
    shown, owner = display(conv)
    assert "stopped" in shown[1]["content"] and owner == [0, 1, 2]
    assert conv.turns[1].shown == shown[1:2]


def test_timeline_is_well_formed_svg_with_the_boundary_and_per_token_hover() -> None:
    svg = timeline.svg(thinking_reply().first)
    root = ET.fromstring(svg)
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t.startswith("queue wait 2.0 ms") for t in titles)
    assert any(t.startswith("token 2: 10.0 ms, batch 1") for t in titles)
    assert "reasoning ends after token 3" in titles
    assert "Send a message" in timeline.svg(ReplyView().first)


def test_heatmap_shows_probability_and_alternatives_and_candidates_rank_by_logprob() -> None:
    entry = LogprobEntry(
        token="Paris", logprob=-0.1, bytes=[], top_logprobs=[TopLogprob(token="Rome", logprob=-2.5, bytes=[])]
    )
    html = heatmap.tokens_html([entry])
    assert "p=90.5%" in html and "&#x27;Rome&#x27;  8.2%" in html
    view = ReplyView()
    view.add(chunk(index=0, times=(1.0,), content="a", logprobs=[LogprobEntry(token="a", logprob=-3.0, bytes=[])]))
    view.add(chunk(index=1, times=(1.0,), content="b", logprobs=[LogprobEntry(token="b", logprob=-0.5, bytes=[])]))
    cands = heatmap.candidates_html(view)
    assert cands.index("choice 1 ★") < cands.index("choice 0") and "cumulative logprob -0.50" in cands


def test_throttle_lets_through_about_ten_updates_a_second() -> None:
    clock = iter(range(10_000))  # one chunk every 10 ms, counted in ms
    t = Throttle(100, clock=lambda: next(clock) * 10)
    assert sum(t.due() for _ in range(500)) == 50  # 5 s of 100 chunks/s -> 10 renders a second


def test_a_conversation_exports_and_imports_with_its_settings(tmp_path) -> None:
    from playground.page import export

    view = thinking_reply()
    conv = Conversation([Turn("user", "What is 2+2?"), Turn("assistant", reply=view)])
    doc = export.dump(export.Snapshot(conv, "Be brief.", "", "auto", {"temperature": 0.0, "bogus": 1}))
    assert doc["settings"] == {"temperature": 0.0}
    assert doc["messages"][1] == {"role": "assistant", "content": "It is 4.", "reasoning_content": "Let me add. 2+2=4."}
    path = export.write(doc, tmp_path)
    back = export.load(Path(path).read_text(encoding="utf-8"))
    assert back.system == "Be brief." and back.settings == {"temperature": 0.0}
    assert back.conv.messages(with_reasoning=True) == doc["messages"]
    shown = display(back.conv)[0]
    assert shown[1]["metadata"]["title"] == "∴ Thought" and shown[2]["content"] == "It is 4."
    assert shown == display(conv)[0]  # its statistics too: a kept reply shows what it showed when it was new
    assert back.conv.turns[1].reply.stats() == view.stats()
    with pytest.raises(ValueError, match="not a playground conversation"):
        export.load({"messages": []})
    with pytest.raises(ValueError, match="not JSON"):
        export.load("{")


async def _ticks(gaps: list[float]):
    for i, gap in enumerate(gaps):
        await asyncio.sleep(gap)
        yield i


@pytest.mark.parametrize(("gaps", "most"), [([0.15] * 5, 5), ([0.005] * 40, 10)])
def test_repaints_follow_slow_streams_token_by_token_and_cap_fast_ones(gaps: list[float], most: int) -> None:
    async def run() -> tuple[list[int], int]:
        seen: list[int] = []
        paints = 0
        async for _ in throttled(_ticks(gaps), seen.append, every=0.1):
            paints += 1
        return seen, paints

    seen, paints = asyncio.run(run())
    assert seen == list(range(len(gaps)))  # every chunk folded, none lost to the throttle
    assert 1 <= paints <= most
    if gaps[0] > 0.1:
        assert paints == len(gaps)  # slower than the throttle: each token shows as it comes
