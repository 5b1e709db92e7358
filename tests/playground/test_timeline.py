"""The per-token timeline SVG (playground/page/timeline.py): axes that fit the reply, a y unit, both languages."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from playground.client.reply import ChoiceView
from playground.page import timeline

SVG = "{http://www.w3.org/2000/svg}"


def reply(times: list[float], engine: bool = True) -> ChoiceView:
    n = len(times)
    return ChoiceView(
        index=0,
        token_ids=list(range(n)),
        times_ms=times,
        batch_sizes=[1] * n if engine else [],
        queue_waits_us=[3000] + [0] * (n - 1) if engine else [],
        prepare_ms=5.0 if engine else None,
        engine_timeline=engine,
    )


def texts(svg: str, cls: str) -> list[str]:
    return [e.text or "" for e in ET.fromstring(svg).iter(f"{SVG}text") if e.get("class") == cls]


def seconds(label: str) -> float:
    value, unit = label.split()
    return float(value) * (1000 if unit == "s" else 1) / 1000


def test_a_29_second_reply_gets_a_0_to_30_s_axis_with_its_last_token_near_the_end() -> None:
    svg = timeline.svg(reply([400.0 + 100 * i for i in range(287)]))  # the last token at 29.0 s
    ticks = texts(svg, "pg-xtick")
    assert ticks[0] == "0 s" and ticks[-1] == "30 s", ticks
    assert [seconds(t) for t in ticks] == [0, 10, 20, 30]
    last = max(float(c.get("cx")) for c in ET.fromstring(svg).iter(f"{SVG}circle"))
    plot_left, plot_right = timeline.LEFT, timeline.W - timeline.RIGHT
    assert (last - plot_left) / (plot_right - plot_left) == pytest.approx(29 / 30, abs=0.01)


def test_a_short_reply_is_labelled_in_ms() -> None:
    ticks = texts(timeline.svg(reply([120.0, 150.0, 180.0, 530.0])), "pg-xtick")
    assert ticks == ["0 ms", "200 ms", "400 ms", "600 ms"]


@pytest.mark.parametrize("value", [0.3, 1, 7, 47, 100, 101, 530, 999, 1010, 2600, 29_000, 50_001, 3.7e6])
def test_axis_ends_at_a_round_step_just_past_the_value(value: float) -> None:
    end, step = timeline.axis(value)
    assert value <= end <= 1.34 * value + 1e-9
    assert end / step == pytest.approx(round(end / step)) and round(end / step) <= 5
    assert any(math.isclose(step, m * 10.0**k) for m in (1, 2, 2.5, 5) for k in range(-3, 8)), step


def test_the_y_axis_says_its_unit_and_its_ticks_cover_the_slowest_step() -> None:
    c = reply([100.0, 110.0, 157.0, 170.0])  # steps of 10, 47 and 13 ms
    svg = timeline.svg(c)
    assert texts(svg, "pg-yunit") == ["ms per decode step"]
    assert texts(svg, "pg-ytick") == ["0", "20", "40", "60"]
    remote = timeline.svg(reply([100.0, 110.0, 157.0], engine=False))
    assert texts(remote, "pg-yunit") == ["ms between tokens"]


def test_chinese_labels_throughout() -> None:
    svg = timeline.svg(reply([100.0, 110.0, 157.0, 170.0]), lang="zh")
    root = ET.fromstring(svg)
    assert root.get("aria-label") == "逐 token 时间线"
    shown = [e.text or "" for e in root.iter(f"{SVG}text")]
    assert {"准备", "排队", "预填充", "推理", "回答", "批大小"} <= set(shown)
    assert "每个解码步耗时 (ms)" in shown and any(s.startswith("圆点：") for s in shown)
    titles = [e.text or "" for e in root.iter(f"{SVG}title")]
    assert "准备 5.0 ms（媒体、模板、分词）" in titles and "排队等待 3.0 ms" in titles
    assert "第 2 个 token：10.0 ms，批大小 1，等待 0.0 ms" in titles
    english = ("prepare", "queue", "prefill", "answer", "batch", "dots", "decode step", "token 2")
    assert not any(word in s for s in shown + titles for word in english)
    assert "发送一条消息" in timeline.svg(ChoiceView(index=0), lang="zh")
    assert "Send a message" in timeline.svg(ChoiceView(index=0))
