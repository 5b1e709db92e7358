"""English and Chinese labels for the page chrome. Gradio picks the browser's language and its footer Settings
switch it; request field names stay as the API spells them in both languages."""

from __future__ import annotations

import gradio as gr

from playground.client import controls
from playground.client.say import say

TEXTS: dict[str, tuple[str, str]] = {
    "chat": ("Chat", "对话"),
    "placeholder": (
        "Type a message · Enter sends · Shift+Enter for a new line",
        "输入消息 · Enter 发送 · Shift+Enter 换行",
    ),
    "send": ("Send", "发送"),
    "mode": (
        "Mode: Chat sends the conversation through the chat template; Text sends the box's text as a raw prompt",
        "模式：对话模式经聊天模板发送整段对话；文本模式把输入框的文字作为原始提示发送",
    ),
    "mode_chat": ("Chat", "对话"),
    "mode_text": ("Text", "文本"),
    "stop": ("Stop", "停止"),
    "regenerate": ("↻ Regenerate", "↻ 重新生成"),
    "clear": ("✕ Clear", "✕ 清空"),
    "export": ("⬇ Export", "⬇ 导出"),
    "import": ("⬆ Import", "⬆ 导入"),
    "system": ("System prompt", "系统提示词"),
    "tab_stats": ("▥ Stats", "▥ 统计"),
    "tab_sampling": ("≋ Sampling", "≋ 采样"),
    "tab_tools": ("⚒ Tools", "⚒ 工具"),
    "tab_ab": ("⚖ A/B", "⚖ A/B 对比"),
    "tab_request": ("{} Request", "{} 请求"),
    "tab_backend": ("⇄ Backend", "⇄ 后端"),
    "tab_server": ("▭ Server", "▭ 服务器"),
    "tab_grid": ("▦ Grid", "▦ 网格"),
    "grid_help": (
        "Many prompts against several columns, graded: a prompt set (JSONL or CSV: `user` text with "
        "`{{variables}}` from the row, or `messages`; optional `system` and `expected`), columns of request "
        "fields (optional `name`, and `url`, `model`, `api_key` for a remote server), graders. The same "
        "module runs in the notebooks (`playground/client/grid.py`).",
        "多个提示对多列设置并评分：提示集（JSONL 或 CSV：带 `{{variables}}` 变量的 `user` 文本，或 `messages`；可选 "
        "`system` 与 `expected`）、由请求字段组成的列（可选 `name`，以及远程服务器的 `url`、`model`、"
        "`api_key`）、评分器。notebook 使用同一模块（`playground/client/grid.py`）。",
    ),
    "grid_prompts": ("Prompt set (JSONL or CSV)", "提示集（JSONL 或 CSV）"),
    "grid_columns": ("Columns (JSON array)", "列（JSON 数组）"),
    "grid_graders": ("Graders", "评分器"),
    "grader_exact": ("exact match", "完全匹配"),
    "grader_contains": ("contains the expected answer", "包含期望答案"),
    "grader_regex": ("matches the expected answer as a regex", "按正则匹配期望答案"),
    "grader_valid_json": ("valid JSON", "有效的 JSON"),
    "grid_run": ("▶ Run grid", "▶ 运行网格"),
    "grid_cancel": ("Cancel", "取消"),
    "grid_reopen": ("Open a saved grid", "打开保存的网格"),
    "grid_csv": ("⬇ CSV", "⬇ 导出 CSV"),
    "grid_json": ("⬇ JSON", "⬇ 导出 JSON"),
    "tab_xray": ("◎ X-ray", "◎ 调度透视"),
    "xray_none_html": (
        '<div class="pg-xray-note" data-xray="none">Send a message: each engine step of its reply shows here, with '
        "what shared the step.</div>",
        '<div class="pg-xray-note" data-xray="none">发送一条消息：这里会逐步显示其回复的每个引擎步，以及同一步里还有什么。</div>',
    ),
    "server_help": (
        "The embedded engine's live state, refreshed every two seconds while this tab is open: the same numbers as "
        "`GET /server/state` and `/metrics`.",
        "内置引擎的实时状态，本标签页打开时每两秒刷新一次：与 `GET /server/state` 和 `/metrics` 的数字相同。",
    ),
    "admin_key": ("admin key", "管理员密钥"),
    "admin_key_help": (
        "This server has credentials: resetting the prefix cache takes one of its admin keys.",
        "此服务器配置了凭据：清空前缀缓存需要它的一个管理员密钥。",
    ),
    "reset_prefix_cache": ("⌫ Reset prefix cache", "⌫ 清空前缀缓存"),
    "tab_prompt": ("¶ Prompt", "¶ 提示词"),
    "prompt_src_input": ("the message being typed", "正在输入的消息"),
    "prompt_src_reply": ("the selected reply's request", "所选回复的请求"),
    "prompt_show": ("¶ Show the prompt", "¶ 显示提示词"),
    "tokens": ("◈ Tokens by probability · candidates", "◈ 按概率着色的 token · 候选"),
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
    "b_model": ("B's model (another loaded model or a LoRA adapter)", "B 的模型（另一个已加载的模型或 LoRA 适配器）"),
    "model_pick": ("Model", "模型"),
    "drawer": ("☰ Panels", "☰ 面板"),
    "quality_go": ("⚖ Quality vs fp32", "⚖ 与 fp32 比较质量"),
    "switch_key": ("Admin key (to switch)", "管理员密钥（切换用）"),
    "run_ab": ("Run A/B", "运行 A/B"),
    "request_body": ("the exact request body (edit it to replay a variant)", "完整请求体（可编辑后重放）"),
    "replay": ("▶ Replay this request", "▶ 重放此请求"),
    "curl": ("curl", "curl"),
    "python": ("Python (openai)", "Python 代码（openai）"),
    "raw": ("streamed chunks (raw)", "流式数据块（原始）"),
    # the chat column
    "message": ("Message", "消息"),
    "service_help": ("The model is loading…", "模型加载中…"),  # until the page knows the model (examples.py)
    "tool_called": (
        "⚒ **The model called a tool.** Type (or pick) its result to continue.",
        "⚒ **模型调用了工具。** 输入（或选择）调用结果以继续。",
    ),
    "none_placeholder": ("(none)", "（无）"),
    "header_loading": (
        '<div class="pg-header"><h1>LLM Playground</h1><span class="pg-badge">model loading…</span></div>',
        '<div class="pg-header"><h1>LLM Playground</h1><span class="pg-badge">模型加载中…</span></div>',
    ),
    "attach_loading": ('<div class="pg-caps">The model is loading…</div>', '<div class="pg-caps">模型加载中…</div>'),
    "no_reply_html": ('<div class="pg-empty">No reply yet.</div>', '<div class="pg-empty">还没有回复。</div>'),
    # the attach panel
    "attach": ("⊕ Attach image · audio · video · URL", "⊕ 附加图像 · 音频 · 视频 · URL"),
    "send_as": ("send uploads as", "上传文件的发送方式"),
    "send_as_base64": ("base64 (data URL / input_audio)", "base64 编码（data URL / input_audio）"),
    "send_as_url": ("URL (pasted URL; file:// path of an upload)", "URL（粘贴的 URL；上传文件的 file:// 路径）"),
    "attach_image": ("image", "图像"),
    "attach_audio": ("audio", "音频"),
    "video_types": ("video (.mp4 .avi .wmv)", "视频（.mp4 .avi .wmv）"),
    "attach_url": ("media URL", "媒体 URL"),
    "attach_url_placeholder": (
        "https://host/cat.png or file:///data/clip.mp4 (sent as a URL)",
        "https://host/cat.png 或 file:///data/clip.mp4（以 URL 发送）",
    ),
    "attach_url_add": ("Attach URL", "附加 URL"),
    "attach_clear": ("✕ Remove all", "✕ 全部移除"),
    # the Sampling tab
    "preset_info": ("Sets the sampling fields below.", "设置下方的采样参数。"),
    "preset_precise": ("Precise (greedy)", "精确（贪心）"),
    "preset_balanced": ("Balanced", "均衡"),
    "preset_creative": ("Creative", "创意"),
    "thinking": ("thinking", "思考模式"),
    "thinking_default": ("model default", "模型默认"),
    "server_default": ("server default", "服务器默认"),
    "thinking_on": ("on", "开启"),
    "thinking_off": ("off", "关闭"),
    "sampler_logprobs_label": ("samplers before/after", "采样器前后对比"),
    "speculative_label": ("speculative (n-gram drafts)", "推测解码（多元组草稿）"),
    "format_label": ("Format", "格式"),
    "format_pattern_label": ("pattern", "模式"),
    "format_none": ("none", "无"),
    "format_json": ("JSON schema", "JSON 模式（schema）"),
    "format_choice": ("choice list", "选项列表"),
    "format_regex": ("regex", "正则表达式"),
    "format_grammar": ("grammar", "文法"),
    # the A/B tab
    "ab_help": (
        "The chat plus the message in the box, under the current settings (A) and a preset (B), sent "
        "together so the engine batches them. The chat itself is unchanged.",
        "把对话加上输入框中的消息，分别按当前设置（A）和一个预设（B）同时发送，让引擎把它们放在同一批次中处理。"
        "对话本身不变。",
    ),
    # the Backend tab
    "backend_help": (
        "A remote server (MindIE, vLLM, vLLM-Ascend, or this app on another machine) answers through the same "
        "request and the same rendering. Its stream carries no engine timeline, and batch sizes and queue waits "
        "only when it sends MindIE's perf stats: the statistics say what it did not send instead of guessing.",
        "远程服务器（MindIE、vLLM、vLLM-Ascend，或另一台机器上的本应用）使用同样的请求和同样的显示方式作答。"
        "它的流不带引擎时间线；只有当它发送 MindIE 的性能统计时才有批大小和排队等待：统计会标明它没有发送的项，"
        "而不是去猜测。",
    ),
    "backend": ("backend", "后端"),
    "backend_embedded": ("Embedded", "内置引擎"),
    "backend_remote": ("Remote (OpenAI-compatible URL)", "远程（兼容 OpenAI 的 URL）"),
    "url": ("URL", "URL 地址"),
    "api_key": ("API key", "API 密钥"),
    "model": ("model", "模型"),
    "first_model": ("(the server's first model)", "（服务器的第一个模型）"),
    "use_backend": ("Use this backend", "使用此后端"),
}

# The Sampling tab's help under each request field (playground/client/controls.py holds the English): the field names
# and their values stay as the API spells them.
KNOB_HELP_ZH = {
    "temperature": "0 = 贪心。范围 [0, 2]；API 默认 1。",
    "top_p": "核采样；1 = 关闭。范围 (1e-6, 1]。",
    "top_k": "只保留概率最高的 k 个；-1 或 0 = 关闭。范围 -1、0、[1, 2³¹−1]。",
    "min_p": "只保留概率不低于最高者的 min_p 倍的 token；0 = 关闭。范围 [0, 1]。",
    "presence_penalty": "抑制已出现过的 token；0 = 关闭。[-2, 2]。",
    "frequency_penalty": "随 token 出现次数增大；0 = 关闭。[-2, 2]。",
    "repetition_penalty": "作用于提示或输出中出现过的 token；1 = 关闭。(0, 2]。",
    "seed": "留空 = 随机；相同的 seed 复现同一回复。范围 [0, 2⁶⁴−1]。",
    "max_tokens": "包括推理部分；受服务器上限约束。范围 [1, 2³¹−1]。",
    "stop": "停止字符串，每行一个（1..1024 个字符）；不能与束搜索同用。",
    "stop_token_ids": "逗号分隔的 token id；超出 [0, 2³¹−1] 的 id 被忽略。",
    "include_stop_str_in_output": "在回复末尾保留匹配到的停止字符串。",
    "ignore_eos": "越过序列结束符继续生成，直到 max_tokens。",
    "skip_special_tokens": "从文本中去掉特殊 token。",
    "n": "回复条数；> 1 需要 temperature > 0 且不带工具。范围 [1, 8192] 且 ≤ max_n。",
    "best_of": "0 = n；流式输出要求 best_of = n。范围 [1, 128]。",
    "use_beam_search": "束宽 max(n, best_of)；不能有停止字符串；max_tokens ≤ 128。",
    "logprobs": "每个 token 的对数概率（热力图）。不能与工具同用。",
    "top_logprobs": "每个 token 的候选数（需要 logprobs）。范围 [0, 20]。",
    "sampler_logprobs": "扩展字段：热力图中在模型的候选旁边，再列出经过采样器（logit_bias、惩罚、约束、temperature、top_k、top_p）之后的"
    "候选。需要 logprobs 且 top_logprobs ≥ 1。",
    "speculative": "扩展字段：提示查找（多元组草稿）推测解码；贪心回复不变，被接受的草稿在热力图中加下划线。"
    "服务器默认：贪心请求起草，采样请求不起草（由服务器启动参数决定）。",
    "format": "扩展字段（vLLM 的 structured_outputs）：用约束解码把回复限制在 JSON schema、若干选项之一、正则表达式"
    "（完整匹配）或文法（Lark 或 GBNF）之内。每个请求只能有一种（不能与 response_format 同用）。",
    "format_pattern": "用于「输出格式」：JSON schema、每行一个选项、正则表达式或文法。",
    "response_format": "json_object = 任意 JSON 对象；json_schema = 符合下方 schema 的 JSON。由约束解码保证。",
    "json_schema": '用于 json_schema：{"name": "...", "schema": {...}}（类型 string、integer、number、boolean、array、'
    "object、null）。",
    "enable_thinking": "chat_template_kwargs.enable_thinking：推理模型的思考模式。",
    "thinking_budget": "chat_template_kwargs.thinking_budget：推理 token 的上限；0 = 不限。范围 [1, 2³¹−1]。",
}
TEXTS.update({f"help_{k.name}": (k.help, KNOB_HELP_ZH[k.name]) for k in controls.KNOBS})
# A preset's shown name; the value the page and the `/ab` endpoint use stays the English name.
PRESET_KEYS = {"Precise (greedy)": "preset_precise", "Balanced": "preset_balanced", "Creative": "preset_creative"}

I18N = gr.I18n(en={k: en for k, (en, _) in TEXTS.items()}, zh={k: zh for k, (_, zh) in TEXTS.items()})


def lang_of(request: gr.Request | None) -> str:
    """ "zh" for a browser that prefers Chinese (its Accept-Language), else "en": the language of the text the
    server renders (statistics, notes, messages), as Gradio's own labels follow the browser's language."""
    headers = getattr(request, "headers", None) or {}
    first = str(headers.get("accept-language", "")).split(",")[0].strip().lower()
    return "zh" if first.startswith("zh") else "en"


def t(key: str) -> gr.i18n.I18nData:
    """A label translated in the browser."""
    assert key in TEXTS, key
    return I18N(key)


def choices(pairs: dict[str, str]) -> list[tuple[gr.i18n.I18nData, str]]:
    """A Radio's or Dropdown's (shown label, value) pairs from {value: key}: the label translated in the browser,
    the value (what handlers and the endpoints see) unchanged."""
    return [(t(key), value) for value, key in pairs.items()]


def preset_name(preset: str, lang: str) -> str:
    """A preset's name as shown in `lang` (server-rendered text such as the A/B side's title)."""
    key = PRESET_KEYS.get(preset)
    return say(TEXTS[key], lang) if key else preset
