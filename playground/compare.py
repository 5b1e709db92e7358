"""Side-by-side runs that leave the chat alone: A/B (the same conversation under the current settings and a preset,
sent together so the engine batches them) and Replay (a reply's exact request again, identical or edited, compared
with the original request and reply)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import gradio as gr

from engine.protocol.errors import ApiError
from engine.protocol.request import parse_chat_request
from playground import controls, stats, timeline
from playground.backend import Running
from playground.chat import LOADING, ChatHandlers, check_text
from playground.conversation import Conversation, Turn
from playground.render import Throttle
from playground.reply import ReplyView
from playground.request_diff import request_diff, text_diff
from playground.session import Run, Session, caller


def side(view: ReplyView, label: str) -> tuple[str, str]:
    """(the answer as Markdown, its stats and timeline as HTML) for one side."""
    c = view.first
    text = c.content or ("…" if not view.done else "*(empty)*")
    if c.reasoning:
        text = f"> 💭 *{c.reasoning_tokens} reasoning tokens*\n\n{text}"
    if view.error:
        text += f"\n\n> ⚠️ {view.error}"
    return f"**{label}**\n\n{text}", stats.table_html(view.stats(), caption="") + timeline.svg(c)


async def run_together(start: Callable[[Any], Awaitable[Running]], bodies: list[dict[str, Any]], run: Run,
                       backend: str = "embedded") -> AsyncIterator[list[ReplyView]]:  # fmt: skip
    """Start every body at once (`start`: a parsed request -> its running generation) and yield their views ~10
    times a second until all have finished."""
    views = [ReplyView(backend=backend) for _ in bodies]

    async def pump(body: dict[str, Any], view: ReplyView) -> None:
        try:
            gen = await start(parse_chat_request(body))
            run.gens.append(gen)
            if run.stopped:
                gen.abort()
            async for chunk in gen:
                view.add(chunk)
        except ApiError as exc:
            view.error = exc.message
        finally:
            view.done, view.stopped = True, run.stopped

    tasks = [asyncio.create_task(pump(b, v)) for b, v in zip(bodies, views)]
    throttle = Throttle(0.1)
    try:
        while not all(t.done() for t in tasks):
            await asyncio.wait(tasks, timeout=0.1)
            if throttle.due():
                yield views
        yield views
    finally:
        run.close()  # done, or the page went away: free the engine slots and the admissions
        for t in tasks:
            t.cancel()


class CompareHandlers:
    def __init__(self, chat: ChatHandlers) -> None:
        self.chat = chat

    async def ab(self, message: str, conv: Conversation, system: str, tools_text: str, tool_choice: str | None,
                 session: Session, preset_b: str, request: gr.Request, **knobs: Any) -> AsyncIterator[tuple]:  # fmt: skip
        history = conv.messages() + ([{"role": "user", "content": message}] if (message or "").strip() else [])
        if not history or history[-1]["role"] == "assistant":
            yield "⚠️ Type a message (or end the chat on a user or tool turn) to compare.", *[gr.skip()] * 4
            return
        bodies = []
        for settings in (knobs, {**knobs, **controls.PRESETS.get(preset_b, {})}):
            body, problem = self.chat.build(history, system, tools_text, tool_choice, settings, session)
            if body is None:
                yield check_text(problem), *[gr.skip()] * 4
                return
            bodies.append(body)
        labels = ("A · current settings", f"B · {preset_b}")
        chosen, who = self.chat.backend(session), caller(request, "ab")
        with session.running() as run:
            async for views in run_together(lambda req: chosen.start(req, who), bodies, run, chosen.kind):
                a, b = (side(v, label) for v, label in zip(views, labels))
                yield "", *a, *b

    async def replay(self, body_text: str, conv: Conversation, session: Session,
                     request: gr.Request) -> AsyncIterator[str]:  # fmt: skip
        """Send the request shown (as is, or as edited) again; compare request and reply with the original."""
        chosen, service = self.chat.backend(session), self.chat.get_service()
        try:
            body = json.loads(body_text or "")
        except json.JSONDecodeError as exc:
            yield f"⚠️ The request is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
            return
        problem = LOADING if service is None and chosen.kind == "embedded" else controls.check(body)
        if problem:
            yield check_text(problem)
            return
        original = conv.selected_reply()
        who = caller(request, "replay")
        with session.running() as run:
            async for (view,) in run_together(lambda req: chosen.start(req, who), [body], run, chosen.kind):
                yield replay_report(view, body, original)


def replay_report(view: ReplyView, body: dict[str, Any], original: Turn | None) -> str:
    """Replay's verdict: the request diff (identical or what changed), then the reply, or its diff."""
    new = view.first.content
    head = f"**Replay** · {stats.summary(view.stats())}"
    if view.error:
        return f"{head}\n\n⚠️ {view.error}"
    if original is None or original.request is None or original.reply is None:
        return f"{head} · there is no original reply to compare with.\n\n{new}"
    changed = request_diff(original.request, body)
    req = ("**Request:** ✓ identical to the original request." if changed is None else
           f"**Request:** modified — diff of the exact request JSON:\n\n```diff\n{changed}\n```")  # fmt: skip
    if not view.done:
        return f"{head}\n\n{req}\n\n{new}"
    reply = text_diff(original.reply.first.content, new)
    if reply is None:
        return f"{head}\n\n{req}\n\n**Reply:** ✓ identical to the original reply.\n\n{new}"
    return f"{head}\n\n{req}\n\n**Reply:** differs from the original reply:\n\n```diff\n{reply}\n```"
