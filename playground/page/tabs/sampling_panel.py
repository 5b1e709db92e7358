"""The Sampling tab: presets, then the request fields (playground/client/controls.py's knobs) grouped by what they
do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground.client import controls
from playground.client.controls import Knob
from playground.page.i18n import PRESET_KEYS, choices, labels, t

# The labels this module shows, translated in the browser (playground/page/i18n.py `t`).
TEXTS = labels(
    __name__,
    {
        "tab_sampling": ("≋ Sampling", "≋ 采样"),
        "preset": ("preset", "预设"),
        "acc_sampling": ("Sampling", "采样"),
        "acc_length": ("Length and stopping", "长度与停止"),
        "acc_candidates": ("Candidates and log-probabilities", "候选与对数概率"),
        "acc_format": ("Response format", "输出格式"),
        "acc_thinking": ("Thinking", "思考"),
        "preset_info": ("Sets the sampling fields below.", "设置下方的采样参数。"),
        "thinking_default": ("model default", "模型默认"),
        "server_default": ("server default", "服务器默认"),
        "thinking_on": ("on", "开启"),
        "thinking_off": ("off", "关闭"),
        "format_none": ("none", "无"),
        "format_json": ("JSON schema", "JSON 模式（schema）"),
        "format_choice": ("choice list", "选项列表"),
        "format_regex": ("regex", "正则表达式"),
        "format_grammar": ("grammar", "文法"),
    },
)
# Each request field's help, and a UI-only knob's label, in both languages where the knob is defined
# (playground/client/controls.py).
KNOB_TEXTS = labels(
    __name__,
    {f"help_{k.name}": k.help for k in controls.KNOBS}
    | {f"label_{k.name}": k.label for k in controls.KNOBS if k.label},
)

GROUPS = (
    ("acc_sampling", controls.SAMPLING, True),
    ("acc_length", controls.LENGTH, True),
    ("acc_candidates", controls.CANDIDATES, False),
    ("acc_format", controls.FORMAT, False),
    ("acc_thinking", controls.THINKING, False),
)


@dataclass(eq=False)
class SamplingTab:
    knobs: dict[str, Any]  # request field -> its control
    preset: gr.Radio
    thinking_note: gr.Markdown


# A choice shown in words of the page's language; its value stays what the request code reads.
SHOWN_CHOICES = {
    "model default": "thinking_default",
    "server default": "server_default",
    "on": "thinking_on",
    "off": "thinking_off",
    "none": "format_none",
    "JSON schema": "format_json",
    "choice list": "format_choice",
    "regex": "format_regex",
    "grammar": "format_grammar",
}


def knob_component(k: Knob) -> gr.Component:
    """A request field's control: labelled with the field's API name (a UI-only knob with its own translated
    label), its help (range and meaning) translated in the browser."""
    label, info, elem_id = t(f"label_{k.name}") if k.label else k.name, t(f"help_{k.name}"), f"pg-{k.name}"
    if k.kind == "slider":
        assert k.lo is not None and k.hi is not None, f"the slider {k.name} needs its range"
        return gr.Slider(k.lo, k.hi, value=k.default, step=k.step, label=label, info=info, elem_id=elem_id)
    if k.kind == "int":  # no min/max here: an out-of-range number gets the API's own message before sending
        return gr.Number(value=k.default, precision=0, label=label, info=info, elem_id=elem_id)
    if k.kind == "check":
        return gr.Checkbox(value=k.default, label=label, info=info, elem_id=elem_id)
    if k.kind == "choice":
        shown = [(t(SHOWN_CHOICES[c]), c) if c in SHOWN_CHOICES else (c, c) for c in k.choices]
        return gr.Radio(shown, value=k.default, label=label, info=info, elem_id=elem_id)
    if k.kind == "dropdown":
        shown = [(t(SHOWN_CHOICES[c]), c) if c in SHOWN_CHOICES else (c, c) for c in k.choices]
        return gr.Dropdown(shown, value=k.default, label=label, info=info, elem_id=elem_id)
    if k.kind == "pattern":
        return gr.Textbox(value=k.default, label=label, info=info, lines=3, max_lines=12, elem_id=elem_id)
    if k.kind == "code":
        return gr.Code(value=k.default, language="json", label=label, lines=5, elem_id=elem_id)
    return gr.Textbox(
        value=k.default,
        label=label,
        info=info,
        lines=2 if k.kind == "lines" else 1,
        max_lines=6 if k.kind == "lines" else 1,
        elem_id=elem_id,
    )


def sampling_tab() -> SamplingTab:
    """The tab's controls; a preset sets the sampling fields it names."""
    knobs: dict[str, Any] = {}
    note = None
    preset = gr.Radio(choices(PRESET_KEYS), label=t("preset"), value=None, info=t("preset_info"), elem_id="pg-preset")
    for title, group, open_ in GROUPS:
        with gr.Accordion(t(title), open=open_):
            if group is controls.THINKING:
                note = gr.Markdown("")
            for row in rows(group):
                with gr.Row(equal_height=True):
                    for k in row:
                        knobs[k.name] = knob_component(k)
    assert note is not None
    preset.change(
        lambda p: [controls.PRESETS[p][f] for f in controls.PRESET_FIELDS] if p else gr.skip(),
        preset,
        [knobs[f] for f in controls.PRESET_FIELDS],
        api_name=False,  # type: ignore[arg-type]
    )
    return SamplingTab(knobs, preset, note)


def rows(group: tuple[Knob, ...]) -> list[list[Knob]]:
    """Two controls a row, so the whole panel fits a laptop screen; code boxes alone."""
    out: list[list[Knob]] = []
    for k in group:
        last = out[-1] if out else None
        fits = last is not None and k.kind != "code" and last[0].kind != "code"
        same = last is not None and fits and (k.kind == "check") == (last[0].kind == "check")
        if last is not None and same and len(last) < 2:
            last.append(k)
        else:
            out.append([k])
    return out
