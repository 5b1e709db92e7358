"""The page's header, chat column and tool row, one small builder each, as Gradio's own demos build theirs: each lays
out its components (inside whatever Row, Column or Tab it is called in) and returns them; playground/page/ui.py wires
the events. Each side tab's builder is in playground/page/tabs/."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from playground.client import tools_panel
from playground.page import attach_panel, textmode
from playground.page.attach_panel import AttachHandlers
from playground.page.i18n import choices, labels, t

# The labels this module shows, translated in the browser (playground/page/i18n.py `t`).
TEXTS = labels(
    __name__,
    {
        "chat": ("Chat", "对话"),
        "placeholder": (
            "Type a message · Enter sends · Shift+Enter for a new line",
            "输入消息 · Enter 发送 · Shift+Enter 换行",
        ),
        "send": ("Send", "发送"),
        "mode": (
            "Mode: Chat sends the conversation through the chat template; Text sends the box's text as a raw prompt",
            "模式：对话模式经聊天模板发送整段对话；文本模式把输入框的文字作为原始提示发送",
        ),
        "stop": ("Stop", "停止"),
        "regenerate": ("↻ Regenerate", "↻ 重新生成"),
        "clear": ("✕ Clear", "✕ 清空"),
        "export": ("⬇ Export", "⬇ 导出"),
        "import": ("⬆ Import", "⬆ 导入"),
        "system": ("System prompt", "系统提示词"),
        "call": ("call", "调用"),
        "saved_result": ("saved result", "已保存的结果"),
        "result": ("result (JSON or text)", "结果（JSON 或文本）"),
        "send_result": ("Send result", "发送结果"),
        "model_pick": ("Model", "模型"),
        "drawer": ("☰ Panels", "☰ 面板"),
        "switch_key": ("Admin key (to switch)", "管理员密钥（切换用）"),
        "message": ("Message", "消息"),
        "service_help": ("The model is loading…", "模型加载中…"),
        "tool_called": (
            "⚒ **The model called a tool.** Type (or pick) its result to continue.",
            "⚒ **模型调用了工具。** 输入（或选择）调用结果以继续。",
        ),
    },
)


@dataclass(eq=False)
class Header:
    html: gr.HTML
    dark: gr.Button
    model: gr.Dropdown | None = None  # the server's models and LoRA adapters (header_models.py); shown when any
    admin_key: gr.Textbox | None = None  # the admin key a model switch takes once credentials are set
    admin_box: gr.Column | None = None  # holds admin_key: hidden, it takes no room in the header
    drawer: gr.Button | None = None  # a phone's button that opens and closes the side tabs' drawer (layout.css)


def header_row() -> Header:
    with gr.Row():
        html = gr.HTML(t("header_loading"))  # until the page knows the model (capabilities.header_html)
        model = gr.Dropdown([], label=t("model_pick"), visible=False, scale=0, min_width=400, elem_id="pg-model")
        with gr.Column(scale=0, min_width=160, visible=False) as box:
            key = gr.Textbox(label=t("switch_key"), type="password", elem_id="pg-model-key")
        # On a phone the side panel is a drawer (layout.css, layout.js); this button, hidden on a wide screen,
        # opens and closes it without a server round trip.
        drawer = gr.Button(t("drawer"), size="sm", scale=0, min_width=44, elem_id="pg-drawer")
        dark = gr.Button("◐", size="sm", scale=0, min_width=44, elem_id="pg-dark")
    drawer.click(None, js="() => window.pgToggleDrawer && pgToggleDrawer()", queue=False)
    return Header(html, dark, model, key, box, drawer)


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
    mode: gr.Radio | None = None  # Chat | Text: what Send sends (playground/page/textmode.py)


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
    # Chat | Text (playground/page/textmode.py): a base model starts on Text (ui.py wire_load), the user switches.
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
    context = gr.HTML("", elem_id="pg-context")  # playground/page/context_meter.py
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
