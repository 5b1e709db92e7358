"""The Request tab: the exact body of the selected reply's request (editable, to replay a variant), as curl and
Python, and the streamed chunks as they came."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from playground.page.i18n import labels, t

# The labels this module shows, translated in the browser (playground/page/i18n.py `t`).
TEXTS = labels(
    __name__,
    {
        "tab_request": ("{} Request", "{} 请求"),
        "request_body": ("the exact request body (edit it to replay a variant)", "完整请求体（可编辑后重放）"),
        "replay": ("▶ Replay this request", "▶ 重放此请求"),
        "curl": ("curl", "curl"),
        "python": ("Python (openai)", "Python 代码（openai）"),
        "raw": ("streamed chunks (raw)", "流式数据块（原始）"),
    },
)


@dataclass(eq=False)
class RequestTab:
    req_json: gr.Code
    replay: gr.Button
    replay_out: gr.Markdown
    curl: gr.Code
    python: gr.Code
    raw: gr.Code


def request_tab() -> RequestTab:
    req_json = gr.Code("", language="json", label=t("request_body"), lines=10, interactive=True, elem_id="pg-request")
    replay = gr.Button(t("replay"), size="sm", elem_id="pg-replay")
    replay_out = gr.Markdown("", elem_id="pg-replay-out")
    curl = gr.Code("", language="shell", label=t("curl"), lines=4, elem_id="pg-curl")
    python = gr.Code("", language="python", label=t("python"), lines=8, elem_id="pg-python")
    raw = gr.Code("", language="json", label=t("raw"), lines=8, max_lines=20, elem_id="pg-raw")
    return RequestTab(req_json, replay, replay_out, curl, python, raw)
