"""What the loaded model can do, said before the user tries: the header's badges (reasoning, tools, image, video,
audio), the notes in the Tools and Thinking sections, and the attach panel's line per media kind.

Everything is read from the service the page already uses: its reasoning tags, its tool-call parser,
`service.model.modalities` (the media the model takes itself) and `settings.audio_transcription` (audio turned
into text by Whisper for a model without audio input). A remote backend is not described: it decides for itself.
"""

from __future__ import annotations

import html
from typing import Any

from engine.protocol.errors import RequestValidationError
from engine.protocol.request import parse_chat_request
from playground.client import tools_panel
from playground.page.i18n import labels, say

# The header and the attach line while the model loads: translated in the browser until the page knows the model
# (layout.py, attach_panel.py), then rendered here in the session's language.
TEXTS = labels(
    __name__,
    {
        "header_loading": (
            '<div class="pg-header"><h1>LLM Playground</h1><span class="pg-badge">model loading…</span></div>',
            '<div class="pg-header"><h1>LLM Playground</h1><span class="pg-badge">模型加载中…</span></div>',
        ),
        "attach_loading": (
            '<div class="pg-caps">The model is loading…</div>',
            '<div class="pg-caps">模型加载中…</div>',
        ),
    },
)

KINDS = ("image", "video", "audio")
TAKES, TRANSCRIBES, REFUSES = "takes", "transcribes", "refuses"
ICON = {"image": "▣", "video": "▶", "audio": "♪"}
KIND_ZH = {"image": "图像", "video": "视频", "audio": "音频"}
CAPS = {"reasoning": ("reasoning", "推理"), "tools": ("tools", "工具调用")}
TITLE = "LLM Playground"  # the product's name, in both languages


def kind_name(kind: str, lang: str) -> str:
    return KIND_ZH.get(kind, kind) if lang == "zh" else kind


def capabilities(service: Any) -> dict[str, bool]:
    """What the loaded model can show: a reasoning split, a tool-call format."""
    reasoning = bool(getattr(getattr(service, "reasoning", None), "available", False))
    try:
        probe = {
            "model": service.served_name,
            "messages": [{"role": "user", "content": "x"}],
            "tools": [tools_panel.GET_WEATHER],
        }
        service.tool_parser_for(parse_chat_request(probe))
        tools = True
    except (RequestValidationError, AttributeError):
        tools = False
    return {"reasoning": reasoning, "tools": tools}


def media_modes(service: Any) -> dict[str, str]:
    """Per media kind what a request with it meets: the model takes it, the server transcribes it, or the API
    refuses it (the same rule as the service's own check, so the page never promises what the API rejects)."""
    takes = getattr(getattr(service, "model", None), "modalities", None) or frozenset()
    transcribe = bool(getattr(getattr(service, "settings", None), "audio_transcription", False))
    return {k: TAKES if k in takes else TRANSCRIBES if k == "audio" and transcribe else REFUSES for k in KINDS}


def _badge(text: str, why: str = "") -> str:
    title = f' title="{html.escape(why)}"' if why else ""
    return f'<span class="pg-badge"{title}>{html.escape(text)}</span>'


def media_badges(service: Any, lang: str = "en") -> str:
    """The header's chips for the media the model takes (or the server transcribes for it); what it cannot take is
    said in the attach panel, not struck through in the header."""
    name = service.served_name
    out = ""
    for kind, mode in media_modes(service).items():
        shown = kind_name(kind, lang)
        if mode == TAKES:
            out += _badge(
                shown,
                why=say(("{name} takes {kind} input itself", "{name} 自己读取{kind}输入"), lang, name=name, kind=shown),
            )
        elif mode == TRANSCRIBES:
            out += _badge(
                say(("{kind} → text (Whisper)", "{kind} → 文本（Whisper）"), lang, kind=shown),
                why=say(
                    (
                        "{name} has no audio input: the server transcribes audio with Whisper and the "
                        "model reads the text",
                        "{name} 没有音频输入：服务器用 Whisper 把音频转写成文本，模型读取文本",
                    ),
                    lang,
                    name=name,
                ),
            )
    return out


def backend_label(label: str, lang: str) -> str:
    """The header's backend badge (ChatBackend.label(), English) in `lang`."""
    if lang != "zh":
        return label
    if label == "backend: embedded engine":
        return "后端：内置引擎"
    return "后端：远程 " + label.removeprefix("backend: remote ") if label.startswith("backend: remote ") else label


def header_html(service: Any, backend: str = "backend: embedded engine", lang: str = "en") -> str:
    if service is None and backend.startswith("backend: embedded"):
        return say(TEXTS["header_loading"], lang)
    h1 = f"<h1>{TITLE}</h1>"
    # The label names a remote server's URL and the model id it answered: text, never markup (issue 31 item 12).
    shown = html.escape(backend_label(backend, lang))
    if not backend.startswith("backend: embedded"):  # a remote server: name it, claim nothing about its engine
        return f'<div class="pg-header">{h1}<span class="pg-badge remote">{shown}</span></div>'
    engine = getattr(service, "engine", None)
    device = html.escape(str(getattr(engine, "device", "?")))
    dtype = html.escape(str(getattr(getattr(engine, "runner", None), "dtype", "?")).replace("torch.", ""))
    context = say(("context {n:,}", "上下文 {n:,}"), lang, n=getattr(service.model, "context_length", "?"))
    badges = [
        (f"<b>{html.escape(service.served_name)}</b>", ""),
        (f"{device} · {dtype}", say(("device · dtype", "设备 · 数据类型"), lang)),
        (shown, ""),
        (context, ""),
    ]
    weights = getattr(getattr(engine, "runner", None), "weights_label", "")
    if weights:  # --quantization: what the projections' weights are and which kernels run them
        badges.insert(
            2,
            (
                html.escape(weights),
                say(
                    (
                        "The linear projections' weights as kept in memory (--quantization)",
                        "线性投影权重在内存中的存储形式（--quantization）",
                    ),
                    lang,
                ),
            ),
        )
    if getattr(service.model, "plain_template", False):  # models.PLAIN_TEMPLATE: a base model, no chat template
        badges.append(
            (
                say(("base model: plain template", "基础模型：纯文本模板"), lang),
                say(
                    (
                        "The checkpoint has no chat template: the messages' text is joined and the model continues it",
                        "该检查点没有聊天模板：各条消息的文本被拼接，模型接着续写",
                    ),
                    lang,
                ),
            )
        )
    out = "".join(f'<span class="pg-badge" title="{html.escape(why)}">{b}</span>' for b, why in badges)
    for cap, on in capabilities(service).items():  # what the model can do; the rest is said where it is asked for
        if on:
            out += _badge(say(CAPS[cap], lang))
    return f'<div class="pg-header">{h1}{out}{media_badges(service, lang)}</div>'


def model_notes(service: Any, lang: str = "en") -> tuple[str, str]:
    """What to tell the user in the Tools and thinking sections when this model cannot use them: said plainly,
    and nothing for a page user to run (which model is served is the operator's choice)."""
    if service is None:
        return "", ""
    caps = capabilities(service)
    name = service.served_name
    tools = "" if caps["tools"] else say(NO_TOOLS, lang, name=name)
    thinking = (
        ""
        if caps["reasoning"]
        else say(
            ("ℹ️ {name} does not reason; thinking has no effect.", "ℹ️ {name} 不会推理；思考模式不起作用。"),
            lang,
            name=name,
        )
    )
    return tools, thinking


NO_TOOLS = (
    "⚠️ **{name} cannot call tools.** It has no tool-call format, so tools are rejected: a message sent "
    "with tools is refused. You can still write tools here and check their JSON.",
    "⚠️ **{name} 不能调用工具。** 它没有工具调用格式，因此工具会被拒绝：带工具发送的消息会被拒收。"
    "你仍然可以在这里编写工具并检查其 JSON。",
)
SAYS = {
    TAKES: ("✓ the model sees it", "✓ 模型能看到"),
    TRANSCRIBES: ("→ transcribed by Whisper, the model reads the text", "→ 由 Whisper 转写，模型读取文本"),
    REFUSES: ("✗ refused (no {kind} input)", "✗ 会被拒绝（没有{kind}输入）"),
}


def attach_note(service: Any, remote: bool = False, lang: str = "en") -> str:
    """The attach panel's line: what the current model does with each kind, before anything is sent."""
    if remote:
        text = say(
            ("A remote backend: the server decides which media it takes.", "远程后端：由服务器决定接受哪些媒体。"), lang
        )
        return f'<div class="pg-caps">{text}</div>'
    if service is None:
        return say(TEXTS["attach_loading"], lang)
    modes = media_modes(service)
    bits = []
    for kind, mode in modes.items():
        shown = kind_name(kind, lang)
        label = f"{ICON[kind]} <s>{shown}</s>" if mode == REFUSES else f"{ICON[kind]} {shown}"
        says = say(SAYS[mode], lang, kind=shown)
        bits.append(f'<span class="pg-cap {mode}" data-kind="{kind}">{label} {says}</span>')
    hint = ""
    if REFUSES in (modes["image"], modes["video"]):
        hint = " " + say(
            (
                '<span class="pg-cap-hint">(the tiny Qwen2-VL demo model takes both: '
                "<code>python -m demo_models.tiny_mm vl</code> builds it)</span>",
                '<span class="pg-cap-hint">（小型 Qwen2-VL 演示模型两者都接受：'
                "<code>python -m demo_models.tiny_mm vl</code> 可构建它）</span>",
            ),
            lang,
        )
    name = html.escape(service.served_name)
    sep = " · "
    return say(
        (
            '<div class="pg-caps">With <b>{name}</b>: {bits}{hint}</div>',
            '<div class="pg-caps">使用 <b>{name}</b> 时：{bits}{hint}</div>',
        ),
        lang,
        name=name,
        bits=sep.join(bits),
        hint=hint,
    )


def refusal(service: Any, kind: str, lang: str = "en") -> str | None:
    """Why the embedded model will refuse an attachment of this kind, or None when it will take it."""
    if service is None or media_modes(service).get(kind, TAKES) != REFUSES:
        return None
    name = getattr(service, "served_name", None) or say(("the model", "该模型"), lang)
    return say(
        ("{name} has no {kind} input: the API will refuse this message", "{name} 没有{kind}输入：API 会拒绝这条消息"),
        lang,
        name=name,
        kind=kind_name(kind, lang),
    )
