"""The attachment row under the chat input: upload or snapshot an image (webcam), upload or record audio
(microphone), upload a video, or paste a URL; each is summarised by the server's own media code before it goes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr

from playground.page import attachments, capabilities
from playground.page.attachments import BASE64, URL
from playground.page.i18n import choices, labels, say, t
from playground.page.session import Session

# The labels this module shows, translated in the browser (playground/page/i18n.py `t`).
TEXTS = labels(
    __name__,
    {
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
    },
)

SEND_AS = {BASE64: "send_as_base64", URL: "send_as_url"}  # the radio's value -> its shown label's key
VIDEO_TYPES = [".mp4", ".avi", ".wmv"]


class AttachHandlers:
    def __init__(self, get_service: Callable[[], Any], service_of: Callable[[Session], Any] | None = None) -> None:
        self.get_service = get_service
        self.service_of = service_of  # the service a session talks to (its picked model), when the page knows it

    async def attachment(
        self, part: dict[str, Any], name: str, remote: bool = False, lang: str = "en", session: Session | None = None
    ) -> dict[str, Any]:
        """{part, preview, summary, refused}: the part as it will be sent, what the server makes of it, and
        whether the embedded model will refuse its kind (said now, before the user sends; `remote`: the session
        chose a remote backend, whose server decides), in `lang`."""
        service = self.service_of(session) if self.service_of and session else self.get_service()
        loading = {"error": say(("the model is loading", "模型加载中"), lang)}
        preview = await service.preview_media(part) if service is not None else loading
        line = attachments.summary(preview, part, name, lang)
        why = None if remote else capabilities.refusal(service, attachments.kind_of_part(part), lang)
        if why and not preview.get("error"):
            line += f" · ⚠️ {why}"
        cap = getattr(getattr(service, "settings", None), "max_request_length_mb", None)
        if cap and len(attachments.source_of(part)) > cap << 20:  # the page sends in-process; an HTTP client can't
            line += " · ⚠️ " + say(
                (
                    "over the server's {cap} MiB HTTP body limit: a curl copy of this request gets 413",
                    "超过服务器 {cap} MiB 的 HTTP 请求体上限：此请求的 curl 副本会得到 413",
                ),
                lang,
                cap=cap,
            )
        return {"part": part, "preview": preview, "summary": line, "refused": bool(why)}

    async def add_file(
        self,
        path: str | None,
        kind: str,
        send_as: str,
        pending: list[dict[str, Any]],
        remote: bool = False,
        lang: str = "en",
        session: Session | None = None,
    ) -> tuple:
        if not path or any(a.get("path") == path for a in pending or []):  # one recording may fire two events
            return gr.skip(), gr.skip(), gr.skip()
        if not attachments.uploaded(Path(path)):  # a path the client named: Gradio checks none on a mounted app
            return gr.skip(), gr.skip(), None
        part = attachments.file_part(path, kind, send_as)
        item = {**await self.attachment(part, Path(path).name, remote, lang, session), "path": path}
        items = [*(pending or []), item]
        return items, attachments.pending_html(items, lang), None  # the input clears, ready for the next one

    async def add_url(self, url: str, pending: list[dict[str, Any]], session: Session) -> tuple:
        url = (url or "").strip()
        kind = attachments.kind_of(url)
        if not url:
            return gr.skip(), gr.skip(), gr.skip()
        if kind is None:
            exts = ", ".join(attachments.MIME_OF)
            must = say(
                ("The URL must end in one of {exts}.", "URL 必须以下列之一结尾：{exts}。"), session.lang, exts=exts
            )
            warn = f'<div class="pg-attach bad">⚠️ {must}</div>'
            return gr.skip(), attachments.pending_html(pending or [], session.lang) + warn, gr.skip()
        item = await self.attachment(
            attachments.url_part(url, kind), url.rsplit("/", 1)[-1], session.remote, session.lang, session
        )
        items = [*(pending or []), item]
        return items, attachments.pending_html(items, session.lang), ""

    @staticmethod
    def clear() -> tuple:
        return [], ""


def _adder(h: AttachHandlers, kind: str) -> Callable[..., Any]:
    async def add(path: str | None, send_as: str, pending: list[dict[str, Any]], session: Session) -> tuple:
        return await h.add_file(path, kind, send_as, pending, session.remote, session.lang, session)

    return add


def build(h: AttachHandlers, view: gr.HTML, session: gr.State) -> tuple[gr.State, gr.HTML]:
    """The attachment accordion; `view` (placed under the input) lists what waits. Returns the pending list and
    the line that says what the current model does with each kind (the page refreshes it with the backend)."""
    pending = gr.State([])
    with gr.Accordion(t("attach"), open=False, elem_id="pg-attach-panel"):
        note = gr.HTML(t("attach_loading"), elem_id="pg-attach-caps")  # until the page knows the model
        send_as = gr.Radio(choices(SEND_AS), value=BASE64, label=t("send_as"), elem_id="pg-send-as")
        with gr.Row():
            image = gr.Image(
                sources=["upload", "webcam", "clipboard"],
                type="filepath",
                format="png",
                label=t("attach_image"),
                height=190,
                min_width=160,
                elem_id="pg-attach-image",
            )
            audio = gr.Audio(
                sources=["upload", "microphone"],
                type="filepath",
                format=None,
                label=t("attach_audio"),
                min_width=160,
                elem_id="pg-attach-audio",
            )
            video = gr.File(
                file_types=VIDEO_TYPES, label=t("video_types"), height=190, min_width=160, elem_id="pg-attach-video"
            )
        with gr.Row():
            url = gr.Textbox(
                label=t("attach_url"),
                placeholder=t("attach_url_placeholder"),
                show_label=False,
                scale=5,
                elem_id="pg-attach-url",
            )
            add = gr.Button(t("attach_url_add"), size="sm", scale=1, min_width=90, elem_id="pg-attach-url-add")
            clear = gr.Button(t("attach_clear"), size="sm", scale=1, min_width=90, elem_id="pg-attach-clear")
    # format=None: audio passes through as uploaded (the browser records WAV); converting needs ffmpeg.
    # `input` is a user's change only (upload, snapshot, recording, clear), never the reset done here.
    for comp, kind in ((image, "image"), (audio, "audio"), (video, "video")):
        event = comp.upload if isinstance(comp, gr.File) else comp.input
        event(
            _adder(h, kind),
            [comp, send_as, pending, session],
            [pending, view, comp],
            api_name=f"attach_{kind}",
            show_progress="minimal",
        )
    audio.stop_recording(_adder(h, "audio"), [audio, send_as, pending, session], [pending, view, audio], api_name=False)  # type: ignore[arg-type]
    gr.on([add.click, url.submit], h.add_url, [url, pending, session], [pending, view, url], api_name="attach_url")
    clear.click(h.clear, None, [pending, view], api_name="attach_clear")
    return pending, note
