"""The page's panels, one small builder each, as Gradio's own demos build theirs: each lays out its components
(inside whatever Row, Column or Tab it is called in) and returns them; playground/ui.py wires the events."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground import attach_panel, textmode, tools_panel
from playground.attach_panel import AttachHandlers
from playground.capabilities import capabilities
from playground.header_models import SAME
from playground.i18n import PRESET_KEYS, choices, say, t
from playground.session import Session


@dataclass(eq=False)
class Header:
    html: gr.HTML
    dark: gr.Button
    model: gr.Dropdown | None = None  # the server's models and LoRA adapters (header_models.py); shown when any
    admin_key: gr.Textbox | None = None  # the admin key a model switch takes once credentials are set
    admin_box: gr.Column | None = None  # holds admin_key: hidden, it takes no room in the header


def header_row() -> Header:
    with gr.Row():
        html = gr.HTML(t("header_loading"))  # until the page knows the model (capabilities.header_html)
        model = gr.Dropdown([], label=t("model_pick"), visible=False, scale=0, min_width=400, elem_id="pg-model")
        with gr.Column(scale=0, min_width=160, visible=False) as box:
            key = gr.Textbox(label=t("switch_key"), type="password", elem_id="pg-model-key")
        dark = gr.Button("◐", size="sm", scale=0, min_width=44, elem_id="pg-dark")
    return Header(html, dark, model, key, box)


@dataclass(eq=False)
class ToolRow:
    """Shown while the last reply's tool calls wait for their results."""

    group: gr.Group
    call: gr.Dropdown
    saved: gr.Dropdown
    text: gr.Textbox
    send: gr.Button


def tool_row() -> ToolRow:
    with gr.Group(visible=False, elem_id="pg-tool-row") as group:
        gr.Markdown(t("tool_called"), padding=True)
        with gr.Row():
            call = gr.Dropdown(label=t("call"), scale=3, choices=[])
            saved = gr.Dropdown(list(tools_panel.SAVED_RESULTS), label=t("saved_result"), scale=2)
        with gr.Row(equal_height=True):
            text = gr.Textbox(label=t("result"), scale=5, elem_id="pg-tool-result")
            send = gr.Button(t("send_result"), variant="primary", scale=1, elem_id="pg-tool-send")
    saved.change(lambda name: tools_panel.SAVED_RESULTS.get(name, gr.skip()), saved, text, api_name=False)  # type: ignore[arg-type]
    return ToolRow(group, call, saved, text, send)


@dataclass(eq=False)
class ChatColumn:
    chatbot: gr.Chatbot
    box: gr.Textbox
    send: gr.Button
    stop: gr.Button
    pending_view: gr.HTML
    check: gr.Markdown
    tools: ToolRow
    regen: gr.Button
    clear: gr.Button
    download: gr.DownloadButton
    upload: gr.UploadButton
    pending: gr.State
    caps_note: gr.HTML
    system: gr.Textbox
    context: gr.HTML
    mode: gr.Radio | None = None  # Chat | Text: what Send sends (playground/textmode.py)


def chat_column(attach: AttachHandlers, session: gr.State) -> ChatColumn:
    """The chat, its input row, the tool-result row, the chat's own buttons, attachments and the system prompt."""
    chatbot = gr.Chatbot(
        label=t("chat"),
        height="62vh",
        editable="user",
        elem_id="pg-chat",
        placeholder=t("service_help"),  # type: ignore[arg-type]
        buttons=["copy", "copy_all"],
        feedback_options=None,
    )
    with gr.Row():
        box = gr.Textbox(
            label=t("message"),
            placeholder=t("placeholder"),
            show_label=False,
            scale=6,
            lines=1,
            max_lines=8,
            elem_id="pg-input",
        )
        send = gr.Button(t("send"), variant="primary", scale=1, min_width=70, elem_id="pg-send")
        stop = gr.Button(t("stop"), variant="stop", scale=1, min_width=70, elem_id="pg-stop")
    # Chat | Text (playground/textmode.py): a base model starts on Text (ui.py wire_load), the user switches.
    with gr.Row(elem_id="pg-mode-row"):
        mode = gr.Radio(
            choices(textmode.MODE_KEYS),
            value=textmode.CHAT,
            label=t("mode"),
            show_label=False,
            container=False,
            scale=0,
            min_width=170,
            elem_id="pg-mode",
        )
    context = gr.HTML("", elem_id="pg-context")  # playground/context_meter.py
    pending_view = gr.HTML("", elem_id="pg-attach-list")
    check = gr.Markdown("", elem_id="pg-check")
    tools = tool_row()
    with gr.Row():
        regen = gr.Button(t("regenerate"), size="sm")
        clear = gr.Button(t("clear"), size="sm")
        download = gr.DownloadButton(t("export"), size="sm", elem_id="pg-export")  # type: ignore[arg-type]
        upload = gr.UploadButton(t("import"), size="sm", file_types=[".json"], elem_id="pg-import")  # type: ignore[arg-type]
    pending, caps_note = attach_panel.build(attach, pending_view, session)
    system = gr.Textbox(label=t("system"), lines=2, max_lines=8, placeholder=t("none_placeholder"), elem_id="pg-system")
    return ChatColumn(
        chatbot,
        box,
        send,
        stop,
        pending_view,
        check,
        tools,
        regen,
        clear,
        download,
        upload,
        pending,
        caps_note,
        system,
        context,
        mode,
    )


@dataclass(eq=False)
class StatsTab:
    stats: gr.HTML
    timeline: gr.HTML
    heat: gr.HTML
    cands: gr.HTML
    quality: gr.Button  # the quality meter of the selected reply (playground/quality_panel.py)
    quality_note: gr.HTML


def stats_tab() -> StatsTab:
    stats = gr.HTML(t("no_reply_html"), elem_id="pg-stats")
    plot = gr.HTML("", elem_id="pg-timeline")
    with gr.Row():
        quality = gr.Button("⚖ Quality vs fp32", size="sm", elem_id="pg-quality-go", scale=0)
        quality_note = gr.HTML("", elem_id="pg-quality-note")
    with gr.Accordion(t("tokens"), open=True):
        heat = gr.HTML("", elem_id="pg-heat")
        cands = gr.HTML("", elem_id="pg-cands")
    return StatsTab(stats, plot, heat, cands, quality, quality_note)


@dataclass(eq=False)
class ToolsTab:
    note: gr.Markdown
    example: gr.Dropdown
    code: gr.Code
    check: gr.Markdown
    choice: gr.Dropdown


def tools_tab(session: gr.State | None = None, get_service: Callable[[Session], Any] | None = None) -> ToolsTab:
    """The Tools tab; with the page's `session` and `get_service` (the service a session talks to), the JSON check
    speaks the session's language and says first when the model cannot call tools at all."""
    note = gr.Markdown("", elem_id="pg-tools-note")
    example = gr.Dropdown(list(tools_panel.EXAMPLES), label=t("example"), value=None, elem_id="pg-tool-example")
    code = gr.Code("", language="json", label=t("tools_json"), lines=12, elem_id="pg-tools")
    check = gr.Markdown("", elem_id="pg-tools-check")
    choice = gr.Dropdown(list(tools_panel.FIXED_CHOICES), value="auto", label="tool_choice", allow_custom_value=False)
    example.change(
        lambda name: tools_panel.dumps(tools_panel.EXAMPLES[name]) if name else gr.skip(),
        example,
        code,
        api_name=False,  # type: ignore[arg-type]
    )
    if session is None:
        code.change(tools_changed, [code, choice], [check, choice], api_name=False)  # type: ignore[arg-type]
    else:
        code.change(session_tools_check(get_service), [code, choice, session], [check, choice], api_name=False)  # type: ignore[arg-type]
    return ToolsTab(note, example, code, check, choice)


def session_tools_check(get_service: Callable[[Session], Any] | None) -> Callable[..., tuple[str, Any]]:
    """tools_changed in the session's language, naming the embedded model when it has no tool-call format (a
    remote backend's server decides for itself)."""

    def changed(text: str, current: str | None, session: Session) -> tuple[str, Any]:
        service = None if session.remote or get_service is None else get_service(session)
        cannot = service is not None and not capabilities(service)["tools"]
        unable = service.served_name if service is not None and cannot else None
        return tools_changed(text, current, session.lang, unable)

    return changed


def tools_changed(text: str, current: str | None, lang: str = "en", cannot: str | None = None) -> tuple[str, Any]:
    """The tools JSON checked as it is typed, and tool_choice's options: auto, none, required and each tool.
    `cannot`: the name of a model without a tool-call format, which the message then says first."""
    tools, problem = tools_panel.parse_tools(text, lang)
    options = tools_panel.choice_options(tools)
    value = current if current in options else "auto"
    if problem:
        message = f"⚠️ {problem}"
    elif not tools:
        message = say(("No tools.", "没有工具。"), lang)
    elif cannot:
        message = say(
            (
                "⚠️ {name} cannot call tools: a message sent with them is refused. The JSON itself is fine: "
                "{n} tool(s) valid.",
                "⚠️ {name} 不能调用工具：带这些工具发送的消息会被拒收。JSON 本身没有问题：{n} 个工具有效。",
            ),
            lang,
            name=cannot,
            n=len(tools),
        )
    else:
        message = say(("✓ {n} tool(s) valid", "✓ {n} 个工具有效"), lang, n=len(tools))
    return message, gr.update(choices=options, value=value)


@dataclass(eq=False)
class AbTab:
    preset_b: gr.Radio
    go: gr.Button
    check: gr.Markdown
    a_md: gr.Markdown
    a_html: gr.HTML
    b_md: gr.Markdown
    b_html: gr.HTML
    model_b: gr.Dropdown  # side B's model: the same as A's, or a LoRA adapter (header_models.py)

    def outputs(self) -> list[gr.Component]:
        return [self.check, self.a_md, self.a_html, self.b_md, self.b_html]


def ab_tab() -> AbTab:
    gr.Markdown(t("ab_help"))
    with gr.Row():
        preset_b = gr.Radio(choices(PRESET_KEYS), value="Creative", label=t("b_uses"), scale=3)
        model_b = gr.Dropdown([SAME], value=SAME, label=t("b_model"), visible=False, scale=2, elem_id="pg-ab-model")
        go = gr.Button(t("run_ab"), variant="primary", scale=1, size="sm", interactive=False, elem_id="pg-ab-run")
    check = gr.Markdown("", elem_id="pg-ab-check")
    with gr.Row():
        with gr.Column(min_width=200):
            a_md, a_html = gr.Markdown(elem_id="pg-ab-a"), gr.HTML(elem_id="pg-ab-a-numbers")
        with gr.Column(min_width=200):
            b_md, b_html = gr.Markdown(elem_id="pg-ab-b"), gr.HTML(elem_id="pg-ab-b-numbers")
    return AbTab(preset_b, go, check, a_md, a_html, b_md, b_html, model_b)


@dataclass(eq=False)
class RequestTab:
    req_json: gr.Code
    replay: gr.Button
    replay_out: gr.Markdown
    curl: gr.Code
    python: gr.Code
    raw: gr.Code


def request_tab() -> RequestTab:
    req_json = gr.Code("", language="json", label=t("request_body"), lines=10, interactive=True, elem_id="pg-request")
    replay = gr.Button(t("replay"), size="sm", elem_id="pg-replay")
    replay_out = gr.Markdown("", elem_id="pg-replay-out")
    curl = gr.Code("", language="shell", label=t("curl"), lines=4, elem_id="pg-curl")
    python = gr.Code("", language="python", label=t("python"), lines=8, elem_id="pg-python")
    raw = gr.Code("", language="json", label=t("raw"), lines=8, max_lines=20, elem_id="pg-raw")
    return RequestTab(req_json, replay, replay_out, curl, python, raw)
