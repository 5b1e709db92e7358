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
from playground import tools_panel

KINDS = ("image", "video", "audio")
TAKES, TRANSCRIBES, REFUSES = "takes", "transcribes", "refuses"
ICON = {"image": "🖼", "video": "🎞", "audio": "🎙"}
DEMO = ("Try the tiny demo model: `python app.py --model $(python -c 'from demo_models.tiny_qwen import "
        "build_tiny_qwen; print(build_tiny_qwen())')`")  # fmt: skip


def capabilities(service: Any) -> dict[str, bool]:
    """What the loaded model can show: a reasoning split, a tool-call format."""
    reasoning = bool(getattr(getattr(service, "reasoning", None), "available", False))
    try:
        probe = {"model": service.served_name, "messages": [{"role": "user", "content": "x"}],
                 "tools": [tools_panel.GET_WEATHER]}  # fmt: skip
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


def _badge(text: str, on: bool = True, why: str = "") -> str:
    title = f' title="{html.escape(why)}"' if why else ""
    return f'<span class="pg-badge{"" if on else " off"}"{title}>{html.escape(text)}</span>'


def media_badges(service: Any) -> str:
    name = service.served_name
    out = ""
    for kind, mode in media_modes(service).items():
        if mode == TAKES:
            out += _badge(kind, why=f"{name} takes {kind} input itself")
        elif mode == TRANSCRIBES:
            out += _badge(f"{kind} → text (Whisper)", why=f"{name} has no audio input: the server transcribes audio "
                          "with Whisper and the model reads the text")  # fmt: skip
        else:
            out += _badge(kind, on=False, why=f"{name} has no {kind} input: the API refuses {kind} parts")
    return out


def header_html(service: Any, backend: str = "backend: embedded engine") -> str:
    if service is None and backend.startswith("backend: embedded"):
        return '<div class="pg-header"><h1>LLM Playground</h1><span class="pg-badge">model loading…</span></div>'
    if not backend.startswith("backend: embedded"):  # a remote server: name it, claim nothing about its engine
        return f'<div class="pg-header"><h1>LLM Playground</h1><span class="pg-badge remote">{backend}</span></div>'
    engine = getattr(service, "engine", None)
    device = str(getattr(engine, "device", "?"))
    dtype = str(getattr(getattr(engine, "runner", None), "dtype", "?")).replace("torch.", "")
    badges = [(f"<b>{service.served_name}</b>", ""), (f"{device} · {dtype}", "device · dtype"), (backend, ""),
              (f"context {getattr(service.model, 'context_length', '?'):,}", "")]  # fmt: skip
    out = "".join(f'<span class="pg-badge" title="{why}">{b}</span>' for b, why in badges)
    for name, on in capabilities(service).items():
        out += _badge(name, on, "" if on else "this model cannot")
    return f'<div class="pg-header"><h1>LLM Playground</h1>{out}{media_badges(service)}</div>'


def model_notes(service: Any) -> tuple[str, str]:
    """What to tell the user in the Tools and thinking sections when this model cannot use them."""
    if service is None:
        return "", ""
    caps = capabilities(service)
    name = service.served_name
    tools = "" if caps["tools"] else f"⚠️ {name} has no tool-call format, so tools are rejected. {DEMO}"
    thinking = "" if caps["reasoning"] else f"ℹ️ {name} does not reason; thinking has no effect. {DEMO}"
    return tools, thinking


SAYS = {TAKES: "✓ the model sees it", TRANSCRIBES: "→ transcribed by Whisper, the model reads the text",
        REFUSES: "✗ refused (no {kind} input)"}  # fmt: skip


def attach_note(service: Any, remote: bool = False) -> str:
    """The attach panel's line: what the current model does with each kind, before anything is sent."""
    if remote:
        return '<div class="pg-caps">A remote backend: the server decides which media it takes.</div>'
    if service is None:
        return '<div class="pg-caps">The model is loading…</div>'
    modes = media_modes(service)
    bits = []
    for kind, mode in modes.items():
        label = f"{ICON[kind]} <s>{kind}</s>" if mode == REFUSES else f"{ICON[kind]} {kind}"
        bits.append(f'<span class="pg-cap {mode}" data-kind="{kind}">{label} {SAYS[mode].format(kind=kind)}</span>')
    hint = ""
    if REFUSES in (modes["image"], modes["video"]):
        hint = (' <span class="pg-cap-hint">(the tiny Qwen2-VL demo model takes both: '
                "<code>python -m demo_models.tiny_mm vl</code> builds it)</span>")  # fmt: skip
    name = html.escape(service.served_name)
    return f'<div class="pg-caps">With <b>{name}</b>: {" · ".join(bits)}{hint}</div>'


def refusal(service: Any, kind: str) -> str | None:
    """Why the embedded model will refuse an attachment of this kind, or None when it will take it."""
    if service is None or media_modes(service).get(kind, TAKES) != REFUSES:
        return None
    return f"{getattr(service, 'served_name', 'the model')} has no {kind} input: the API will refuse this message"
