"""The playground page: chat on the left, statistics / sampling / tools / A/B / backend / request on the right.

It runs on the same request policy as the API, builds the same request the API parses and renders only the chunks
of the session's ChatBackend; it never touches the tokenizer, the template or the model (see playground/chat.py).
The panels are built by small builders (playground/layout.py, sampling_panel.py, attach_panel.py,
backend_panel.py); this module puts them together and wires the events that cross panels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from engine.serving.policy import RequestPolicy
from playground import backend_panel, grid_panel, layout, persist, prompt_view, server_panel, xray
from playground.attach_panel import AttachHandlers
from playground.capabilities import attach_note, header_html, model_notes
from playground.chat import ChatHandlers
from playground.chat_outputs import ChatOutputs
from playground.compare import CompareHandlers
from playground.context_meter import ContextMeter
from playground.conversation import Conversation
from playground.header_models import wire_model_picker
from playground.i18n import I18N, lang_of, t
from playground.layout import ChatColumn, Header, RequestTab, StatsTab, ToolsTab
from playground.sampling_panel import SamplingTab, sampling_tab
from playground.session import Session

HERE = Path(__file__).parent
# The page's style and scripts: style.css first, then each panel's own sheet and script (playground/*.css, *.js).
CSS = "\n".join(
    p.read_text(encoding="utf-8") for p in sorted(HERE.glob("*.css"), key=lambda p: (p.name != "style.css", p.name))
)
HEAD = "".join(f"<script>\n{p.read_text(encoding='utf-8')}\n</script>" for p in sorted(HERE.glob("*.js")))


def build_ui(policy: RequestPolicy) -> gr.Blocks:
    """The page over one deployment's request policy: every chat event goes through `policy.run`, as the API's."""
    with gr.Blocks(title="LLM Playground", fill_width=True, analytics_enabled=False) as demo:
        header = layout.header_row()
        conv = gr.State(Conversation())
        session = gr.State(Session())  # the Backend tab's choice and the replies in progress, per browser session
        saved_state = gr.BrowserState(None, storage_key="llm-playground-conversation")
        with gr.Row(equal_height=False):
            with gr.Column(scale=3, min_width=360, elem_id="pg-main"):
                # Each session's panels describe the model it talks to (its pick in the header): `h.service`.
                chat = layout.chat_column(AttachHandlers(policy.get_service, lambda s: h.service(s)), session)
            with gr.Column(scale=2, min_width=340, elem_id="pg-side"), gr.Tabs():
                with gr.Tab(t("tab_stats"), id="stats"):
                    stats = layout.stats_tab()
                with gr.Tab(t("tab_xray"), id="xray"):
                    xray_view = xray.build()
                with gr.Tab(t("tab_sampling"), id="sampling"):
                    sampling = sampling_tab()
                with gr.Tab(t("tab_tools"), id="tools"):
                    tools = layout.tools_tab(session, lambda s: h.service(s))
                with gr.Tab(t("tab_ab"), id="ab"):
                    ab = layout.ab_tab()
                with gr.Tab(t("tab_grid"), id="grid"):
                    grid_view = grid_panel.grid_tab()
                with gr.Tab(t("tab_backend"), id="backend"):
                    backend = backend_panel.build()
                with gr.Tab(t("tab_server"), id="server"):
                    server = server_panel.build(policy)
                with gr.Tab(t("tab_request"), id="request"):
                    req = layout.request_tab()
                with gr.Tab(t("tab_prompt"), id="prompt") as prompt_item:
                    prompt = prompt_view.prompt_tab()

        h = ChatHandlers(policy, chat_outputs(chat, conv, stats, req, xray_view))
        common = [conv, chat.system, tools.code, tools.choice, session]
        changes = wire_chat(h, chat, common, sampling.knobs)
        cmp = CompareHandlers(h)
        run = {"inputs_kwargs": sampling.knobs, "concurrency_id": "chat", "concurrency_limit": 16,
               "show_progress": "hidden"}  # fmt: skip
        ab.go.click(cmp.ab, [chat.box, *common, ab.preset_b, ab.model_b], ab.outputs(), api_name="ab", **run)
        picked = wire_model_picker(demo, h, header, ab.model_b, session)
        req.replay.click(cmp.replay, [req.req_json, conv, session], req.replay_out, api_name="replay",
                         concurrency_id="chat", show_progress="hidden")  # fmt: skip
        backend.wire(h, session, header.html, header_html)
        server.wire(policy, session, h.service)
        grid_view.wire(h, session)
        prompt.wire(h, chat.box, chat.pending, common, sampling.knobs, prompt_item)
        # How much of the context window the next request takes: as the message is typed, as max_tokens moves,
        # and after each change of the conversation.
        meter = ContextMeter(prompt_view.PromptHandlers(h))
        measure = {"fn": meter.measure, "inputs": [chat.box, chat.pending, *common], "outputs": chat.context,
                   "inputs_kwargs": sampling.knobs, "api_name": False, "show_progress": "hidden"}  # fmt: skip
        gr.on([chat.box.input, sampling.knobs["max_tokens"].change], trigger_mode="always_last", **measure)
        for event in [*changes, picked]:  # a model switch changes the context window too
            event.then(**measure)
        # playground/layout.js keeps the choice across reloads (pgToggleDark); the fallback only toggles
        header.dark.click(
            None, js="() => window.pgToggleDark ? pgToggleDark() : document.body.classList.toggle('dark')"
        )

        restored = persist.Restored(h.out, chat.system, tools.code, tools.choice, sampling.knobs)
        persist.wire(demo, restored, saved_state, chat.download, chat.upload, changes, common[:4])

        watched = [chat.system, tools.code, tools.choice, *sampling.knobs.values()]
        gr.on([c.change for c in watched], h.preview, common, chat.check, inputs_kwargs=sampling.knobs,
              api_name=False, show_progress="hidden", trigger_mode="always_last")  # fmt: skip
        # The user's typing only (`input`, not the box being cleared or refilled): the request Send would send.
        # Not on every control's change: a restored conversation sets ~30 controls at once.
        gr.on([chat.box.input], h.preview_request, [chat.box, *common],
              [req.req_json, req.curl, req.python], inputs_kwargs=sampling.knobs, api_name=False,
              show_progress="hidden", trigger_mode="always_last")  # fmt: skip
        wire_load(demo, h, header, chat, tools, sampling, session)
    return demo


def chat_outputs(chat: ChatColumn, conv: gr.State, stats: StatsTab, req: RequestTab,
                 xray_view: gr.HTML) -> ChatOutputs:  # fmt: skip
    return ChatOutputs(chatbot=chat.chatbot, conv=conv, box=chat.box, check=chat.check, stats=stats.stats,
                       timeline=stats.timeline, heat=stats.heat, cands=stats.cands, req_json=req.req_json,
                       curl=req.curl, python=req.python, raw=req.raw, tool_row=chat.tools.group,
                       tool_call=chat.tools.call, pending=chat.pending, pending_view=chat.pending_view,
                       xray=xray_view)  # fmt: skip


def wire_chat(h: ChatHandlers, chat: ChatColumn, common: list[Any], knobs: dict[str, Any]) -> list[Any]:
    """The chat's events (the `/chat`, `/regenerate`, `/tool_result`, `/clear` and `/stop` endpoints among them);
    returns those that change the conversation, which the page then saves."""
    outputs = h.out.all()
    run = {"inputs_kwargs": knobs, "outputs": outputs, "concurrency_id": "chat", "concurrency_limit": 16,
           "show_progress": "hidden"}  # fmt: skip
    bot, session, tools = chat.chatbot, common[-1], chat.tools
    # Send empties the box in the browser at once (a step with no server round trip) and sends what it held, so
    # text typed right after Send is never erased by the reply; a Send while a reply streams waits for it.
    sent = gr.Textbox(visible="hidden", elem_id="pg-sent")
    sending = gr.on([chat.box.submit, chat.send.click], None, chat.box, [chat.box, sent], js="(m) => ['', m]",
                    queue=False, api_name=False, trigger_mode="multiple")  # fmt: skip
    # The "‹ k/n ›" links of a turn with versions: playground/chat.js writes "<turn>:prev|next:<nonce>" here; a
    # token's alternative in the heatmap's popover (playground/tokens.js) "branch:<turn>:<choice>:<pos>:<alt>:<nonce>".
    action = gr.Textbox(visible="hidden", elem_id="pg-action")
    # A branch streams a reply as Send does: in the chat's concurrency group.
    acting = {"outputs": outputs, "api_name": False, "show_progress": "hidden", "concurrency_id": "chat",
              "concurrency_limit": 16}  # fmt: skip
    changes = [
        sending.then(h.send, [sent, chat.pending, *common], api_name="chat", trigger_mode="multiple", **run),
        action.change(h.act, [action, common[0], session], **acting),
        gr.on([chat.regen.click, bot.retry], h.regenerate, common, api_name="regenerate", **run),
        bot.edit(h.edit, common, api_name=False, **run),
        tools.send.click(h.tool_result, [tools.text, tools.call, *common], api_name="tool_result", **run),
        bot.undo(h.undo, common[0], outputs, api_name=False, show_progress="hidden"),
        gr.on([chat.clear.click, bot.clear], h.clear, None, outputs, api_name="clear"),
    ]
    chat.stop.click(h.stop, session, None, api_name="stop", queue=False)
    bot.select(h.select, [common[0], session], outputs, api_name=False)
    return changes


def wire_load(demo: gr.Blocks, h: ChatHandlers, header: Header, chat: ChatColumn, tools: ToolsTab,
              sampling: SamplingTab, session: gr.State) -> None:  # fmt: skip
    """What the page shows of the model once it is loaded, and what it does with media on the chosen backend."""

    def on_load(session: Session, request: gr.Request) -> tuple:
        session.lang = lang_of(request)
        service = h.service(session)
        tools_text, thinking_text = model_notes(service, session.lang)
        cap = service.settings.max_new_tokens if service is not None else gr.skip()
        return header_html(service, lang=session.lang), tools_text, thinking_text, gr.update(maximum=cap)

    demo.load(on_load, session, [header.html, tools.note, sampling.thinking_note, sampling.knobs["max_tokens"]],
              api_name=False)  # fmt: skip

    def media_note(session: Session) -> str:  # the header changes with the model and the backend
        return attach_note(h.service(session), session.remote, session.lang)

    header.html.change(media_note, session, chat.caps_note, api_name=False, show_progress="hidden")
    header.html.change(lambda session: model_notes(h.service(session), session.lang), session,
                       [tools.note, sampling.thinking_note], api_name=False, show_progress="hidden")  # fmt: skip


def mount(app: Any, policy: RequestPolicy, auth: Any = None) -> Any:
    """Serve the page at / on the API's app (one process, one port, one request policy); `auth` as Gradio takes
    it (None = open)."""
    demo = build_ui(policy)
    demo.queue(default_concurrency_limit=16, max_size=64)
    return gr.mount_gradio_app(app, demo, path="/", css=CSS, head=HEAD, theme=gr.themes.Soft(), i18n=I18N, auth=auth)
