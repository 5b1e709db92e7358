"""The playground page: chat on the left, statistics / sampling / tools / tokens / request on the right.

It runs on the same in-process ChatService as the API, builds the same request the API parses and renders only
the service's chunks; it never touches the tokenizer, the template or the model (see playground/chat.py).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import gradio as gr

from engine.serving.policy import RequestPolicy
from playground import attach_panel, backend_panel, controls, export, tools_panel
from playground.attach_panel import AttachHandlers
from playground.capabilities import attach_note, header_html, model_notes
from playground.chat import OUTPUTS, ChatHandlers
from playground.compare import CompareHandlers
from playground.controls import Knob
from playground.conversation import Conversation, display
from playground.i18n import I18N, t

CSS = (Path(__file__).parent / "style.css").read_text(encoding="utf-8")

SERVICE_HELP = (
    "Runs on the embedded engine; the same engine answers `POST /v1/chat/completions` on this port. "
    "Click any reply to see its statistics, timeline, tokens and exact request on the right."
)


def knob_component(k: Knob) -> gr.Component:
    label, elem_id = k.label or k.name, f"pg-{k.name}"
    if k.kind == "slider":
        return gr.Slider(k.lo, k.hi, value=k.default, step=k.step, label=label, info=k.help, elem_id=elem_id)
    if k.kind == "int":  # no min/max here: an out-of-range number gets the API's own message before sending
        return gr.Number(value=k.default, precision=0, label=label, info=k.help, elem_id=elem_id)
    if k.kind == "check":
        return gr.Checkbox(value=k.default, label=label, info=k.help, elem_id=elem_id)
    if k.kind == "choice":
        return gr.Radio(list(k.choices), value=k.default, label=label, info=k.help, elem_id=elem_id)
    if k.kind == "code":
        return gr.Code(value=k.default, language="json", label=label, lines=5, elem_id=elem_id)
    return gr.Textbox(value=k.default, label=label, info=k.help, lines=2 if k.kind == "lines" else 1,
                      max_lines=6 if k.kind == "lines" else 1, elem_id=elem_id)  # fmt: skip


def build_ui(policy: RequestPolicy) -> gr.Blocks:
    """The page over one deployment's request policy: every chat event goes through `policy.run`, as the API's."""
    get_service = policy.get_service
    h = ChatHandlers(policy)
    cmp = CompareHandlers(h)
    with gr.Blocks(title="LLM Playground", fill_width=True, analytics_enabled=False) as demo:
        with gr.Row():
            header = gr.HTML(header_html(None))
            dark = gr.Button("🌓", size="sm", scale=0, min_width=44, elem_id="pg-dark")
        conv = gr.State(Conversation())
        saved_state = gr.BrowserState(None, storage_key="llm-playground-conversation")
        with gr.Row(equal_height=False):
            with gr.Column(scale=3, min_width=360):
                chatbot = gr.Chatbot(label=t("chat"), height="62vh", editable="user", elem_id="pg-chat",
                                     placeholder=SERVICE_HELP, buttons=["copy", "copy_all"],
                                     feedback_options=None)  # fmt: skip
                with gr.Row():
                    box = gr.Textbox(placeholder=t("placeholder"),
                                     show_label=False, scale=6, lines=1, max_lines=8, elem_id="pg-input")  # fmt: skip
                    send = gr.Button(t("send"), variant="primary", scale=1, min_width=70, elem_id="pg-send")
                    stop = gr.Button(t("stop"), variant="stop", scale=1, min_width=70, elem_id="pg-stop")
                pending_view = gr.HTML("", elem_id="pg-attach-list")
                check = gr.Markdown("", elem_id="pg-check")
                with gr.Group(visible=False, elem_id="pg-tool-row") as tool_row:
                    gr.Markdown("🛠 **The model called a tool.** Type (or pick) its result to continue.",
                                padding=True)  # fmt: skip
                    with gr.Row():
                        tool_call = gr.Dropdown(label=t("call"), scale=3, choices=[])
                        saved = gr.Dropdown(list(tools_panel.SAVED_RESULTS), label=t("saved_result"), scale=2)
                    with gr.Row(equal_height=True):
                        tool_text = gr.Textbox(label=t("result"), scale=5, elem_id="pg-tool-result")
                        tool_send = gr.Button(t("send_result"), variant="primary", scale=1, elem_id="pg-tool-send")
                with gr.Row():
                    regen = gr.Button(t("regenerate"), size="sm")
                    clear = gr.Button(t("clear"), size="sm")
                    download = gr.DownloadButton(t("export"), size="sm", elem_id="pg-export")
                    upload = gr.UploadButton(t("import"), size="sm", file_types=[".json"], elem_id="pg-import")
                attach = AttachHandlers(get_service, lambda key: h.selection(key).remote is not None)
                pending, caps_note = attach_panel.build(attach, pending_view)
                system = gr.Textbox(label=t("system"), lines=2, max_lines=8, placeholder="(none)")
            with gr.Column(scale=2, min_width=340), gr.Tabs():
                with gr.Tab(t("tab_stats"), id="stats"):
                    stats = gr.HTML('<div class="pg-empty">No reply yet.</div>', elem_id="pg-stats")
                    plot = gr.HTML("", elem_id="pg-timeline")
                    with gr.Accordion(t("tokens"), open=True):
                        heat = gr.HTML("", elem_id="pg-heat")
                        cands = gr.HTML("", elem_id="pg-cands")
                with gr.Tab(t("tab_sampling"), id="sampling"):
                    knobs, preset, thinking_note = _knob_panel()
                with gr.Tab(t("tab_tools"), id="tools"):
                    tools_note = gr.Markdown("", elem_id="pg-tools-note")
                    example = gr.Dropdown(
                        list(tools_panel.EXAMPLES), label=t("example"), value=None, elem_id="pg-tool-example"
                    )
                    tools_code = gr.Code("", language="json", label=t("tools_json"), lines=12,
                                         elem_id="pg-tools")  # fmt: skip
                    tools_check = gr.Markdown("", elem_id="pg-tools-check")
                    tool_choice = gr.Dropdown(list(tools_panel.FIXED_CHOICES), value="auto",
                                              label="tool_choice", allow_custom_value=False)  # fmt: skip
                with gr.Tab(t("tab_ab"), id="ab"):
                    gr.Markdown("The chat plus the message in the box, under the current settings (A) and a preset "
                                "(B), sent together so the engine batches them. The chat itself is unchanged.")  # fmt: skip
                    with gr.Row():
                        preset_b = gr.Radio(list(controls.PRESETS), value="Creative", label=t("b_uses"), scale=3)
                        ab_go = gr.Button(t("run_ab"), variant="primary", scale=1, size="sm", elem_id="pg-ab-run")
                    ab_check = gr.Markdown("", elem_id="pg-ab-check")
                    with gr.Row():
                        with gr.Column(min_width=200):
                            a_md, a_html = gr.Markdown(elem_id="pg-ab-a"), gr.HTML()
                        with gr.Column(min_width=200):
                            b_md, b_html = gr.Markdown(elem_id="pg-ab-b"), gr.HTML()
                with gr.Tab(t("tab_backend"), id="backend"):
                    backend_panel.build(h, header, header_html)
                with gr.Tab(t("tab_request"), id="request"):
                    req_json = gr.Code("", language="json", label=t("request_body"), lines=10, interactive=True, elem_id="pg-request")  # fmt: skip
                    replay = gr.Button(t("replay"), size="sm", elem_id="pg-replay")
                    replay_out = gr.Markdown("", elem_id="pg-replay-out")
                    curl = gr.Code("", language="shell", label=t("curl"), lines=4)
                    python = gr.Code("", language="python", label=t("python"), lines=8)
                    raw = gr.Code("", language="json", label=t("raw"), lines=8, max_lines=20)

        outs = {"chatbot": chatbot, "conv": conv, "box": box, "check": check, "stats": stats, "timeline": plot,
                "heat": heat, "cands": cands, "req_json": req_json, "curl": curl, "python": python, "raw": raw,
                "tool_row": tool_row, "tool_call": tool_call, "pending": pending, "pending_view": pending_view}  # fmt: skip
        outputs = [outs[name] for name in OUTPUTS]
        common = [conv, system, tools_code, tool_choice]
        run = {"inputs_kwargs": knobs, "outputs": outputs, "concurrency_id": "chat", "concurrency_limit": 16,
               "show_progress": "hidden"}  # fmt: skip

        changes = [
            gr.on([box.submit, send.click], h.send, [box, pending, *common], api_name="chat", **run),
            gr.on([regen.click, chatbot.retry], h.regenerate, common, api_name="regenerate", **run),
            chatbot.edit(h.edit, common, api_name=False, **run),
            tool_send.click(h.tool_result, [tool_text, tool_call, *common], api_name="tool_result", **run),
            chatbot.undo(h.undo, conv, outputs, api_name=False),
            gr.on([clear.click, chatbot.clear], h.clear, None, outputs, api_name="clear"),
        ]
        stop.click(h.stop, None, None, api_name="stop", queue=False)
        ab_go.click(cmp.ab, [box, *common, preset_b], [ab_check, a_md, a_html, b_md, b_html], api_name="ab",
                    **{k: v for k, v in run.items() if k != "outputs"})  # fmt: skip
        replay.click(cmp.replay, [req_json, conv], replay_out, api_name="replay", concurrency_id="chat",
                     show_progress="hidden")  # fmt: skip
        chatbot.select(h.select, conv, outputs, api_name=False)
        dark.click(None, js="() => document.body.classList.toggle('dark')")

        # Every change of the conversation is kept in the browser (survives a reload) and offered as a download.
        knob_names = list(knobs)
        restored = [chatbot, conv, system, tools_code, tool_choice, check, *knobs.values()]
        changes.append(upload.upload(lambda path: _restore(Path(path).read_text(encoding="utf-8"), knob_names),
                                     upload, restored, api_name=False))  # fmt: skip
        for event in changes:
            event.then(_save, common, [saved_state, download], inputs_kwargs=knobs, api_name=False,
                       show_progress="hidden")  # fmt: skip
        demo.load(lambda doc: _restore(doc, knob_names), saved_state, restored, api_name=False)

        watched = [system, tools_code, tool_choice, *knobs.values()]
        gr.on([c.change for c in watched], h.preview, common, check, inputs_kwargs=knobs, api_name=False,
              show_progress="hidden", trigger_mode="always_last")  # fmt: skip
        saved.change(lambda name: tools_panel.SAVED_RESULTS.get(name, gr.skip()), saved, tool_text, api_name=False)
        example.change(lambda name: tools_panel.dumps(tools_panel.EXAMPLES[name]) if name else gr.skip(), example,
                       tools_code, api_name=False)  # fmt: skip
        tools_code.change(_tools_changed, [tools_code, tool_choice], [tools_check, tool_choice], api_name=False)
        preset.change(lambda p: [controls.PRESETS[p][f] for f in controls.PRESET_FIELDS] if p else gr.skip(),
                      preset, [knobs[f] for f in controls.PRESET_FIELDS], api_name=False)  # fmt: skip

        def on_load() -> tuple:
            service = get_service()
            tools_text, thinking_text = model_notes(service)
            cap = service.settings.max_new_tokens if service is not None else gr.skip()
            return header_html(service), tools_text, thinking_text, gr.update(maximum=cap)

        demo.load(on_load, None, [header, tools_note, thinking_note, knobs["max_tokens"]], api_name=False)

        def media_note(request: gr.Request) -> str:  # the header changes with the model and the backend
            return attach_note(get_service(), h.selection(request.session_hash or "").remote is not None)

        header.change(media_note, None, caps_note, api_name=False, show_progress="hidden")
    return demo


def _knob_panel() -> tuple[dict[str, Any], gr.Radio, gr.Markdown]:
    """The Sampling tab: presets, then the request fields grouped by what they do."""
    comps: dict[str, Any] = {}
    note = None
    preset = gr.Radio(
        list(controls.PRESETS),
        label=t("preset"),
        value=None,
        info="Sets the sampling fields below.",
        elem_id="pg-preset",
    )
    for title, group, open_ in (("acc_sampling", controls.SAMPLING, True), ("acc_length", controls.LENGTH, True),
                                ("acc_candidates", controls.CANDIDATES, False), ("acc_format", controls.FORMAT, False),
                                ("acc_thinking", controls.THINKING, False)):  # fmt: skip
        with gr.Accordion(t(title), open=open_):
            if group is controls.THINKING:
                note = gr.Markdown("")
            for row in _rows(group):
                with gr.Row(equal_height=True):
                    for k in row:
                        comps[k.name] = knob_component(k)
    assert note is not None
    return comps, preset, note


EXPORTS = Path(tempfile.gettempdir()) / "llm-playground-exports"
BROWSER_MEDIA_CHARS = 2_000_000  # inline media kept in the browser's storage (localStorage holds ~5 M characters)


def _save(conv: Conversation, system: str, tools_text: str, tool_choice: str | None, request: gr.Request,
          **knobs: Any) -> tuple[dict[str, Any], str]:  # fmt: skip
    snap = export.Snapshot(conv, system or "", tools_text or "", tool_choice or "auto", knobs)
    folder = EXPORTS / (request.session_hash or "anonymous")  # the file keeps every attachment; the browser a budget
    return export.dump(snap, BROWSER_MEDIA_CHARS), export.write(export.dump(snap), folder)


def _restore(doc: Any, knob_names: list[str]) -> list[Any]:
    """A saved or imported conversation back into the page; a broken file is explained, nothing changes."""
    if not doc:
        return [gr.skip()] * (6 + len(knob_names))
    try:
        snap = export.load(doc)
    except ValueError as exc:
        return [gr.skip()] * 5 + [f"⚠️ **Not imported:** {exc}"] + [gr.skip()] * len(knob_names)
    options = tools_panel.choice_options(tools_panel.parse_tools(snap.tools)[0])
    choice = gr.update(choices=options, value=snap.tool_choice if snap.tool_choice in options else "auto")
    knob_values = [snap.settings.get(name, gr.skip()) for name in knob_names]
    return [display(snap.conv)[0], snap.conv, snap.system, snap.tools, choice, "", *knob_values]


def _rows(group: tuple[Knob, ...]) -> list[list[Knob]]:
    """Two controls a row, so the whole panel fits a laptop screen; code boxes alone."""
    rows: list[list[Knob]] = []
    for k in group:
        last = rows[-1] if rows else None
        fits = last is not None and k.kind != "code" and last[0].kind != "code"
        same = fits and (k.kind == "check") == (last[0].kind == "check")
        if last is not None and same and len(last) < 2:
            last.append(k)
        else:
            rows.append([k])
    return rows


def _tools_changed(text: str, current: str | None) -> tuple[str, Any]:
    tools, problem = tools_panel.parse_tools(text)
    options = tools_panel.choice_options(tools)
    value = current if current in options else "auto"
    message = f"⚠️ {problem}" if problem else (f"✓ {len(tools)} tool(s) valid" if tools else "No tools.")
    return message, gr.update(choices=options, value=value)


def mount(app: Any, policy: RequestPolicy, auth: Any = None) -> Any:
    """Serve the page at / on the API's app (one process, one port, one request policy); `auth` as Gradio takes
    it (None = open)."""
    demo = build_ui(policy)
    demo.queue(default_concurrency_limit=16, max_size=64)
    return gr.mount_gradio_app(app, demo, path="/", css=CSS, theme=gr.themes.Soft(), i18n=I18N, auth=auth)
