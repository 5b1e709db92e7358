"""The chat's event handlers: build the request from the controls, check it with the API's own validation, stream
the session's backend's chunks into the conversation (re-rendering about ten times a second), and abort on Stop.

Every request goes through a ChatBackend (playground/client/backend.py): the embedded one runs it through the
deployment's RequestPolicy, as the API's requests are, never the service directly. Each handler returns (or yields) a
dict of only the components it changes (ChatOutputs).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import gradio as gr

from engine.protocol.errors import ApiError, RequestValidationError
from engine.protocol.request import parse_chat_request
from engine.serving.policy import CallContext, RequestPolicy
from playground.client import branch as branches
from playground.client import controls
from playground.client.backend import ChatBackend, LocalBackend, ModelBackend
from playground.client.controls import BY_NAME
from playground.client.render import throttled
from playground.client.reply import ReplyView
from playground.client.tools_panel import choice_value, parse_tools
from playground.page import attachments, textmode
from playground.page.chat_outputs import ChatOutputs, Update
from playground.page.conversation import Conversation, Turn, display, strip_marks
from playground.page.i18n import lang_of, say
from playground.page.session import Session, base_url_of, caller

UPDATE_EVERY_S = 0.1
LOADING = ("The model is still loading; try again in a moment.", "模型仍在加载，请稍后再试。")
LOADING_WHISPER = (
    "Loading Whisper to transcribe the audio: the first audio message takes a few seconds more, once.",
    "正在加载 Whisper 以转写音频：第一条音频消息会多等几秒，仅此一次。",
)
UNLOADED = (
    "{name} is no longer loaded (the server made room for another model): pick it again in the model list.",
    "{name} 已不在内存中（服务器为其他模型腾出了空间）：请在模型列表中重新选择它。",
)
NO_CALL_WAITING = ("There is no tool call waiting for a result.", "没有等待结果的工具调用。")
REFUSED = ("⚠️ **Refused by the API:** {error}", "⚠️ **被 API 拒绝：** {error}")


class ChatHandlers:
    def __init__(self, policy: RequestPolicy, out: ChatOutputs, page: Any = None) -> None:
        self.policy = policy
        self.page = page  # the page's part of the server's settings (engine/config.py PageSettings); None: none
        self.out = out
        self.get_service: Callable[[], Any] = policy.get_service
        self.embedded = LocalBackend(policy=policy)  # a session's backend until its Backend tab picks another

    def backend(self, session: Session | None) -> ChatBackend:
        return session.backend if session is not None and session.backend is not None else self.local(session)

    def local(self, session: Session | None) -> LocalBackend:
        """The embedded engine as this session uses it: for the model it picked, else the server's current one."""
        if session is not None and session.model:
            return ModelBackend(self.policy, session.model)
        return self.embedded

    def service(self, session: Session | None) -> Any:
        """The ChatService this session's embedded requests reach (None while it is not loaded); on a remote
        backend, the server's current one (what the header describes beside the remote's name)."""
        chosen = self.backend(session)
        return chosen.service if isinstance(chosen, LocalBackend) else self.get_service()

    # ---- building and checking the request ----------------------------------------------------------------
    def build(
        self,
        messages: list[dict[str, Any]],
        system: str,
        tools_text: str,
        tool_choice: str | None,
        knobs: dict[str, Any],
        session: Session | None = None,
    ) -> tuple[dict[str, Any] | None, str | None]:
        """(the exact body, None) or (None, why it would be rejected) — nothing is sent either way."""
        service, chosen = self.service(session), self.backend(session)
        lang = session.lang if session is not None else "en"
        if service is None and chosen.kind == "embedded":
            return None, say(LOADING, lang) if not isinstance(chosen, ModelBackend) else self.not_loaded(chosen, lang)
        tools, problem = parse_tools(tools_text or "", lang)
        if problem:
            return None, problem
        try:
            fields = controls.request_fields(knobs, lang)
        except RequestValidationError as exc:
            return None, exc.message
        head = [{"role": "system", "content": system}] if system and system.strip() else []
        body = controls.build_body(chosen.model, head + messages, fields, tools, choice_value(tool_choice))
        if chosen.kind == "embedded":  # the prompt's progress while it is read (remote servers may refuse the field)
            body["return_progress"] = True
        problem = controls.check(body)
        if problem is None and tools and body.get("tool_choice") != "none" and chosen.kind == "embedded":
            try:  # the one check that needs the model: does it have a tool-call format at all
                service.tool_parser_for(parse_chat_request(body))
            except RequestValidationError as exc:
                problem = exc.message
        return (None, problem) if problem else (body, None)

    def not_loaded(self, chosen: ModelBackend, lang: str) -> str:
        """Why a session's picked model cannot answer now: it loads, or the server unloaded it for another."""
        pool = self.policy.models
        if pool is not None and pool.status(chosen.name) == "loadable":
            return say(UNLOADED, lang, name=chosen.name)
        return say(LOADING, lang)

    def preview(
        self, conv: Conversation, system: str, tools_text: str, tool_choice: str | None, session: Session, **knobs: Any
    ) -> str:
        """The check line under the input, refreshed whenever a control changes."""
        _, problem = self.build(
            conv.messages() + [{"role": "user", "content": "…"}], system, tools_text, tool_choice, knobs, session
        )
        return check_text(problem, sent=False, lang=session.lang)

    def preview_request(
        self,
        message: str,
        conv: Conversation,
        system: str,
        tools_text: str,
        tool_choice: str | None,
        session: Session,
        request: gr.Request,
        **knobs: Any,
    ) -> Update:
        """While a message is typed, the Request tab shows the exact request Send would send (JSON, curl,
        Python) with the controls as they are, refreshed at each keystroke; nothing is sent. An empty input leaves the tab as it
        is (the selected reply's request)."""
        unchanged = {c: gr.skip() for c in (self.out.req_json, self.out.curl, self.out.python)}
        if not (message or "").strip():
            return unchanged
        body, _ = self.build(
            conv.messages() + [{"role": "user", "content": message}], system, tools_text, tool_choice, knobs, session
        )
        if body is None:  # the check line says why
            return unchanged
        return self.out.request_views(body, self.backend(session).url or base_url_of(request))

    def loads_whisper(self, body: dict[str, Any], session: Session) -> bool:
        """Whether this request's audio makes the embedded server load Whisper first (its first audio message)."""
        service = self.service(session)
        if session.remote or service is None or not getattr(service.settings, "audio_transcription", False):
            return False
        if "audio" in service.model.modalities or service.media.transcriber_loaded:
            return False
        parts = [p for m in body.get("messages", []) if isinstance(m.get("content"), list) for p in m["content"]]
        return any(isinstance(p, dict) and attachments.kind_of_part(p) == "audio" for p in parts)

    # ---- streaming one reply ------------------------------------------------------------------------------
    async def stream(
        self,
        conv: Conversation,
        body: dict[str, Any],
        session: Session,
        base_url: str,
        who: CallContext,
        restore: tuple[str, list[dict[str, Any]]] | None = None,
        seed: ReplyView | None = None,
    ) -> AsyncIterator[Update]:
        """Stream one reply into the conversation, through the session's backend as `who`. `restore` (the typed
        text and attachments of a new message): if the API refuses the request before it starts, the message
        goes back to the input, explained. `seed`: the reply so far (a branch's kept text), which the stream
        continues."""
        session.streams += 1  # until this generator has yielded its last update (a queued Send waits for it)
        try:
            async for out in self._stream(conv, body, session, base_url, who, restore, seed):
                yield out
        finally:
            session.streams -= 1

    async def _stream(
        self,
        conv: Conversation,
        body: dict[str, Any],
        session: Session,
        base_url: str,
        who: CallContext,
        restore: tuple[str, list[dict[str, Any]]] | None,
        seed: ReplyView | None = None,
    ) -> AsyncIterator[Update]:
        o, chosen, lang = self.out, self.backend(session), session.lang
        base_url = chosen.url or base_url  # curl / Python name the server used
        conv.lang = lang
        turn = Turn("assistant", reply=seed or ReplyView(backend=chosen.kind), request=body)
        reply = turn.reply
        assert reply is not None
        conv.adopt(turn)
        conv.selected = len(conv.turns) - 1
        shown = lambda: display(conv)[0]  # noqa: E731
        notice = say(LOADING_WHISPER, lang) if self.loads_whisper(body, session) else ""
        yield {
            o.chatbot: shown(),
            o.conv: conv,
            o.check: notice,
            o.tool_row: gr.update(visible=False),
            o.pending: [],
            o.pending_view: "",
            **o.panels(turn, base_url, lang=lang),
        }
        started = False
        with session.running() as run:
            try:
                if textmode.is_text(body):  # the /v1/completions route's own path (playground/page/textmode.py)
                    gen, _ = await chosen.start_completion(body["prompt"], who, **textmode.params_of(body))
                else:
                    gen = await chosen.start(parse_chat_request(body), who)
                started = True
                run.gens.append(gen)
                if run.stopped:
                    gen.abort()
                reported = False
                async for _ in throttled(gen, reply.add, UPDATE_EVERY_S):
                    if not reported and (reply.media or reply.transcription):  # the first chunk: under the turn now
                        reported = self.report_media(conv, body, reply)
                    cleared = {o.check: ""} if notice else {}  # Whisper has loaded: the first chunk came
                    notice = ""
                    yield {o.chatbot: shown(), **cleared, **o.panels(turn, base_url, final=False, lang=lang)}
            except ApiError as exc:
                reply.error = exc.message
            finally:
                run.close()  # leaving early (page closed, event cancelled) frees the engine slot and the admission
        if not started and reply.error and restore is not None:  # refused: nothing was generated, undo the turn
            del conv.turns[-2:]
            conv.selected = None
            text, pending = restore
            yield {
                o.chatbot: shown(),
                o.conv: conv,
                o.box: text,
                o.check: say(REFUSED, lang, error=reply.error),
                o.pending: pending,
                o.pending_view: attachments.pending_html(pending, lang=lang),
                **o.panels(conv.selected_reply(), base_url, conv=conv, lang=lang),
            }
            return
        reply.stopped, reply.done = run.stopped, True
        self.report_media(conv, body, reply)
        yield {
            o.chatbot: shown(),
            o.conv: conv,
            o.check: f"⚠️ {reply.error}" if reply.error else "",
            **o.panels(turn, base_url, conv=conv, lang=lang),
            **o.tool_prompt(conv),
        }

    @staticmethod
    def report_media(conv: Conversation, body: dict[str, Any], reply: ReplyView) -> bool:
        """What the server made of the user's media (transcripts, the model's media report) under their turns."""
        conv.add_transcripts(body, reply.transcription)
        conv.add_media(body, reply.media)
        return True

    async def send(
        self,
        message: str,
        pending: list[dict[str, Any]],
        conv: Conversation,
        system: str,
        tools_text: str,
        tool_choice: str | None,
        session: Session,
        request: gr.Request,
        **knobs: Any,
    ) -> AsyncIterator[Any]:
        pending = list(pending or [])
        if not (message or "").strip() and not pending:
            yield gr.skip()
            return
        if session.streams:  # Enter while a reply streams: this message waits for it, and says so
            yield {self.out.check: say(QUEUED, session.lang)}
            while session.streams:  # until the reply's last update went out (else it could land after ours)
                await asyncio.sleep(0.05)
        if knobs.pop("mode", None) == textmode.TEXT:
            async for out in self.send_text(message, pending, conv, session, request, knobs):
                yield out
            return
        user = Turn(
            "user",
            message or "",
            parts=[a["part"] for a in pending],
            attachments=[a["summary"] for a in pending],
            previews=[attachments.kept_preview(a) for a in pending],
        )
        body, problem = self.build(
            conv.messages() + [{"role": "user", "content": user.content_value()}],
            system,
            tools_text,
            tool_choice,
            knobs,
            session,
        )
        if body is None:  # explained, and nothing is sent: the message goes back to the box (the page emptied it)
            yield {self.out.check: check_text(problem, lang=session.lang), self.out.box: message or ""}
            return
        conv.adopt(user)
        async for out in self.stream(
            conv,
            body,
            session,
            base_url_of(request),
            caller(request, "chat", self.policy),
            restore=(message or "", pending),
        ):
            yield out

    def build_text(
        self, prompt: str, knobs: dict[str, Any], session: Session | None = None
    ) -> tuple[dict[str, Any] | None, str | None]:
        """Text mode's (the exact /v1/completions body, None) or (None, why it would be rejected)."""
        service, chosen = self.service(session), self.backend(session)
        lang = session.lang if session is not None else "en"
        if service is None and chosen.kind == "embedded":
            return None, say(LOADING, lang) if not isinstance(chosen, ModelBackend) else self.not_loaded(chosen, lang)
        try:
            fields = controls.request_fields(knobs, lang)
        except RequestValidationError as exc:
            return None, exc.message
        body = textmode.completion_body(chosen.model, prompt, fields)
        problem = textmode.check(body)
        return (None, problem) if problem else (body, None)

    async def send_text(
        self,
        message: str,
        pending: list[dict[str, Any]],
        conv: Conversation,
        session: Session,
        request: gr.Request,
        knobs: dict[str, Any],
    ) -> AsyncIterator[Any]:
        """Text mode's Send: the box's text as a raw prompt (no template, no history), its continuation streamed
        into the conversation as a chat reply is; attachments wait for chat mode."""
        body, problem = self.build_text(message or "", knobs, session)
        if body is None or pending:
            problem = problem or say(NO_MEDIA_IN_TEXT, session.lang)
            yield {self.out.check: check_text(problem, lang=session.lang), self.out.box: message or ""}
            return
        conv.adopt(Turn("user", message))
        async for out in self.stream(
            conv, body, session, base_url_of(request), caller(request, "chat", self.policy), restore=(message, pending)
        ):
            yield out

    async def regenerate(
        self,
        conv: Conversation,
        system: str,
        tools_text: str,
        tool_choice: str | None,
        session: Session,
        request: gr.Request,
        **knobs: Any,
    ) -> AsyncIterator[Update]:
        """A new version of the last reply; the one it replaces stays, one "‹" away."""
        at = conv.regenerate_at()
        if at is None:
            yield {self.out.check: check_text(say(NOTHING_TO_REGENERATE, session.lang), lang=session.lang)}
            return
        async for out in self._rerun(
            conv, system, tools_text, tool_choice, session, request, knobs, "regenerate", at=at
        ):
            yield out

    async def edit(
        self,
        conv: Conversation,
        system: str,
        tools_text: str,
        tool_choice: str | None,
        session: Session,
        data: gr.EditData,
        request: gr.Request,
        **knobs: Any,
    ) -> AsyncIterator[Update]:
        _, owner = display(conv)
        index = data.index if isinstance(data.index, int) else data.index[0]
        turn_at = owner[index] if 0 <= index < len(owner) else -1
        if turn_at < 0 or conv.turns[turn_at].role != "user":
            yield {self.out.chatbot: display(conv)[0]}
            return
        old = conv.turns[turn_at]
        value = strip_marks(str(data.value))
        if value.startswith("⊕ "):  # an attachment line was edited: attachments are not text, keep the turn's text
            value = old.content
        edited = Turn("user", value, parts=old.parts, attachments=old.attachments, previews=old.previews)
        async for out in self._rerun(
            conv, system, tools_text, tool_choice, session, request, knobs, "edit", at=turn_at, new=edited
        ):
            yield out

    async def tool_result(
        self,
        result: str,
        call_id: str | None,
        conv: Conversation,
        system: str,
        tools_text: str,
        tool_choice: str | None,
        session: Session,
        request: gr.Request,
        **knobs: Any,
    ) -> AsyncIterator[Update]:
        pending = dict(conv.pending_calls())
        if call_id not in pending:
            yield {self.out.check: check_text(say(NO_CALL_WAITING, session.lang), lang=session.lang)}
            return
        conv.turns.append(Turn("tool", result, tool_call_id=call_id, tool_name=pending[call_id]))
        if len(pending) > 1:  # answer every call of the reply before the model continues
            yield {self.out.chatbot: display(conv)[0], **self.out.tool_prompt(conv)}
            return
        async for out in self._rerun(conv, system, tools_text, tool_choice, session, request, knobs, "tool_result"):
            yield out

    async def _rerun(
        self,
        conv: Conversation,
        system: str,
        tools_text: str,
        tool_choice: str | None,
        session: Session,
        request: gr.Request,
        knobs: dict[str, Any],
        endpoint: str,
        at: int | None = None,
        new: Turn | None = None,
    ) -> AsyncIterator[Update]:
        """Ask for the next reply. With `at`: a new version of the turns from `at` on (an edit's `new` user turn
        first, or, for a regenerate, just the reply); the old version is kept in the turn's fork."""
        if not conv.turns:
            yield {self.out.chatbot: []}
            return
        reply_at = conv.reply_at_or_after(at) if at is not None else None
        was = conv.turns[reply_at].request if reply_at is not None else None
        if textmode.is_text(was) and was is not None:  # a text completion's new version is one too: its prompt
            body, problem = self.build_text(new.content if new is not None else str(was["prompt"]), knobs, session)
        else:
            messages = conv.messages(upto=at) + ([{"role": "user", "content": new.content_value()}] if new else [])
            body, problem = self.build(messages, system, tools_text, tool_choice, knobs, session)
        if body is None:  # nothing changes: the old version stays as it was
            yield {self.out.chatbot: display(conv)[0], self.out.check: check_text(problem, lang=session.lang)}
            return
        if at is not None:
            conv.branch(at, "edit" if new is not None else "regenerate")
            if new is not None:
                conv.adopt(new)
        async for out in self.stream(conv, body, session, base_url_of(request), caller(request, endpoint, self.policy)):
            yield out

    # ---- the quick ones -----------------------------------------------------------------------------------
    @staticmethod
    def stop(session: Session) -> None:
        session.stop()

    def undo(self, conv: Conversation, request: gr.Request) -> Any:
        """Take back the last user message (and its reply) and put its text back in the box."""
        last_user = max((i for i, t in enumerate(conv.turns) if t.role == "user"), default=None)
        if last_user is None:
            return gr.skip()
        text = conv.turns[last_user].content
        conv.forget_after(last_user)
        o, conv.lang = self.out, lang_of(request)  # the side panel no longer describes a reply that is gone
        return {
            o.chatbot: display(conv)[0],
            o.conv: conv,
            o.box: text,
            **o.tool_prompt(conv),
            **o.panels(conv.selected_reply(), base_url_of(request), conv=conv, lang=conv.lang),
        }

    def clear(self, request: gr.Request) -> Update:
        conv, o = Conversation(lang=lang_of(request)), self.out
        return {
            o.chatbot: [],
            o.conv: conv,
            o.box: "",
            o.check: "",
            **o.panels(None, "", lang=conv.lang),
            **o.tool_prompt(conv),
        }

    def select(self, conv: Conversation, session: Session, data: gr.SelectData, request: gr.Request) -> Any:
        """Clicking a message shows its reply's statistics, timeline, tokens and request in the side panel."""
        _, owner = display(conv)
        index = data.index if isinstance(data.index, int) else data.index[0]
        if not 0 <= index < len(owner):
            return gr.skip()
        at = next((i for i in range(owner[index], len(conv.turns)) if conv.turns[i].role == "assistant"), None)
        conv.selected = at
        return self._shown(conv, session, request)

    async def act(self, action: str, conv: Conversation, session: Session, request: gr.Request) -> AsyncIterator[Any]:
        """What the page's script writes into the hidden #pg-action box: a version link or a branch."""
        if (action or "").startswith("branch:"):
            async for out in self.branch(action, conv, session, request):
                yield out
        else:
            yield self.version(action, conv, session, request)

    async def branch(
        self, action: str, conv: Conversation, session: Session, request: gr.Request
    ) -> AsyncIterator[Any]:
        """A click on a token's alternative (tokens.js sends "branch:<turn>:<choice>:<pos>:<alt>:<nonce>"): the
        reply continued from there, with that alternative, as a new version of the turn
        (playground/client/branch.py)."""
        lang, where = session.lang, branches.parse(action)
        if where is None:
            yield gr.skip()
            return
        if session.streams:
            yield {self.out.check: check_text(say(BUSY, lang), lang=lang)}
            return
        at, choice, pos, alt = where
        turn = conv.turns[at] if 0 <= at < len(conv.turns) and conv.turns[at].role == "assistant" else None
        made = branches.plan(turn.request if turn else None, turn.reply if turn else None, choice, pos, alt, lang)
        if isinstance(made, str):
            yield {self.out.check: check_text(made, lang=lang)}
            return
        problem = controls.check(made.body)
        if problem is not None:
            yield {self.out.check: check_text(problem, lang=lang)}
            return
        conv.branch(at, "branch")
        async for out in self.stream(
            conv, made.body, session, base_url_of(request), caller(request, "branch", self.policy), seed=made.reply
        ):
            yield out

    def version(self, action: str, conv: Conversation, session: Session, request: gr.Request) -> Any:
        """ "‹" / "›" on a turn with versions (the page's script sends "<turn>:prev|next[:nonce]"): show that
        version, with everything that followed it, and describe its reply in the side panel."""
        at, _, step = (action or "").partition(":")
        if not at.isdigit() or session.streams:  # not while a reply streams into the conversation
            return gr.skip()
        if not conv.switch(int(at), -1 if step.startswith("prev") else 1):
            return gr.skip()
        return {self.out.chatbot: display(conv)[0], **self._shown(conv, session, request), **self.out.tool_prompt(conv)}

    def _shown(self, conv: Conversation, session: Session, request: gr.Request) -> Update:
        """The selected reply in the side panel, and the chat re-drawn with it highlighted."""
        turn, conv.lang = conv.selected_reply(), session.lang
        remote = self.backend(session).url
        url = remote if remote and turn and turn.reply and turn.reply.backend != "embedded" else None
        return {
            self.out.chatbot: display(conv)[0],
            self.out.conv: conv,
            **self.out.panels(turn, url or base_url_of(request), conv=conv, lang=conv.lang),
        }


QUEUED = (
    "⏳ **Queued:** your message is sent when the reply in progress ends (Stop ends it now).",
    "⏳ **已排队：** 当前回复结束后发送您的消息（点“停止”可立即结束）。",
)
BUSY = ("wait for the reply in progress to end (or Stop it), then branch.", "请等当前回复结束（或点“停止”）后再分支。")
NO_MEDIA_IN_TEXT = (
    "text mode sends text only: remove the attachments or switch to Chat.",
    "文本模式只发送文本：请移除附件或切换到对话模式。",
)
NOTHING_TO_REGENERATE = ("there is no reply to regenerate yet.", "还没有可以重新生成的回复。")
NOT_SENT = ("⚠️ **Not sent:** {problem}", "⚠️ **未发送：** {problem}")
WOULD_REFUSE = ("⚠️ **Send would be refused:** {problem}", "⚠️ **发送将被拒绝：** {problem}")
# API messages that name something the page does not show, with what to change on the page instead.
PAGE_HINTS = {
    "when stream is true": (
        " (the page always streams: set `best_of` equal to `n`, or clear `best_of`)",
        "（页面总是流式输出：请把 `best_of` 设为与 `n` 相同，或清空 `best_of`）",
    ),
}
KNOB = re.compile(r"(?<![`\w.])(" + "|".join(sorted(map(re.escape, BY_NAME), key=len, reverse=True)) + r")(?![`\w])")


def on_page(problem: str, lang: str = "en") -> str:
    """An API message in the page's words: the settings it names in `code` (the page's script outlines those
    controls, playground/page/static/chat.js) and, where it names something the page does not show, what to do."""
    hint = "".join(say(h, lang) for key, h in PAGE_HINTS.items() if key in problem)
    return KNOB.sub(r"`\1`", problem) + hint


def check_text(problem: str | None, sent: bool = True, lang: str = "en") -> str:
    """The check line under the input: `sent` after Send was pressed; before it, what Send would meet."""
    return say(NOT_SENT if sent else WOULD_REFUSE, lang, problem=on_page(problem, lang)) if problem else ""
