"""English and Chinese labels for the page chrome. Gradio picks the browser's language and its footer Settings
switch it; request field names stay as the API spells them in both languages."""

from __future__ import annotations

import gradio as gr

TEXTS: dict[str, tuple[str, str]] = {
    "chat": ("Chat", "对话"),
    "placeholder": (
        "Type a message · Enter sends · Shift+Enter for a new line",
        "输入消息 · Enter 发送 · Shift+Enter 换行",
    ),
    "send": ("Send", "发送"),
    "stop": ("Stop", "停止"),
    "regenerate": ("↻ Regenerate", "↻ 重新生成"),
    "clear": ("🗑 Clear", "🗑 清空"),
    "export": ("⬇ Export", "⬇ 导出"),
    "import": ("⬆ Import", "⬆ 导入"),
    "system": ("System prompt", "系统提示词"),
    "tab_stats": ("📊 Stats", "📊 统计"),
    "tab_sampling": ("🎛 Sampling", "🎛 采样"),
    "tab_tools": ("🛠 Tools", "🛠 工具"),
    "tab_ab": ("⚖ A/B", "⚖ A/B 对比"),
    "tab_request": ("📋 Request", "📋 请求"),
    "tab_backend": ("🔌 Backend", "🔌 后端"),
    "tokens": ("🔥 Tokens by probability · candidates", "🔥 按概率着色的 token · 候选"),
    "preset": ("preset", "预设"),
    "acc_sampling": ("Sampling", "采样"),
    "acc_length": ("Length and stopping", "长度与停止"),
    "acc_candidates": ("Candidates and log-probabilities", "候选与对数概率"),
    "acc_format": ("Response format", "输出格式"),
    "acc_thinking": ("Thinking", "思考"),
    "example": ("insert an example", "插入示例"),
    "tools_json": ("tools (JSON array)", "工具定义（JSON 数组）"),
    "call": ("call", "调用"),
    "saved_result": ("saved result", "已保存的结果"),
    "result": ("result (JSON or text)", "结果（JSON 或文本）"),
    "send_result": ("Send result", "发送结果"),
    "b_uses": ("B uses", "B 使用"),
    "run_ab": ("Run A/B", "运行 A/B"),
    "request_body": ("the exact request body (edit it to replay a variant)", "完整请求体（可编辑后重放）"),
    "replay": ("▶ Replay this request", "▶ 重放此请求"),
    "curl": ("curl", "curl"),
    "python": ("Python (openai)", "Python（openai）"),
    "raw": ("streamed chunks (raw)", "流式数据块（原始）"),
}

I18N = gr.I18n(en={k: en for k, (en, _) in TEXTS.items()}, zh={k: zh for k, (_, zh) in TEXTS.items()})


def lang_of(request: gr.Request | None) -> str:
    """ "zh" for a browser that prefers Chinese (its Accept-Language), else "en": the language of the text the
    server renders (statistics, notes, messages), as Gradio's own labels follow the browser's language."""
    headers = getattr(request, "headers", None) or {}
    first = str(headers.get("accept-language", "")).split(",")[0].strip().lower()
    return "zh" if first.startswith("zh") else "en"


def say(text: tuple[str, str], lang: str, **values: object) -> str:
    """Server-rendered text in the session's language: `text` is its (English, Chinese) pair, kept beside the code
    that renders it; `values` fill its {placeholders}."""
    chosen = text[1] if lang == "zh" else text[0]
    return chosen.format(**values) if values else chosen


def t(key: str) -> gr.i18n.I18nData:
    """A label translated in the browser."""
    assert key in TEXTS, key
    return I18N(key)
