"""Attachments: an uploaded, recorded or pasted image / video / audio -> the content part the request carries, and
the one-line summary the page shows before and after it is sent.

The summary's numbers (MIME, bytes, frames, duration, size) come from the server's own media code through
`ChatService.preview_media`; here only the sending form is chosen: base64 (a data URL, or `input_audio` for
audio) or a URL (a pasted http(s) URL, or the `file://` path of an upload, which only a server that allows that
local root accepts).
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any
from urllib.parse import quote

from playground.page.i18n import say

# §3.3: the extensions each kind accepts and their MIME types.
MIME_OF = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".mp4": "video/mp4",
    ".avi": "video/x-msvideo",
    ".wmv": "video/x-ms-wmv",
    ".mp3": "audio/mpeg",
    ".wav": "audio/x-wav",
    ".flac": "audio/flac",
}
KIND_OF = {ext: mime.split("/")[0] for ext, mime in MIME_OF.items()}
AUDIO_FORMAT = {".mp3": "mp3", ".wav": "wav", ".flac": "flac"}
PART_TYPE = {"image": "image_url", "video": "video_url", "audio": "audio_url"}
ICON = {"image": "▣", "video": "▶", "audio": "♪"}
BASE64, URL = "base64", "url"
ELIDE_OVER = 256  # characters: longer base64 payloads become placeholders in curl / Python views


def kind_of(name: str) -> str | None:
    return KIND_OF.get(Path(name.split("?", 1)[0]).suffix.lower())


def kind_of_part(part: dict[str, Any]) -> str:
    """image / video / audio: the media kind of a content part."""
    return "audio" if part.get("type") in ("input_audio", "audio_url") else str(part.get("type", "")).split("_")[0]


def file_part(path: str, kind: str, send_as: str = BASE64) -> dict[str, Any]:
    """An uploaded or recorded file as a content part: base64 inline, or its `file://` path (send_as URL)."""
    ext = Path(path).suffix.lower()
    if send_as == URL:
        return url_part("file://" + str(Path(path).resolve()), kind)
    data = base64.b64encode(Path(path).read_bytes()).decode()
    if kind == "audio" and ext in AUDIO_FORMAT:
        return {"type": "input_audio", "input_audio": {"data": data, "format": AUDIO_FORMAT[ext]}}
    mime = MIME_OF.get(ext) or f"{kind}/{ext.lstrip('.') or 'unknown'}"  # the server explains a wrong type
    return url_part(f"data:{mime};base64,{data}", kind)


def url_part(url: str, kind: str) -> dict[str, Any]:
    ptype = PART_TYPE[kind]
    return {"type": ptype, ptype: {"url": url.strip()}}


def source_of(part: dict[str, Any]) -> str:
    if part.get("type") == "input_audio":
        return str((part.get("input_audio") or {}).get("data") or "")
    value = part.get(part.get("type") or "")
    return str(value.get("url") if isinstance(value, dict) else value or "")


def how_sent(part: dict[str, Any], lang: str = "en") -> str:
    source = source_of(part)
    if part.get("type") == "input_audio":
        return say(
            ("input_audio base64 ({n} chars in the body)", "input_audio base64（请求体中 {n} 个字符）"),
            lang,
            n=f"{len(source):,}",
        )
    if source.startswith("data:"):
        return say(("data URL ({n} chars in the body)", "data URL（请求体中 {n} 个字符）"), lang, n=f"{len(source):,}")
    return f"URL {source[:80]}{'…' if len(source) > 80 else ''}"


def _size(n: int) -> str:
    return f"{n:,} B" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


FRAMES_SAMPLED = ("{n} frames sampled ({fps} fps, max {max})", "采样 {n} 帧（{fps} fps，最多 {max} 帧）")
SENT_AS = ("sent as {how}", "发送方式：{how}")
SERVER_REFUSES = (" · ⚠️ the server refuses it: {why}", " · ⚠️ 服务器拒绝：{why}")
FRAMES, TOKENS = ("{n} frames", "{n} 帧"), ("{n} tokens", "{n} 个 token")


def summary(preview: dict[str, Any], part: dict[str, Any], name: str = "", lang: str = "en") -> str:
    """One line: what the server will see, and how it travels. A refusal says the server's reason."""
    kind = preview.get("kind") or "media"
    bits = [f"{ICON.get(kind, '⊕')} {name or kind}"]
    if preview.get("mime"):
        bits.append(str(preview["mime"]))
    if preview.get("bytes") is not None:
        bits.append(_size(int(preview["bytes"])))
    if preview.get("width"):
        bits.append(f"{preview['width']}×{preview['height']}")
    if preview.get("frames") is not None:
        bits.append(
            say(FRAMES_SAMPLED, lang, n=preview["frames"], fps=f"{preview['fps']:g}", max=preview["max_frames"])
        )
    if preview.get("duration_s") is not None:
        bits.append(f"{preview['duration_s']:.1f} s")
    bits.append(say(SENT_AS, lang, how=how_sent(part, lang)))
    line = " · ".join(bits)
    return line + (say(SERVER_REFUSES, lang, why=preview["error"]) if preview.get("error") else "")


def media_line(report: dict[str, Any], lang: str = "en") -> str:
    """What the model took of one part, from the response's `media` report: "▶ video · 20 frames · 910 tokens"."""
    kind = str(report.get("type") or "media")
    bits = [f"{ICON.get(kind, '⊕')} {say(KIND_NAMES.get(kind, (kind, kind)), lang)}"]
    if report.get("frames_sampled") is not None:
        bits.append(say(FRAMES, lang, n=report["frames_sampled"]))
    if report.get("duration") is not None:
        bits.append(f"{float(report['duration']):.1f} s")
    if report.get("tokens") is not None:
        bits.append(say(TOKENS, lang, n=f"{int(report['tokens']):,}"))
    return " · ".join(bits)


PENDING_TITLE = ("Attached to the next message", "随下一条消息发送的附件")
PREVIEW_ALT = ("preview of {name}", "{name} 的预览")
KIND_NAMES = {"image": ("image", "图片"), "video": ("video", "视频"), "audio": ("audio", "音频")}
INLINE_PREVIEW_MAX = 512 << 10  # characters: a longer inline payload gets no preview rather than a second copy
AUDIO_MIME = {"mp3": "audio/mpeg", "wav": "audio/wav", "flac": "audio/flac"}


def preview_src(item: dict[str, Any]) -> str | None:
    """Where the browser can load a pending attachment's preview from: an upload's own file, served by Gradio's
    file route (which serves its uploads), so the list does not carry the bytes again; else a pasted http(s) URL;
    else the inline payload itself when it is small. None: nothing the browser can load (a file:// URL, a large
    payload whose file is gone)."""
    path = item.get("path")
    if path and uploaded(Path(path)):
        return "gradio_api/file=" + quote(str(path), safe="/")  # relative: the page's own root, however mounted
    part = item.get("part") or {}
    source = source_of(part)
    if source.startswith(("http://", "https://")):
        return source
    if len(source) > INLINE_PREVIEW_MAX:
        return None
    if part.get("type") == "input_audio":
        mime = AUDIO_MIME.get(str((part.get("input_audio") or {}).get("format")), "audio/wav")
        return f"data:{mime};base64,{source}"
    return source if source.startswith("data:") else None


def uploaded(path: Path) -> bool:
    """Whether this file is one Gradio received (an upload, a recording, a snapshot: all in its upload folder).
    Gradio checks that of an event's file inputs only when it launched the app itself, not for a page mounted on
    FastAPI, so the page checks it before reading one (issue 31 item 10)."""
    from gradio.utils import get_upload_folder

    try:
        return path.is_file() and path.resolve().is_relative_to(Path(get_upload_folder()).resolve())
    except OSError:
        return False


def preview_html(item: dict[str, Any], lang: str = "en", src: str | None = None) -> str:
    """A thumbnail (an image; a video's first frame) or a player (audio) of a pending attachment, or ""; `src`:
    where to load it from, if not `preview_src(item)`."""
    part = item.get("part") or {}
    src = src or preview_src(item)
    if src is None:
        return ""
    kind = kind_of_part(part)
    esc = html.escape(src, quote=True)
    name = Path(item["path"]).name if item.get("path") else say(KIND_NAMES.get(kind, (kind, kind)), lang)
    alt = html.escape(say(PREVIEW_ALT, lang, name=name), quote=True)
    if kind == "image":
        return f'<img class="pg-thumb" src="{esc}" alt="{alt}" loading="lazy" referrerpolicy="no-referrer">'
    if kind == "video":
        frame = "" if src.startswith("data:") else "#t=0.1"  # a frame past the start: some clips open on black
        return (
            f'<video class="pg-thumb" src="{esc}{frame}" preload="metadata" muted playsinline '
            f'aria-label="{alt}"></video>'
        )
    if kind == "audio":
        return f'<audio class="pg-player" src="{esc}" controls preload="metadata" aria-label="{alt}"></audio>'
    return ""


CHAT_INLINE_MAX = 48 << 10  # characters: the chat is re-sent at every update, so only small inline previews go in


FILE_ROUTE = "gradio_api/file="


def kept_preview(item: dict[str, Any]) -> str:
    """What a sent attachment keeps to show its preview in the chat later: its upload's file route, or ""."""
    src = preview_src(item) or ""
    return src if src.startswith(FILE_ROUTE) else ""


def chat_preview(part: dict[str, Any], kept: str = "", lang: str = "en") -> str:
    """A sent attachment's thumbnail or player in the chat: from its upload's file (`kept`, only ever a file
    route: an imported file cannot point the page anywhere else), else its own http URL, else its inline data
    when small; "" otherwise (its summary line says what it was)."""
    src = kept if kept.startswith(FILE_ROUTE) and "://" not in kept else preview_src({"part": part})
    if src is None or (src.startswith("data:") and len(src) > CHAT_INLINE_MAX):
        return ""
    return preview_html({"part": part}, lang, src)


def pending_html(items: list[dict[str, Any]], lang: str = "en") -> str:
    """The attachments waiting to go with the next message: each one's line, with a thumbnail or a player."""
    if not items:
        return ""
    rows = []
    for a in items:
        bad = " bad" if a["preview"].get("error") or a.get("refused") else ""
        media = preview_html(a, lang)
        rows.append(
            f'<li class="pg-attach-item{bad}">{media}<span class="pg-attach-line">'
            f"{html.escape(a['summary'])}</span></li>"
        )
    return f'<div class="pg-attach"><b>{html.escape(say(PENDING_TITLE, lang))}</b><ul>{"".join(rows)}</ul></div>'


def placeholder(part: dict[str, Any]) -> str | None:
    """A short stand-in for a long inline payload, or None when the part is short enough to show as is."""
    source = source_of(part)
    if len(source) <= ELIDE_OVER:
        return None
    if part.get("type") == "input_audio":
        return f"<{len(source):,} base64 chars elided>"
    head = source.split(",", 1)[0] + "," if source.startswith("data:") else ""
    return f"{head}<{len(source) - len(head):,} base64 chars elided>"


def elide(body: dict[str, Any]) -> dict[str, Any]:
    """The body with long base64 media replaced by placeholders (for the curl and Python views)."""
    messages = []
    for m in body.get("messages") or []:
        if isinstance(m.get("content"), list):
            m = {**m, "content": [_elided(p) for p in m["content"]]}
        messages.append(m)
    return {**body, "messages": messages} if "messages" in body else body


def _elided(part: Any) -> Any:
    if not isinstance(part, dict) or part.get("type") in (None, "text"):
        return part
    short = placeholder(part)
    if short is None:
        return part
    if part["type"] == "input_audio":
        return {**part, "input_audio": {**part["input_audio"], "data": short}}
    return {**part, part["type"]: {"url": short}}
