"""The playground page: chat on the left, statistics / sampling / tools / A/B / backend / request on the right.

It runs on the same request policy as the API, builds the same request the API parses and renders only the chunks
of the session's ChatBackend; it never touches the tokenizer, the template or the model (see playground/page/chat.py).
The panels are built by small builders (playground/page/layout.py, sampling_panel.py, attach_panel.py,
backend_panel.py); this module puts them together and wires the events that cross panels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from engine.serving.policy import RequestPolicy
from playground.client import controls
from playground.client.heatmap import colour_css
from playground.page import examples, layout, persist, textmode
from playground.page.attach_panel import AttachHandlers
from playground.page.capabilities import attach_note, header_html, model_notes
from playground.page.chat import ChatHandlers
from playground.page.chat_outputs import ChatOutputs
from playground.page.context_meter import ContextMeter
from playground.page.conversation import Conversation
from playground.page.header_models import wire_model_picker
from playground.page.i18n import NONE, catalogue, lang_of, say, t
from playground.page.layout import ChatColumn, Header
from playground.page.session import Session
from playground.page.tabs import backend_panel, grid_panel, prompt_view, quality_panel, server_panel, xray
from playground.page.tabs.compare import CompareHandlers, ab_ready, ab_tab
from playground.page.tabs.request import RequestTab, request_tab
from playground.page.tabs.sampling_panel import SamplingTab, sampling_tab
from playground.page.tabs.stats import StatsTab, stats_tab
from playground.page.tabs.tools import ToolsTab, tools_tab

STATIC = Path(__file__).parent / "static"
# The page's style and scripts: style.css first, then each panel's own sheet and script (playground/page/static/),
# then the token heatmap's colour classes (playground/client/heatmap.py: the notebooks' colours too).
CSS = "\n".join(
    [
        *(
            p.read_text(encoding="utf-8")
            for p in sorted(STATIC.glob("*.css"), key=lambda p: (p.name != "style.css", p.name))
        ),
        colour_css(),
    ]
)
HEAD = "".join(f"<script>\n{p.read_text(encoding='utf-8')}\n</script>" for p in sorted(STATIC.glob("*.js")))


def build_ui(policy: RequestPolicy, page: Any = None) -> gr.Blocks:
    """The page over one deployment's request policy: every chat event goes through `policy.run`, as the API's.
    `page`: the page's part of the server's settings (engine/config.py PageSettings: where its Backend tab may
    connect); None: nowhere."""
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
                    stats = stats_tab()
                with gr.Tab(t("tab_xray"), id="xray"):
                    xray_view = xray.build()
                with gr.Tab(t("tab_sampling"), id="sampling"):
                    sampling = sampling_tab()
                with gr.Tab(t("tab_tools"), id="tools"):
                    tools = tools_tab(session, lambda s: h.service(s))
                with gr.Tab(t("tab_ab"), id="ab") as ab_item:
                    ab = ab_tab()
                with gr.Tab(t("tab_grid"), id="grid"):
                    grid_view = grid_panel.grid_tab()
                with gr.Tab(t("tab_backend"), id="backend"):
                    backend = backend_panel.build()
                with gr.Tab(t("tab_server"), id="server"):
                    server = server_panel.build(policy)
                with gr.Tab(t("tab_request"), id="request") as request_item:
                    req = request_tab()
                with gr.Tab(t("tab_prompt"), id="prompt") as prompt_item:
                    prompt = prompt_view.prompt_tab()

        h = ChatHandlers(policy, chat_outputs(chat, conv, stats, req, xray_view), page)
        common = [conv, chat.system, tools.code, tools.choice, session]
        changes = wire_chat(h, chat, common, {**sampling.knobs, "mode": chat.mode})  # /chat's last input: the mode
        cmp = CompareHandlers(h)
        run: dict[str, Any] = {
            "inputs_kwargs": sampling.knobs,
            "concurrency_id": "chat",
            "concurrency_limit": 16,
            "show_progress": "hidden",
        }
        ab.go.click(cmp.ab, [chat.box, *common, ab.preset_b, ab.model_b], ab.outputs(), api_name="ab", **run)
        picked = wire_model_picker(demo, h, header, ab.model_b, session)
        # Run A/B refuses an empty input before anything runs: the tab says so, its button disabled (a tab not
        # shown misses the updates sent while hidden, so also when it is opened), and again after each chat change.
        ready = {
            "fn": ab_ready,
            "inputs": [chat.box, conv, session],
            "outputs": [ab.check, ab.go],
            "api_name": False,
            "queue": False,
            "show_progress": "hidden",
        }
        gr.on([chat.box.change, ab_item.select], trigger_mode="always_last", **ready)
        req.replay.click(
            cmp.replay,
            [req.req_json, conv, session],
            req.replay_out,
            api_name="replay",
            concurrency_id="chat",
            show_progress="hidden",
        )
        backend.wire(h, session, header.html, header_html)
        server.wire(policy, session, h.service)
        grid_view.wire(h, session)
        quality_panel.wire(h, stats, conv, session, header.admin_key)
        prompt.wire(h, chat.box, chat.pending, common, sampling.knobs, prompt_item)
        # How much of the context window the next request takes: as the message is typed, as max_tokens moves, as
        # Chat | Text switches (Text counts the raw prompt it sends), and after each change of the conversation.
        assert chat.mode is not None
        meter = ContextMeter(prompt_view.PromptHandlers(h))
        measure = {
            "fn": meter.measure,
            "inputs": [chat.box, chat.pending, *common],
            "outputs": chat.context,
            "inputs_kwargs": {**sampling.knobs, "mode": chat.mode},
            "api_name": False,
            "show_progress": "hidden",
        }
        gr.on(
            [chat.box.input, sampling.knobs["max_tokens"].change, chat.mode.change],
            trigger_mode="always_last",
            **measure,
        )
        for event in [*changes, picked]:  # a model switch changes the context window too
            event.then(**measure)
        for event in changes:
            event.then(**ready)
        # playground/page/static/layout.js keeps the choice across reloads (pgToggleDark); the fallback only toggles
        header.dark.click(
            None, js="() => window.pgToggleDark ? pgToggleDark() : document.body.classList.toggle('dark')"
        )

        restored = persist.Restored(h.out, chat.system, tools.code, tools.choice, sampling.knobs)
        persist.wire(demo, restored, saved_state, chat.download, chat.upload, changes, common[:4])

        watched = [chat.system, tools.code, tools.choice, *sampling.knobs.values()]
        gr.on(
            [c.change for c in watched],
            h.preview,
            common,
            chat.check,
            inputs_kwargs=sampling.knobs,
            api_name=False,
            show_progress="hidden",
            trigger_mode="always_last",
        )
        # The user's typing only (`input`, not the box being cleared or refilled): the request Send would send.
        # Not on every control's change: a restored conversation sets ~30 controls at once.
        # ... and when the tab is opened after typing (a tab not shown missed the updates sent while it was hidden).
        gr.on(
            [chat.box.input, request_item.select],
            h.preview_request,
            [chat.box, *common],
            [req.req_json, req.curl, req.python],
            inputs_kwargs=sampling.knobs,
            api_name=False,
            show_progress="hidden",
            trigger_mode="always_last",
        )
        wire_load(demo, h, header, chat, tools, sampling, session, saved_state, picked)
    return demo


def chat_outputs(chat: ChatColumn, conv: gr.State, stats: StatsTab, req: RequestTab, xray_view: gr.HTML) -> ChatOutputs:
    return ChatOutputs(
        chatbot=chat.chatbot,
        conv=conv,
        box=chat.box,
        check=chat.check,
        stats=stats.stats,
        timeline=stats.timeline,
        heat=stats.heat,
        cands=stats.cands,
        req_json=req.req_json,
        curl=req.curl,
        python=req.python,
        raw=req.raw,
        tool_row=chat.tools.group,
        tool_call=chat.tools.call,
        pending=chat.pending,
        pending_view=chat.pending_view,
        xray=xray_view,
    )


def wire_chat(h: ChatHandlers, chat: ChatColumn, common: list[Any], knobs: dict[str, Any]) -> list[Any]:
    """The chat's events (the `/chat`, `/regenerate`, `/tool_result`, `/clear` and `/stop` endpoints among them);
    returns those that change the conversation, which the page then saves."""
    outputs = h.out.all()
    run: dict[str, Any] = {
        "inputs_kwargs": knobs,
        "outputs": outputs,
        "concurrency_id": "chat",
        "concurrency_limit": 16,
        "show_progress": "hidden",
    }
    bot, session, tools = chat.chatbot, common[-1], chat.tools
    # Send empties the box in the browser at once (a step with no server round trip) and sends what it held, so
    # text typed right after Send is never erased by the reply; a Send while a reply streams waits for it.
    sent = gr.Textbox(visible="hidden", elem_id="pg-sent")
    sending = gr.on(
        [chat.box.submit, chat.send.click],
        None,
        chat.box,
        [chat.box, sent],
        js="(m) => ['', m]",
        queue=False,
        api_name=False,
        trigger_mode="multiple",
    )
    # The "‹ k/n ›" links of a turn with versions: playground/page/static/chat.js writes "<turn>:prev|next:<nonce>"
    # here; a token's alternative in the heatmap's popover (playground/page/static/tokens.js)
    # "branch:<turn>:<choice>:<pos>:<alt>:<nonce>".
    action = gr.Textbox(visible="hidden", elem_id="pg-action")
    # A branch streams a reply as Send does: in the chat's concurrency group.
    acting: dict[str, Any] = {
        "outputs": outputs,
        "api_name": False,
        "show_progress": "hidden",
        "concurrency_id": "chat",
        "concurrency_limit": 16,
    }
    changes = [
        sending.then(h.send, [sent, chat.pending, *common], api_name="chat", trigger_mode="multiple", **run),
        action.change(h.act, [action, common[0], session], **acting),
        gr.on([chat.regen.click, bot.retry], h.regenerate, common, api_name="regenerate", **run),
        bot.edit(h.edit, common, api_name=False, **run),  # type: ignore[arg-type]
        tools.send.click(h.tool_result, [tools.text, tools.call, *common], api_name="tool_result", **run),
        bot.undo(h.undo, common[0], outputs, api_name=False, show_progress="hidden"),  # type: ignore[arg-type]
        gr.on([chat.clear.click, bot.clear], h.clear, None, outputs, api_name="clear"),
    ]
    # An example prompt in the empty chat is sent as if typed (playground/page/examples.py chooses them per model).
    example = bot.example_select(example_text, None, sent, api_name=False, queue=False)  # type: ignore[arg-type]
    changes.append(example.then(h.send, [sent, chat.pending, *common], api_name=False, **run))
    # Stop shows only while a reply runs: each reply's trigger counts one up in the browser, its end one down
    # (layout.css hides #pg-stop while the body has no `pg-busy`). Browser-only steps: no server round trip.
    streams = [
        chat.box.submit,
        chat.send.click,
        action.change,
        chat.regen.click,
        bot.retry,
        bot.edit,
        tools.send.click,
        bot.example_select,
    ]
    gr.on(streams, None, None, None, js=BUSY_JS, api_name=False, queue=False, trigger_mode="multiple")
    for event in (*changes[:5], changes[-1]):
        event.then(None, None, None, js=IDLE_JS, api_name=False, queue=False)
    chat.stop.click(h.stop, session, None, api_name="stop", queue=False)
    bot.select(h.select, [common[0], session], outputs, api_name=False)  # type: ignore[arg-type]
    return changes


TEMPLATE_SYSTEM = ("(none: the template writes “{prompt}”)", "（无：模板会写入“{prompt}”）")
BUSY_JS = "() => { window.pgBusy = (window.pgBusy || 0) + 1; document.body.classList.add('pg-busy'); }"
IDLE_JS = (
    "() => { window.pgBusy = Math.max(0, (window.pgBusy || 1) - 1);"
    " if (!window.pgBusy) document.body.classList.remove('pg-busy'); }"
)


def example_text(evt: gr.SelectData) -> str:
    """The text of the example prompt clicked in the empty chat."""
    return str((evt.value or {}).get("text", "")) if isinstance(evt.value, dict) else str(evt.value or "")


def wire_load(
    demo: gr.Blocks,
    h: ChatHandlers,
    header: Header,
    chat: ChatColumn,
    tools: ToolsTab,
    sampling: SamplingTab,
    session: gr.State,
    saved_state: gr.BrowserState,
    picked: Any,
) -> None:
    """What the page shows of the model once it is loaded, and what it does with media on the chosen backend. A page
    with no saved conversation starts on the model's own defaults (`controls.model_defaults`), and so does a model
    picked in the header; a saved conversation brings its own settings back (persist.py)."""
    starting = ["max_tokens", *controls.PRESET_FIELDS]
    model_outputs = [chat.chatbot, chat.system, sampling.preset, *(sampling.knobs[k] for k in starting), chat.mode]

    def model_start(session: Session, defaults: bool) -> tuple:
        """The empty chat's examples, the template's system prompt and (`defaults`) the model's starting settings."""
        service = h.service(session)
        if service is None:
            return tuple(gr.skip() for _ in model_outputs)
        lang = session.lang
        empty_chat = gr.update(
            placeholder=examples.placeholder(service, lang), examples=examples.examples(service, lang)
        )
        # The template's own system prompt, where it writes one for a request without (SmolLM2's does): not "(none)".
        own = service.default_system_prompt() if not session.remote else ""
        system = gr.update(placeholder=say(TEMPLATE_SYSTEM, lang, prompt=own) if own else say(NONE, lang))
        cap = service.settings.max_new_tokens
        mode = textmode.default_mode(service) if not session.remote else textmode.CHAT  # a base model: Text
        if not defaults:
            return (
                empty_chat,
                system,
                gr.skip(),
                gr.update(maximum=cap),
                *(gr.skip() for _ in controls.PRESET_FIELDS),
                mode,
            )
        preset, values = controls.model_defaults(service.model.parameters, service.model.generation_config)
        budget = gr.update(maximum=cap, value=min(values["max_tokens"], cap))
        return (empty_chat, system, preset, budget, *(values[k] for k in controls.PRESET_FIELDS), mode)

    def on_load(session: Session, saved: Any, request: gr.Request) -> tuple:
        session.lang = lang_of(request)
        service = h.service(session)
        tools_text, thinking_text = model_notes(service, session.lang)
        shown = (header_html(service, lang=session.lang), tools_text, thinking_text)
        return (*shown, *model_start(session, defaults=not saved))

    demo.load(
        on_load,
        [session, saved_state],
        [header.html, tools.note, sampling.thinking_note, *model_outputs],
        api_name=False,  # type: ignore[arg-type]
    )
    picked.then(
        lambda session: model_start(session, defaults=True),
        session,
        model_outputs,
        api_name=False,
        show_progress="hidden",
    )

    def media_note(session: Session) -> str:  # the header changes with the model and the backend
        return attach_note(h.service(session), session.remote, session.lang)

    header.html.change(media_note, session, chat.caps_note, api_name=False, show_progress="hidden")  # type: ignore[arg-type]
    header.html.change(
        lambda session: model_notes(h.service(session), session.lang),
        session,
        [tools.note, sampling.thinking_note],
        api_name=False,  # type: ignore[arg-type]
        show_progress="hidden",
    )


def mount(app: Any, policy: RequestPolicy, page: Any, auth: Any = None) -> Any:
    """Serve the page at / on the API's app (one process, one port, one request policy); `auth` as Gradio takes
    it (None = open). An `auth` with a `tokens` table (engine/http/auth.py `PageLogins`) becomes Gradio's table
    of logins, so each session is known by the credential it proved rather than by the name it typed."""
    demo = build_ui(policy, page)
    demo.queue(default_concurrency_limit=16, max_size=64)
    app = gr.mount_gradio_app(
        app, demo, path="/", css=CSS, head=HEAD, theme=gr.themes.Soft(), i18n=catalogue(), auth=auth
    )
    # Gradio checks that an event's file inputs are its own uploads (and its outputs in allowed places) only for a
    # Blocks it believes launched; mounted, it would copy any path a client names into its cache and serve it
    # (issue 31 item 10). This page is launched, by this server.
    demo.has_launched = True
    tokens = getattr(auth, "tokens", None)
    if tokens is not None:
        page_app(app).tokens = tokens
    return app


def page_app(app: Any) -> Any:
    """The Gradio app mounted at / on `app` (the last mount: the MCP tool's comes first)."""
    from gradio.routes import App

    mounted = [r.app for r in app.routes if isinstance(getattr(r, "app", None), App)]
    if not mounted:
        raise RuntimeError("the page's Gradio app is not mounted")
    return mounted[-1]
