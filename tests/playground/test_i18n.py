"""The page's two languages without a browser: every label has its Chinese, and the text the server renders
(statistics, notes, checks) comes out in the session's language with the English unchanged."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gradio as gr
import pytest

from engine.serving.policy import RequestPolicy
from playground.client import controls, stats, tools_panel
from playground.client.reply import ReplyStats
from playground.page import capabilities, i18n, ui
from playground.page.i18n import LABELS, say
from tests.test_architecture import ROOT, playground_graph

# The top-level keys of Gradio 6.31's own catalogue: a label key of that name would get Gradio's whole section
# (the page showed "[object Object]" for an image labelled with the key "image").
GRADIO_SECTIONS = {
    "annotated_image",
    "audio",
    "blocks",
    "chat_interface",
    "chatbot",
    "checkbox",
    "code",
    "color_picker",
    "common",
    "dataframe",
    "dropdown",
    "errors",
    "file",
    "highlighted_text",
    "image",
    "image_editor",
    "label",
    "login",
    "number",
    "plot",
    "radio",
    "slider",
    "status",
    "upload_text",
    "video",
}
SAME_IN_BOTH = {"curl"}  # a tool's name, the same in both languages


# Each module owns the labels it shows (playground/page/i18n.py `labels`); the page, imported above, has registered
# every module's.
def shown_keys(value: Any) -> set[str]:
    """The label keys in a built page's config: each a Gradio I18nData, or its string form inside a longer one."""
    if isinstance(value, gr.i18n.I18nData):
        return {value.key}
    if isinstance(value, dict):
        return {k for v in value.values() for k in shown_keys(v)}
    if isinstance(value, list | tuple):
        return {k for v in value for k in shown_keys(v)}
    if isinstance(value, str) and "__i18n__" in value:
        return set(re.findall(r'__i18n__\{"__type__": "translation_metadata", "key": "([^"]+)"\}', value))
    return set()


def test_every_label_the_built_page_shows_is_registered_in_both_languages(settings: Any) -> None:
    """The whole page built over a real request policy (no model loaded yet): every label key its components carry
    has its English and its Chinese, and every label a module registers is shown (no dead text)."""
    demo = ui.build_ui(RequestPolicy(settings, lambda: None))
    shown = shown_keys(demo.config)
    assert len(shown) > 100, len(shown)  # the config is read, not empty
    assert shown <= set(LABELS), sorted(shown - set(LABELS))
    assert not [k for k in shown if not (LABELS[k][0].strip() and LABELS[k][1].strip())]
    # not shown here: the admin key's help shows only on a server with credentials; a Code box has no help line
    unshown = {"admin_key_help", "help_json_schema"}
    assert set(LABELS) - unshown <= shown, f"registered but never shown: {sorted(set(LABELS) - unshown - shown)}"


def page_modules() -> list[Path]:
    return sorted((ROOT / "playground/page").rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for m in graph[todo.pop()] - seen:
            seen.add(m)
            todo.append(m)
    return seen


@pytest.mark.parametrize("path", page_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_looks_up_only_labels_that_it_or_its_imports_register(path: Path) -> None:
    """`t("key")` in a module: the key is registered by that module or one it imports (directly or not), so it is
    there whenever the module is."""
    tree = ast.parse(path.read_text())
    keys = {
        n.args[0].value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "t" and isinstance(n.args[0], ast.Constant)
    }
    imported = reachable(playground_graph(), module_name(path))
    bad = {k: i18n.OWNER.get(k) for k in keys if i18n.OWNER.get(k) not in imported}
    assert not bad, f"{path.relative_to(ROOT)} looks up labels no module it imports registers: {bad}"


def test_no_two_modules_define_the_same_label() -> None:
    owners: dict[str, list[str]] = {}
    for path in page_modules():
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "labels" and isinstance(n.args[1], ast.Dict):
                for key in n.args[1].keys:
                    assert isinstance(key, ast.Constant), f"{path}: a label's key is a plain string"
                    owners.setdefault(key.value, []).append(module_name(path))
    assert len(owners) > 100  # the modules' labels are read
    assert not {k: v for k, v in owners.items() if len(v) > 1}
    assert set(owners) <= set(LABELS) and set(i18n.OWNER) == set(LABELS)
    with pytest.raises(ValueError, match="'tab_stats' is defined by both playground.page.tabs.stats and elsewhere"):
        i18n.labels("elsewhere", {"tab_stats": ("Stats", "统计")})
    assert i18n.OWNER["tab_stats"] == "playground.page.tabs.stats"


@pytest.mark.parametrize("key", sorted(LABELS))
def test_every_label_has_a_chinese_entry_of_its_own(key: str) -> None:
    en, zh = LABELS[key]
    assert en.strip() and zh.strip(), key
    if re.search("[A-Za-z]", en) and key not in SAME_IN_BOTH:
        assert zh != en, f"{key}: the Chinese entry is the English one"
        assert re.search("[\u4e00-\u9fff]", zh), f"{key}: no Chinese in {zh!r}"
    assert set(re.findall(r"\{\w+\}", en)) == set(re.findall(r"\{\w+\}", zh)), f"{key}: placeholders differ"


def test_no_label_key_is_one_of_gradios_own_sections() -> None:
    assert not GRADIO_SECTIONS & set(LABELS)
    assert not [k for k in LABELS if "." in k]  # a dotted key would read as a path into Gradio's catalogue


def test_every_request_field_and_preset_has_its_translated_help_and_name() -> None:
    for knob in controls.KNOBS:
        assert LABELS[f"help_{knob.name}"] == knob.help
        assert not knob.label or LABELS[f"label_{knob.name}"] == knob.label
    assert set(i18n.PRESET_KEYS) == set(controls.PRESETS)
    assert i18n.preset_name("Creative", "zh") == "创意" and i18n.preset_name("Creative", "en") == "Creative"
    # the request fields a help names stay as the API spells them
    for knob in controls.KNOBS:
        en, zh = knob.help
        assert set(re.findall(r"\b[a-z]+_[a-z_.]+\b", en)) <= set(re.findall(r"\b[a-z]+_[a-z_.]+\b", zh)), knob.name


def test_say_picks_the_language_and_fills_the_values() -> None:
    assert say(("{n} tool(s)", "{n} 个工具"), "zh", n=2) == "2 个工具"
    assert say(("{n} tool(s)", "{n} 个工具"), "en", n=2) == "2 tool(s)"


def test_statistics_keep_their_english_keys_and_show_chinese_names() -> None:
    s = ReplyStats(
        completion_tokens=8,
        prompt_tokens=30,
        ttft_ms=50,
        finish_reason="length",
        backend="remote",
        not_provided=["engine timeline", "prefill"],
    )
    zh, en = stats.table_html(s, lang="zh"), stats.table_html(s)
    assert '<th>结束原因</th><td data-stat="finish reason">length</td>' in zh
    assert '<th>预填充</th><td data-stat="prefill">未提供</td>' in zh and 'data-stat="not provided"' in zh
    assert "远程后端未提供：引擎时间线、预填充。" in zh and "prefill" not in re.sub(r'data-stat="[^"]*"', "", zh)
    assert '<th>finish reason</th><td data-stat="finish reason">length</td>' in en
    assert "Not provided by the remote backend: engine timeline, prefill." in en
    assert stats.rows(s)[0] == ("prompt tokens", "30", "tokens of the templated conversation")  # the notebooks'
    assert stats.rows(s, "zh")[0] == ("提示 token 数", "30", "套用对话模板后的 token 数")
    assert stats.markdown(s, "zh").startswith("| 统计 | 值 |")
    streaming = ReplyStats(completion_tokens=1, streaming=True)
    assert stats.summary(streaming, "zh").endswith("生成中…") and stats.summary(streaming).endswith("streaming…")


def service(tools: bool) -> SimpleNamespace:
    def parser(_req: object) -> object:
        if not tools:
            raise AttributeError("no tool-call format")
        return object()

    return SimpleNamespace(
        served_name="m",
        model=SimpleNamespace(modalities=frozenset(), context_length=4096),
        settings=SimpleNamespace(audio_transcription=True),
        tool_parser_for=parser,
        reasoning=SimpleNamespace(available=False),
    )


def test_a_model_without_tools_is_said_plainly_and_no_command_is_given() -> None:
    for lang in ("en", "zh"):
        note, thinking = capabilities.model_notes(service(tools=False), lang)
        assert note and thinking and "python" not in (note + thinking).lower()
    note = capabilities.model_notes(service(tools=False))[0]
    assert note.startswith("⚠️ **m cannot call tools.**") and "has no tool-call format, so tools are rejected" in note
    assert capabilities.model_notes(service(tools=False), "zh")[0].startswith("⚠️ **m 不能调用工具。**")
    assert capabilities.model_notes(service(tools=True))[0] == ""


def test_the_tools_check_says_first_that_the_model_cannot_call_tools() -> None:
    from playground.page.tabs.tools import tools_changed

    text = tools_panel.dumps([tools_panel.GET_WEATHER])
    assert tools_changed(text, None)[0] == "✓ 1 tool(s) valid"
    assert tools_changed(text, None, "zh")[0] == "✓ 1 个工具有效"
    cannot = tools_changed(text, None, "en", cannot="m")[0]
    assert cannot.startswith("⚠️ m cannot call tools") and cannot.endswith("1 tool(s) valid.")
    assert tools_changed(text, None, "zh", cannot="m")[0].startswith("⚠️ m 不能调用工具")
    assert tools_changed("[{", None, "zh")[0].startswith("⚠️ 工具不是有效的 JSON：")
    assert tools_changed("", None, "zh")[0] == "没有工具。"


def test_tool_arguments_and_json_errors_in_chinese() -> None:
    tools = [tools_panel.GET_WEATHER]
    assert tools_panel.check_arguments(tools, "get_weather", '{"city": 3, "x": 1}', "zh") == [
        "'city' 应为 string，实际为 3",
        "多余的参数 'x'",
    ]
    assert tools_panel.check_arguments(tools, "get_weather", '{"city": 3}') == ["'city' should be string, got 3"]
    assert (
        tools_panel.parse_tools("[{", "zh")[1] == "工具不是有效的 JSON：此处应为双引号括起的属性名（第 1 行第 3 列）。"
    )
    with pytest.raises(Exception, match="json_schema 框中不是有效的 JSON"):
        controls.request_fields({"response_format": "json_schema", "json_schema": "{x"}, "zh")


def test_the_header_and_the_attach_line_in_chinese() -> None:
    svc = service(tools=False)
    svc.engine = SimpleNamespace(device="cpu", runner=SimpleNamespace(dtype="torch.float32"))
    zh = capabilities.header_html(svc, lang="zh")
    assert "后端：内置引擎" in zh and "上下文 4,096" in zh
    assert ">推理</span>" not in zh and ">工具调用</span>" not in zh  # what it cannot do is not in the header
    assert "backend: embedded engine" in capabilities.header_html(svc) and "context 4,096" in capabilities.header_html(
        svc
    )
    assert capabilities.backend_label("backend: remote http://h:1 · m", "zh") == "后端：远程 http://h:1 · m"
    assert "模型加载中" in capabilities.header_html(None, lang="zh")
    note = capabilities.attach_note(svc, lang="zh")
    assert 'data-kind="image"' in note and "✗ 会被拒绝（没有图像输入）" in note and "由 Whisper 转写" in note
    assert capabilities.refusal(svc, "video", "zh") == "m 没有视频输入：API 会拒绝这条消息"
