"""Side-by-side runs that leave the chat alone: A/B (the same conversation under the current settings and a preset,
sent together so the engine batches them) and Replay (a reply's exact request again, identical or edited, compared
with the original request and reply)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

from engine.protocol.errors import ApiError
from engine.protocol.request import parse_chat_request
from playground.client import controls, stats
from playground.client.backend import Running
from playground.client.render import Throttle
from playground.client.reply import ReplyView
from playground.client.tools_panel import json_error
from playground.page import textmode, timeline
from playground.page.chat import LOADING, ChatHandlers, check_text
from playground.page.conversation import Conversation, Turn
from playground.page.header_models import SAME
from playground.page.i18n import PRESET_KEYS, choices, labels, preset_name, say, t
from playground.page.request_diff import request_diff, text_diff
from playground.page.session import Run, Session, caller

# The labels this module shows, translated in the browser (playground/page/i18n.py `t`).
TEXTS = labels(
    __name__,
    {
        "tab_ab": ("⚖ A/B", "⚖ A/B 对比"),
        "b_uses": ("B uses", "B 使用"),
        "b_model": (
            "B's model (another loaded model or a LoRA adapter)",
            "B 的模型（另一个已加载的模型或 LoRA 适配器）",
        ),
        "run_ab": ("Run A/B", "运行 A/B"),
        "ab_help": (
            "The chat plus the message in the box, under the current settings (A) and a preset (B), sent "
            "together so the engine batches them. The chat itself is unchanged.",
            "把对话加上输入框中的消息，分别按当前设置（A）和一个预设（B）同时发送，让引擎把它们放在同一批次中处理。"
            "对话本身不变。",
        ),
    },
)


def side(view: ReplyView, label: str, lang: str = "en") -> tuple[str, str]:
    """(the answer as Markdown, its stats and timeline as HTML) for one side."""
    c = view.first
    text = c.content or ("…" if not view.done else say(("*(empty)*", "*（空）*"), lang))
    if c.reasoning:
        text = say(("> ∴ *{n} reasoning tokens*", "> ∴ *{n} 个推理 token*"), lang, n=c.reasoning_tokens) + f"\n\n{text}"
    if view.error:
        text += f"\n\n> ⚠️ {view.error}"
    chart = timeline.svg(c, lang, *timeline.NARROW)
    return f"**{label}**\n\n{text}", stats.table_html(view.stats(), caption="", lang=lang) + chart


async def run_together(
    start: Callable[[Any], Awaitable[Running]], bodies: list[dict[str, Any]], run: Run, backend: str = "embedded"
) -> AsyncIterator[list[ReplyView]]:
    """Start every body at once (`start`: a parsed request -> its running generation) and yield their views ~10
    times a second until all have finished."""
    views = [ReplyView(backend=backend) for _ in bodies]

    async def pump(body: dict[str, Any], view: ReplyView) -> None:
        try:
            gen = await start(body if textmode.is_text(body) else parse_chat_request(body))  # text: as it is
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


NOTHING_TO_COMPARE = (
    "⚠️ Type a message (or end the chat on a user or tool turn) to compare.",
    "⚠️ 请输入一条消息（或让对话以用户或工具轮次结束）再进行对比。",
)


def ab_history(message: str | None, conv: Conversation) -> list[dict[str, Any]] | None:
    """The messages A/B would send (the chat plus the typed message), or None when there is nothing to answer."""
    history = conv.messages() + ([{"role": "user", "content": message}] if (message or "").strip() else [])
    return None if not history or history[-1]["role"] == "assistant" else history


def ab_ready(message: str | None, conv: Conversation, session: Session) -> tuple[str, Any]:
    """Before anything runs, as the chat's check line does for Send: the A/B tab's line says what is missing and
    Run A/B stays disabled while the box is empty (and the chat does not end on a user or tool turn)."""
    ready = ab_history(message, conv) is not None
    return ("" if ready else say(NOTHING_TO_COMPARE, session.lang)), gr.update(interactive=ready)


class CompareHandlers:
    def __init__(self, chat: ChatHandlers) -> None:
        self.chat = chat

    async def ab(
        self,
        message: str,
        conv: Conversation,
        system: str,
        tools_text: str,
        tool_choice: str | None,
        session: Session,
        preset_b: str,
        model_b: str | None,
        request: gr.Request,
        **knobs: Any,
    ) -> AsyncIterator[tuple]:
        lang = session.lang
        history = ab_history(message, conv)
        if history is None:
            yield say(NOTHING_TO_COMPARE, lang), *[gr.skip()] * 4
            return
        bodies = []
        for settings in (knobs, {**knobs, **controls.PRESETS.get(preset_b, {})}):
            body, problem = self.chat.build(history, system, tools_text, tool_choice, settings, session)
            if body is None:
                yield check_text(problem, lang=lang), *[gr.skip()] * 4
                return
            bodies.append(body)
        if model_b and model_b != SAME:  # B on a LoRA adapter: A and B still go to the engine together
            bodies[1]["model"] = model_b
        labels = (
            say(("A · current settings", "A · 当前设置"), lang),
            f"B · {preset_name(preset_b, lang)}" + (f" · {model_b}" if model_b and model_b != SAME else ""),
        )
        chosen, who = self.chat.backend(session), caller(request, "ab", self.chat.policy)
        with session.running() as run:
            async for views in run_together(lambda req: chosen.start(req, who), bodies, run, chosen.kind):
                a, b = (side(v, label, lang) for v, label in zip(views, labels))
                yield "", *a, *b

    async def replay(
        self, body_text: str, conv: Conversation, session: Session, request: gr.Request
    ) -> AsyncIterator[str]:
        """Send the request shown (as is, or as edited) again; compare request and reply with the original."""
        chosen, service, lang = self.chat.backend(session), self.chat.service(session), session.lang
        try:
            body = json.loads(body_text or "")
        except json.JSONDecodeError as exc:
            yield say(
                ("⚠️ The request is not valid JSON: {where}.", "⚠️ 请求不是有效的 JSON：{where}。"),
                lang,
                where=json_error(exc, lang),
            )
            return
        text = textmode.is_text(body)  # a text-mode request (/v1/completions' body): replayed down that route
        check = textmode.check if text else controls.check
        problem = say(LOADING, lang) if service is None and chosen.kind == "embedded" else check(body)
        if problem:
            yield check_text(problem, lang=lang)
            return
        original = conv.selected_reply()
        who = caller(request, "replay", self.chat.policy)

        async def start(req: Any) -> Running:
            if not text:
                return await chosen.start(req, who)
            gen, _ = await chosen.start_completion(body["prompt"], who, **textmode.params_of(body))
            return gen

        with session.running() as run:
            async for (view,) in run_together(start, [body], run, chosen.kind):
                yield replay_report(view, body, original, lang)


def replay_report(view: ReplyView, body: dict[str, Any], original: Turn | None, lang: str = "en") -> str:
    """Replay's verdict: the request diff (identical or what changed), then the reply, or its diff."""
    new = view.first.content
    head = say(("**Replay** · {summary}", "**重放** · {summary}"), lang, summary=stats.summary(view.stats(), lang))
    if view.error:
        return f"{head}\n\n⚠️ {view.error}"
    if original is None or original.request is None or original.reply is None:
        return (
            head
            + say((" · there is no original reply to compare with.", " · 没有可供比较的原始回复。"), lang)
            + f"\n\n{new}"
        )
    changed = request_diff(original.request, body)
    req = (
        say(("**Request:** ✓ identical to the original request.", "**请求：** ✓ 与原始请求完全相同。"), lang)
        if changed is None
        else say(
            ("**Request:** modified — diff of the exact request JSON:", "**请求：** 已修改 — 完整请求 JSON 的差异："),
            lang,
        )
        + f"\n\n```diff\n{changed}\n```"
    )
    if not view.done:
        return f"{head}\n\n{req}\n\n{new}"
    reply = text_diff(original.reply.first.content, new)
    if reply is None:
        same = say(("**Reply:** ✓ identical to the original reply.", "**回复：** ✓ 与原始回复完全相同。"), lang)
        return f"{head}\n\n{req}\n\n{same}\n\n{new}"
    differs = say(("**Reply:** differs from the original reply:", "**回复：** 与原始回复不同："), lang)
    return f"{head}\n\n{req}\n\n{differs}\n\n```diff\n{reply}\n```"


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
