"""The chat's event handlers: build the request from the controls, check it with the API's own validation, stream
the service's chunks into the conversation (re-rendering about ten times a second), and abort on Stop."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from engine.protocol.errors import ApiError, RequestValidationError
from engine.protocol.request import parse_chat_request
from engine.serving.policy import CallContext, RequestPolicy, client_of
from playground import attachments, controls, heatmap, snippets, stats, timeline
from playground.backend_select import Selection
from playground.conversation import Conversation, Turn, display
from playground.render import throttled
from playground.reply import ReplyView
from playground.tools_panel import choice_value, parse_tools

# Every streaming handler answers these, in this order (gr.skip() leaves one as it is).
OUTPUTS = ("chatbot", "conv", "box", "check", "stats", "timeline", "heat", "cands", "req_json", "curl", "python",
           "raw", "tool_row", "tool_call", "pending", "pending_view")  # fmt: skip
UPDATE_EVERY_S = 0.1
LOADING = "The model is still loading; try again in a moment."
NO_REPLY = '<div class="pg-empty">No reply yet.</div>'


@dataclass
class Run:
    """One session's replies in progress, so Stop (another event) can abort their engine requests."""

    gens: list[Any] = field(default_factory=list)
    stopped: bool = False  # by the user

    def abort(self) -> None:
        for gen in self.gens:
            gen.abort()

    def close(self) -> None:
        """Release every request of the run (the engine slot and the client's admission), finished or not."""
        for gen in self.gens:
            getattr(gen, "close", gen.abort)()

    def stop(self) -> None:
        self.stopped = True
        self.abort()


def frame(**values: Any) -> tuple:
    return tuple(values.get(name, gr.skip()) for name in OUTPUTS)


def panels(turn: Turn | None, base_url: str, *, final: bool = True) -> dict[str, Any]:
    """The side panels for one reply: stats and timeline always, the rest once it is final; none: all empty."""
    if turn is None or turn.reply is None:
        empty = {"heat": heatmap.tokens_html([]), "cands": heatmap.candidates_html(ReplyView()), "req_json": "",
                 "raw": "", "curl": "", "python": ""} if final else {}  # fmt: skip
        return {"stats": NO_REPLY, "timeline": timeline.svg(ReplyView().first), **empty}
    reply = turn.reply
    out: dict[str, Any] = {"stats": stats.table_html(reply.stats()), "timeline": timeline.svg(reply.first)}
    if final:
        body = turn.request if turn is not None and turn.request is not None else {}
        short = attachments.elide(body)  # copy-paste views: media elided to placeholders
        out.update(heat=heatmap.tokens_html(reply.first.logprobs), cands=heatmap.candidates_html(reply),
                   req_json=snippets.as_json(body) if body else "", raw="\n".join(reply.raw),
                   curl=snippets.as_curl(short, base_url) if body else "",
                   python=snippets.as_python(short, base_url) if body else "")  # fmt: skip
    return out


def tool_prompt(conv: Conversation) -> dict[str, Any]:
    pending = conv.pending_calls()
    choices = [(f"{name} · {cid}", cid) for cid, name in pending]
    return {"tool_row": gr.update(visible=bool(pending)),
            "tool_call": gr.update(choices=choices, value=choices[0][1] if choices else None)}  # fmt: skip


def caller(request: gr.Request | None, endpoint: str) -> CallContext:
    """The request context of a page event: who asks (the login, else the address, as the API counts an
    anonymous client) and which Gradio endpoint, for the metrics' route label and the access line."""
    user = getattr(request, "username", None) if request is not None else None
    client = getattr(request, "client", None) if request is not None else None
    return CallContext(client_of(user, getattr(client, "host", None)), f"page:/{endpoint}", "v1", "page")


def base_url_of(request: gr.Request | None) -> str:
    try:
        return str(request.request.base_url) if request is not None and request.request is not None else ""
    except AttributeError:
        return ""


class ChatHandlers:
    def __init__(self, policy: RequestPolicy) -> None:
        self.policy = policy
        self.get_service: Callable[[], Any] = policy.get_service
        self.runs: dict[str, Run] = {}
        self.selections: dict[str, Selection] = {}  # session hash -> its backend; absent = the embedded engine

    def selection(self, key: str) -> Selection:
        return self.selections.get(key) or Selection()

    @contextlib.contextmanager
    def running(self, key: str) -> Iterator[Run]:
        """Register this session's run (by its session hash) for Stop while the block runs."""
        run = self.runs[key] = Run()
        try:
            yield run
        finally:
            if self.runs.get(key) is run:
                del self.runs[key]

    # ---- building and checking the request ----------------------------------------------------------------
    def build(self, messages: list[dict[str, Any]], system: str, tools_text: str, tool_choice: str | None,
              knobs: dict[str, Any], key: str = "") -> tuple[dict[str, Any] | None, str | None]:  # fmt: skip
        """(the exact body, None) or (None, why it would be rejected) — nothing is sent either way."""
        service, chosen = self.get_service(), self.selection(key)
        if service is None and chosen.remote is None:
            return None, LOADING
        tools, problem = parse_tools(tools_text or "")
        if problem:
            return None, problem
        try:
            fields = controls.request_fields(knobs)
        except RequestValidationError as exc:
            return None, exc.message
        head = [{"role": "system", "content": system}] if system and system.strip() else []
        body = controls.build_body(chosen.model(service), head + messages, fields, tools, choice_value(tool_choice))
        problem = controls.check(body)
        if problem is None and tools and body.get("tool_choice") != "none" and chosen.remote is None:
            try:  # the one check that needs the model: does it have a tool-call format at all
                service.tool_parser_for(parse_chat_request(body))
            except RequestValidationError as exc:
                problem = exc.message
        return (None, problem) if problem else (body, None)

    def preview(self, conv: Conversation, system: str, tools_text: str, tool_choice: str | None,
                request: gr.Request, **knobs: Any) -> str:  # fmt: skip
        """The check line under the input, refreshed whenever a control changes."""
        _, problem = self.build(conv.messages() + [{"role": "user", "content": "…"}], system, tools_text,
                                tool_choice, knobs, request.session_hash or "")  # fmt: skip
        return check_text(problem)

    # ---- streaming one reply ------------------------------------------------------------------------------
    async def stream(self, conv: Conversation, body: dict[str, Any], key: str, base_url: str, who: CallContext,
                     restore: tuple[str, list[dict[str, Any]]] | None = None) -> AsyncIterator[tuple]:  # fmt: skip
        """Stream one reply into the conversation, through the request policy as `who`. `restore` (the typed text
        and attachments of a new message): if the API refuses the request before it starts, the message goes
        back to the input, explained."""
        chosen = self.selection(key)
        base_url = chosen.remote.url if chosen.remote is not None else base_url  # curl / Python name the server used
        turn = Turn("assistant", reply=ReplyView(backend=chosen.kind), request=body)
        reply = turn.reply
        assert reply is not None
        conv.turns.append(turn)
        conv.selected = len(conv.turns) - 1
        shown = lambda: display(conv)[0]  # noqa: E731
        yield frame(chatbot=shown(), conv=conv, box="", check="", tool_row=gr.update(visible=False),
                    pending=[], pending_view="", **panels(turn, base_url))  # fmt: skip
        started = False
        with self.running(key) as run:
            try:
                gen = await chosen.start(self.policy, parse_chat_request(body), who)
                started = True
                run.gens.append(gen)
                if run.stopped:
                    gen.abort()
                reported = False
                async for _ in throttled(gen, reply.add, UPDATE_EVERY_S):
                    if not reported and (reply.media or reply.transcription):  # the first chunk: under the turn now
                        reported = self.report_media(conv, body, reply)
                    yield frame(chatbot=shown(), **panels(turn, base_url, final=False))
            except ApiError as exc:
                reply.error = exc.message
            finally:
                run.close()  # leaving early (page closed, event cancelled) frees the engine slot and the admission
        if not started and reply.error and restore is not None:  # refused: nothing was generated, undo the turn
            del conv.turns[-2:]
            conv.selected = None
            text, pending = restore
            yield frame(chatbot=shown(), conv=conv, box=text, check=f"⚠️ **Refused by the API:** {reply.error}",
                        pending=pending, pending_view=attachments.pending_html(pending),
                        **panels(conv.selected_reply(), base_url))  # fmt: skip
            return
        reply.stopped, reply.done = run.stopped, True
        self.report_media(conv, body, reply)
        yield frame(chatbot=shown(), conv=conv, check=f"⚠️ {reply.error}" if reply.error else "", **panels(turn, base_url),
                    **tool_prompt(conv))  # fmt: skip

    @staticmethod
    def report_media(conv: Conversation, body: dict[str, Any], reply: ReplyView) -> bool:
        """What the server made of the user's media (transcripts, the model's media report) under their turns."""
        conv.add_transcripts(body, reply.transcription)
        conv.add_media(body, reply.media)
        return True

    async def send(self, message: str, pending: list[dict[str, Any]], conv: Conversation, system: str,
                   tools_text: str, tool_choice: str | None, request: gr.Request,
                   **knobs: Any) -> AsyncIterator[tuple]:  # fmt: skip
        pending = list(pending or [])
        if not (message or "").strip() and not pending:
            yield frame()
            return
        user = Turn("user", message or "", parts=[a["part"] for a in pending],
                    attachments=[a["summary"] for a in pending])  # fmt: skip
        key = request.session_hash or ""
        body, problem = self.build(conv.messages() + [{"role": "user", "content": user.content_value()}], system,
                                   tools_text, tool_choice, knobs, key)  # fmt: skip
        if body is None:  # explained, and nothing is sent: the message stays in the box
            yield frame(check=check_text(problem))
            return
        conv.turns.append(user)
        async for out in self.stream(conv, body, key, base_url_of(request), caller(request, "chat"),
                                     restore=(message or "", pending)):  # fmt: skip
            yield out

    async def regenerate(self, conv: Conversation, system: str, tools_text: str, tool_choice: str | None,
                         request: gr.Request, **knobs: Any) -> AsyncIterator[tuple]:  # fmt: skip
        conv.truncate_before_last_reply()
        async for out in self._rerun(conv, system, tools_text, tool_choice, request, knobs, "regenerate"):
            yield out

    async def edit(self, conv: Conversation, system: str, tools_text: str, tool_choice: str | None,
                   data: gr.EditData, request: gr.Request, **knobs: Any) -> AsyncIterator[tuple]:  # fmt: skip
        _, owner = display(conv)
        index = data.index if isinstance(data.index, int) else data.index[0]
        turn_at = owner[index] if 0 <= index < len(owner) else -1
        if turn_at < 0 or conv.turns[turn_at].role != "user":
            yield frame(chatbot=display(conv)[0])
            return
        old = conv.turns[turn_at]
        value = str(data.value)
        del conv.turns[turn_at:]
        if value.startswith("📎 "):  # an attachment line was edited: attachments are not text, keep the turn's text
            value = old.content
        conv.turns.append(Turn("user", value, parts=old.parts, attachments=old.attachments))
        async for out in self._rerun(conv, system, tools_text, tool_choice, request, knobs, "edit"):
            yield out

    async def tool_result(self, result: str, call_id: str | None, conv: Conversation, system: str, tools_text: str,
                          tool_choice: str | None, request: gr.Request, **knobs: Any) -> AsyncIterator[tuple]:  # fmt: skip
        pending = dict(conv.pending_calls())
        if call_id not in pending:
            yield frame(check=check_text("There is no tool call waiting for a result."))
            return
        conv.turns.append(Turn("tool", result, tool_call_id=call_id, tool_name=pending[call_id]))
        if len(pending) > 1:  # answer every call of the reply before the model continues
            yield frame(chatbot=display(conv)[0], **tool_prompt(conv))
            return
        async for out in self._rerun(conv, system, tools_text, tool_choice, request, knobs, "tool_result"):
            yield out

    async def _rerun(self, conv: Conversation, system: str, tools_text: str, tool_choice: str | None,
                     request: gr.Request, knobs: dict[str, Any], endpoint: str) -> AsyncIterator[tuple]:  # fmt: skip
        if not conv.turns:
            yield frame(chatbot=[])
            return
        body, problem = self.build(conv.messages(), system, tools_text, tool_choice, knobs, request.session_hash or "")
        if body is None:
            yield frame(chatbot=display(conv)[0], check=check_text(problem))
            return
        async for out in self.stream(conv, body, request.session_hash or "", base_url_of(request),
                                     caller(request, endpoint)):  # fmt: skip
            yield out

    # ---- the quick ones -----------------------------------------------------------------------------------
    def stop(self, request: gr.Request) -> None:
        run = self.runs.get(request.session_hash or "")
        if run is not None:
            run.stop()

    def undo(self, conv: Conversation) -> tuple:
        """Take back the last user message (and its reply) and put its text back in the box."""
        last_user = max((i for i, t in enumerate(conv.turns) if t.role == "user"), default=None)
        if last_user is None:
            return frame()
        text = conv.turns[last_user].content
        del conv.turns[last_user:]
        return frame(chatbot=display(conv)[0], conv=conv, box=text, **tool_prompt(conv))

    def clear(self) -> tuple:
        conv = Conversation()
        return frame(chatbot=[], conv=conv, box="", check="", **panels(None, ""), **tool_prompt(conv))

    def select(self, conv: Conversation, data: gr.SelectData, request: gr.Request) -> tuple:
        """Clicking a message shows its reply's statistics, timeline, tokens and request in the side panel."""
        _, owner = display(conv)
        index = data.index if isinstance(data.index, int) else data.index[0]
        if not 0 <= index < len(owner):
            return frame()
        at = next((i for i in range(owner[index], len(conv.turns)) if conv.turns[i].role == "assistant"), None)
        conv.selected = at
        turn = conv.turns[at] if at is not None else None
        remote = self.selection(request.session_hash or "").remote
        url = remote.url if remote is not None and turn and turn.reply and turn.reply.backend != "embedded" else None
        return frame(conv=conv, **panels(turn, url or base_url_of(request)))


def check_text(problem: str | None) -> str:
    return f"⚠️ **Not sent:** {problem}" if problem else ""
