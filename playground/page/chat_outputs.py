"""What a chat event updates: the chat, the input row and the side panels, as a `{component: value}` dict of only the
components that change (Gradio leaves the others as they are)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import gradio as gr

from playground.client import snippets, stats
from playground.client.reply import ReplyView
from playground.page import attachments, heatmap, textmode, timeline
from playground.page.conversation import Conversation, Turn, display
from playground.page.i18n import say
from playground.page.tabs import xray
from playground.page.tabs.stats import TEXTS as STATS_TEXTS

Update = dict[Any, Any]


@dataclass(eq=False)
class ChatOutputs:
    """The components every chat event (chat, regenerate, edit, tool_result, undo, clear, select) lists as its
    outputs, in this order: gradio_client returns them by index, State and layout blocks left out (the order
    tests/playground/test_ui.py's CHATBOT, BOX, CHECK, ... count on)."""

    chatbot: gr.Chatbot
    conv: gr.State
    box: gr.Textbox
    check: gr.Markdown
    stats: gr.HTML
    timeline: gr.HTML
    heat: gr.HTML
    cands: gr.HTML
    req_json: gr.Code
    curl: gr.Code
    python: gr.Code
    raw: gr.Code
    tool_row: gr.Group
    tool_call: gr.Dropdown
    pending: gr.State
    pending_view: gr.HTML
    xray: gr.HTML  # the X-ray tab (playground/page/tabs/xray.py); last, so the indices before it stay as they were

    def all(self) -> list[Any]:
        return [getattr(self, f.name) for f in fields(self)]

    def panels(
        self,
        turn: Turn | None,
        base_url: str,
        *,
        final: bool = True,
        conv: Conversation | None = None,
        lang: str = "en",
    ) -> Update:
        """The side panels for one reply: stats and timeline always, the rest once it is final; none: all empty.
        With `conv`, the statistics name the chat messages of the reply (`data-messages`), which the page's
        script (playground/page/static/chat.js) highlights: the reply the side panel describes."""
        if turn is None or turn.reply is None:
            out: Update = {
                self.stats: say(STATS_TEXTS["no_reply_html"], lang),
                self.timeline: timeline.svg(ReplyView().first, lang=lang),
                self.xray: xray.reply_html(None, lang),
            }
            if final:
                out |= {
                    self.heat: heatmap.tokens_html([], lang),
                    self.cands: heatmap.candidates_html(ReplyView(), lang),
                    self.req_json: "",
                    self.raw: "",
                    self.curl: "",
                    self.python: "",
                }
            return out
        reply = turn.reply
        table = stats.table_html(reply.stats(), lang=lang)
        if conv is not None and final:
            owner, at = display(conv)[1], next((i for i, t in enumerate(conv.turns) if t is turn), -1)
            shown = ",".join(str(j) for j, i in enumerate(owner) if i == at)
            table = f'<div class="pg-described" data-messages="{shown}">{table}</div>'
        out = {
            self.stats: table,
            self.timeline: timeline.svg(reply.first, lang=lang),
            self.xray: xray.reply_html(reply, lang, live=not final),
        }
        if final:
            pos = next((i for i, t in enumerate(conv.turns) if t is turn), None) if conv is not None else None
            text = textmode.is_text(turn.request)
            branchable = pos if turn.request and not text else None  # playground/client/branch.py continues a chat
            heat = heatmap.tokens_html(reply.first.logprobs, lang, turn=branchable, accepted=reply.first.accepted)
            if text and reply.prompt_logprobs:  # the prompt's own heatmap first, then the continuation's
                k = int((turn.request or {}).get("prompt_logprobs") or textmode.PROMPT_LOGPROBS)
                heat = textmode.prompt_heatmap_html(reply.prompt_logprobs, lang, k) + textmode.reply_title(lang) + heat
            if reply.quality:  # the quality meter's KL colour mode first (playground/page/tabs/quality_panel.py)
                heat = heatmap.quality_html(reply.quality, lang) + heat
            out |= {
                self.heat: heat,
                self.cands: heatmap.candidates_html(reply, lang),
                self.raw: "\n".join(reply.raw),
                **self.request_views(turn.request or {}, base_url),
            }
        return out

    def request_views(self, body: dict[str, Any], base_url: str) -> Update:
        """The Request tab for one body: the exact JSON, and curl / Python with media elided to placeholders."""
        short = attachments.elide(body)
        return {
            self.req_json: snippets.as_json(body) if body else "",
            self.curl: snippets.as_curl(short, base_url) if body else "",
            self.python: snippets.as_python(short, base_url) if body else "",
        }

    def tool_prompt(self, conv: Conversation) -> Update:
        """The tool-result row: shown, with the calls waiting for a result, while the last reply has any."""
        pending = conv.pending_calls()
        choices = [(f"{name} · {cid}", cid) for cid, name in pending]
        return {
            self.tool_row: gr.update(visible=bool(pending)),
            self.tool_call: gr.update(choices=choices, value=choices[0][1] if choices else None),
        }
