"""The chat's event handlers: build the request from the controls, check it with the API's own validation, stream
the session's backend's chunks into the conversation (re-rendering about ten times a second), and abort on Stop.

Every request goes through a ChatBackend (playground/backend.py): the embedded one runs it through the deployment's
RequestPolicy, as the API's requests are, never the service directly. Each handler returns (or yields) a dict of
only the components it changes (ChatOutputs).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import gradio as gr

from engine.protocol.errors import ApiError, RequestValidationError
from engine.protocol.request import parse_chat_request
from engine.serving.policy import CallContext, RequestPolicy
from playground import attachments, controls
from playground.backend import ChatBackend, LocalBackend
from playground.chat_outputs import ChatOutputs, Update
from playground.conversation import Conversation, Turn, display
from playground.render import throttled
from playground.reply import ReplyView
from playground.session import Session, base_url_of, caller
from playground.tools_panel import choice_value, parse_tools

UPDATE_EVERY_S = 0.1
LOADING = "The model is still loading; try again in a moment."


class ChatHandlers:
    def __init__(self, policy: RequestPolicy, out: ChatOutputs) -> None:
        self.policy = policy
        self.out = out
        self.get_service: Callable[[], Any] = policy.get_service
        self.embedded = LocalBackend(policy=policy)  # a session's backend until its Backend tab picks another

    def backend(self, session: Session | None) -> ChatBackend:
        return session.backend if session is not None and session.backend is not None else self.embedded

    # ---- building and checking the request ----------------------------------------------------------------
    def build(self, messages: list[dict[str, Any]], system: str, tools_text: str, tool_choice: str | None,
              knobs: dict[str, Any], session: Session | None = None) -> tuple[dict[str, Any] | None, str | None]:  # fmt: skip
        """(the exact body, None) or (None, why it would be rejected) — nothing is sent either way."""
        service, chosen = self.get_service(), self.backend(session)
        if service is None and chosen.kind == "embedded":
            return None, LOADING
        tools, problem = parse_tools(tools_text or "")
        if problem:
            return None, problem
        try:
            fields = controls.request_fields(knobs)
        except RequestValidationError as exc:
            return None, exc.message
        head = [{"role": "system", "content": system}] if system and system.strip() else []
        body = controls.build_body(chosen.model, head + messages, fields, tools, choice_value(tool_choice))
        problem = controls.check(body)
        if problem is None and tools and body.get("tool_choice") != "none" and chosen.kind == "embedded":
            try:  # the one check that needs the model: does it have a tool-call format at all
                service.tool_parser_for(parse_chat_request(body))
            except RequestValidationError as exc:
                problem = exc.message
        return (None, problem) if problem else (body, None)

    def preview(self, conv: Conversation, system: str, tools_text: str, tool_choice: str | None, session: Session,
                **knobs: Any) -> str:  # fmt: skip
        """The check line under the input, refreshed whenever a control changes."""
        _, problem = self.build(conv.messages() + [{"role": "user", "content": "…"}], system, tools_text,
                                tool_choice, knobs, session)  # fmt: skip
        return check_text(problem)

    def preview_request(self, message: str, conv: Conversation, system: str, tools_text: str, tool_choice: str | None,
                        session: Session, request: gr.Request, **knobs: Any) -> Update:  # fmt: skip
        """While a message is typed, the Request tab shows the exact request Send would send (JSON, curl,
        Python) with the controls as they are, refreshed at each keystroke; nothing is sent. An empty input leaves the tab as it
        is (the selected reply's request)."""
        unchanged = {c: gr.skip() for c in (self.out.req_json, self.out.curl, self.out.python)}
        if not (message or "").strip():
            return unchanged
        body, _ = self.build(conv.messages() + [{"role": "user", "content": message}], system, tools_text,
                             tool_choice, knobs, session)  # fmt: skip
        if body is None:  # the check line says why
            return unchanged
        return self.out.request_views(body, self.backend(session).url or base_url_of(request))

    # ---- streaming one reply ------------------------------------------------------------------------------
    async def stream(self, conv: Conversation, body: dict[str, Any], session: Session, base_url: str,
                     who: CallContext, restore: tuple[str, list[dict[str, Any]]] | None = None) -> AsyncIterator[Update]:  # fmt: skip
        """Stream one reply into the conversation, through the session's backend as `who`. `restore` (the typed
        text and attachments of a new message): if the API refuses the request before it starts, the message
        goes back to the input, explained."""
        o, chosen = self.out, self.backend(session)
        base_url = chosen.url or base_url  # curl / Python name the server used
        turn = Turn("assistant", reply=ReplyView(backend=chosen.kind), request=body)
        reply = turn.reply
        assert reply is not None
        conv.turns.append(turn)
        conv.selected = len(conv.turns) - 1
        shown = lambda: display(conv)[0]  # noqa: E731
        yield {o.chatbot: shown(), o.conv: conv, o.box: "", o.check: "", o.tool_row: gr.update(visible=False),
               o.pending: [], o.pending_view: "", **o.panels(turn, base_url)}  # fmt: skip
        started = False
        with session.running() as run:
            try:
                gen = await chosen.start(parse_chat_request(body), who)
                started = True
                run.gens.append(gen)
                if run.stopped:
                    gen.abort()
                reported = False
                async for _ in throttled(gen, reply.add, UPDATE_EVERY_S):
                    if not reported and (reply.media or reply.transcription):  # the first chunk: under the turn now
                        reported = self.report_media(conv, body, reply)
                    yield {o.chatbot: shown(), **o.panels(turn, base_url, final=False)}
            except ApiError as exc:
                reply.error = exc.message
            finally:
                run.close()  # leaving early (page closed, event cancelled) frees the engine slot and the admission
        if not started and reply.error and restore is not None:  # refused: nothing was generated, undo the turn
            del conv.turns[-2:]
            conv.selected = None
            text, pending = restore
            yield {o.chatbot: shown(), o.conv: conv, o.box: text, o.check: f"⚠️ **Refused by the API:** {reply.error}",
                   o.pending: pending, o.pending_view: attachments.pending_html(pending),
                   **o.panels(conv.selected_reply(), base_url)}  # fmt: skip
            return
        reply.stopped, reply.done = run.stopped, True
        self.report_media(conv, body, reply)
        yield {o.chatbot: shown(), o.conv: conv, o.check: f"⚠️ {reply.error}" if reply.error else "",
               **o.panels(turn, base_url), **o.tool_prompt(conv)}  # fmt: skip

    @staticmethod
    def report_media(conv: Conversation, body: dict[str, Any], reply: ReplyView) -> bool:
        """What the server made of the user's media (transcripts, the model's media report) under their turns."""
        conv.add_transcripts(body, reply.transcription)
        conv.add_media(body, reply.media)
        return True

    async def send(self, message: str, pending: list[dict[str, Any]], conv: Conversation, system: str,
                   tools_text: str, tool_choice: str | None, session: Session, request: gr.Request,
                   **knobs: Any) -> AsyncIterator[Any]:  # fmt: skip
        pending = list(pending or [])
        if not (message or "").strip() and not pending:
            yield gr.skip()
            return
        user = Turn("user", message or "", parts=[a["part"] for a in pending],
                    attachments=[a["summary"] for a in pending])  # fmt: skip
        body, problem = self.build(conv.messages() + [{"role": "user", "content": user.content_value()}], system,
                                   tools_text, tool_choice, knobs, session)  # fmt: skip
        if body is None:  # explained, and nothing is sent: the message stays in the box
            yield {self.out.check: check_text(problem)}
            return
        conv.turns.append(user)
        async for out in self.stream(conv, body, session, base_url_of(request), caller(request, "chat"),
                                     restore=(message or "", pending)):  # fmt: skip
            yield out

    async def regenerate(self, conv: Conversation, system: str, tools_text: str, tool_choice: str | None,
                         session: Session, request: gr.Request, **knobs: Any) -> AsyncIterator[Update]:  # fmt: skip
        conv.truncate_before_last_reply()
        async for out in self._rerun(conv, system, tools_text, tool_choice, session, request, knobs, "regenerate"):
            yield out

    async def edit(self, conv: Conversation, system: str, tools_text: str, tool_choice: str | None,
                   session: Session, data: gr.EditData, request: gr.Request, **knobs: Any) -> AsyncIterator[Update]:  # fmt: skip
        _, owner = display(conv)
        index = data.index if isinstance(data.index, int) else data.index[0]
        turn_at = owner[index] if 0 <= index < len(owner) else -1
        if turn_at < 0 or conv.turns[turn_at].role != "user":
            yield {self.out.chatbot: display(conv)[0]}
            return
        old = conv.turns[turn_at]
        value = str(data.value)
        del conv.turns[turn_at:]
        if value.startswith("📎 "):  # an attachment line was edited: attachments are not text, keep the turn's text
            value = old.content
        conv.turns.append(Turn("user", value, parts=old.parts, attachments=old.attachments))
        async for out in self._rerun(conv, system, tools_text, tool_choice, session, request, knobs, "edit"):
            yield out

    async def tool_result(self, result: str, call_id: str | None, conv: Conversation, system: str, tools_text: str,
                          tool_choice: str | None, session: Session, request: gr.Request,
                          **knobs: Any) -> AsyncIterator[Update]:  # fmt: skip
        pending = dict(conv.pending_calls())
        if call_id not in pending:
            yield {self.out.check: check_text("There is no tool call waiting for a result.")}
            return
        conv.turns.append(Turn("tool", result, tool_call_id=call_id, tool_name=pending[call_id]))
        if len(pending) > 1:  # answer every call of the reply before the model continues
            yield {self.out.chatbot: display(conv)[0], **self.out.tool_prompt(conv)}
            return
        async for out in self._rerun(conv, system, tools_text, tool_choice, session, request, knobs, "tool_result"):
            yield out

    async def _rerun(self, conv: Conversation, system: str, tools_text: str, tool_choice: str | None,
                     session: Session, request: gr.Request, knobs: dict[str, Any],
                     endpoint: str) -> AsyncIterator[Update]:  # fmt: skip
        if not conv.turns:
            yield {self.out.chatbot: []}
            return
        body, problem = self.build(conv.messages(), system, tools_text, tool_choice, knobs, session)
        if body is None:
            yield {self.out.chatbot: display(conv)[0], self.out.check: check_text(problem)}
            return
        async for out in self.stream(conv, body, session, base_url_of(request), caller(request, endpoint)):
            yield out

    # ---- the quick ones -----------------------------------------------------------------------------------
    @staticmethod
    def stop(session: Session) -> None:
        session.stop()

    def undo(self, conv: Conversation) -> Any:
        """Take back the last user message (and its reply) and put its text back in the box."""
        last_user = max((i for i, t in enumerate(conv.turns) if t.role == "user"), default=None)
        if last_user is None:
            return gr.skip()
        text = conv.turns[last_user].content
        del conv.turns[last_user:]
        return {self.out.chatbot: display(conv)[0], self.out.conv: conv, self.out.box: text,
                **self.out.tool_prompt(conv)}  # fmt: skip

    def clear(self) -> Update:
        conv, o = Conversation(), self.out
        return {o.chatbot: [], o.conv: conv, o.box: "", o.check: "", **o.panels(None, ""), **o.tool_prompt(conv)}

    def select(self, conv: Conversation, session: Session, data: gr.SelectData, request: gr.Request) -> Any:
        """Clicking a message shows its reply's statistics, timeline, tokens and request in the side panel."""
        _, owner = display(conv)
        index = data.index if isinstance(data.index, int) else data.index[0]
        if not 0 <= index < len(owner):
            return gr.skip()
        at = next((i for i in range(owner[index], len(conv.turns)) if conv.turns[i].role == "assistant"), None)
        conv.selected = at
        turn = conv.turns[at] if at is not None else None
        remote = self.backend(session).url
        url = remote if remote and turn and turn.reply and turn.reply.backend != "embedded" else None
        return {self.out.conv: conv, **self.out.panels(turn, url or base_url_of(request))}


def check_text(problem: str | None) -> str:
    return f"⚠️ **Not sent:** {problem}" if problem else ""
