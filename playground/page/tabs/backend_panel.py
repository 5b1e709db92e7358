"""The Backend tab: per browser session, answer with the embedded engine (default) or a remote OpenAI-compatible
server (MindIE, vLLM, vLLM-Ascend, this app elsewhere) by URL, API key and model name. The choice is a ChatBackend
(playground/client/backend.py) in the session's state; the page drives either the same way."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr
import httpx

from engine.protocol.errors import ApiError
from playground.client.backend import ChatBackend
from playground.client.remote import RemoteBackend
from playground.page.capabilities import backend_label
from playground.page.chat import ChatHandlers
from playground.page.i18n import choices, labels, say, t
from playground.page.session import Session

# The labels this module shows, translated in the browser (playground/page/i18n.py `t`).
TEXTS = labels(
    __name__,
    {
        "tab_backend": ("⇄ Backend", "⇄ 后端"),
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
    },
)


# The radio's values (the `/backend` endpoint's `kind`); the page shows them translated.
EMBEDDED, REMOTE = "Embedded", "Remote (OpenAI-compatible URL)"
OUTSIDE = (
    "this server is reachable beyond this machine, so its page connects only to the base URLs given with "
    "--remote-backend-urls (none are)",
    "此服务器可从本机之外访问，因此它的页面只连接 --remote-backend-urls 给出的基础 URL（目前没有给出）",
)
INVALID = ("not a valid URL", "不是有效的 URL")
NOT_ALLOWED = (
    "not one of the URLs this server's --remote-backend-urls allows",
    "不在此服务器的 --remote-backend-urls 允许的 URL 之中",
)
NO_URL = ("enter the remote server's URL, e.g. http://host:8000/v1", "请输入远程服务器的 URL，例如 http://host:8000/v1")


def as_text(value: str) -> str:
    """A remote server's or a user's words in the status note (Markdown): shown as typed, never as markup."""
    escaped = html.escape(value, quote=False)
    return "".join("\\" + ch if ch in "\\`*_[]()#!|<>~" else ch for ch in escaped)


# Percent-encoded dots, slashes and backslashes: a server may decode them into a path that leaves the base.
ENCODED = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)


def plain_path(url: httpx.URL) -> bool:
    """Whether `url`'s path says where it goes as written: no `.` or `..` segment, no backslash, no encoded dot,
    slash or backslash (`/v1/%2e%2e/admin` and `/v1/..%2fadmin` are `/admin` to many servers)."""
    raw = url.raw_path.split(b"?", 1)[0].decode("ascii", "replace")
    segments = url.path.split("/")
    return not ENCODED.search(raw) and "\\" not in url.path and not {".", ".."} & set(segments)


def refusal(url: str, settings: Any, lang: str = "en") -> str | None:
    """Why this server's page may not connect to `url`, or None. The Backend tab makes the server itself open the
    connection, so a page reachable from outside would otherwise let anyone probe the server's own network
    (loopback, metadata, private addresses): there only the `--remote-backend-urls` bases are allowed (same
    scheme, host and port, path under theirs). A loopback bind reaches nobody but this machine's users."""
    allowed = list(getattr(settings, "remote_backend_urls", None) or [])
    if not allowed:
        if settings is not None and not settings.reachable_from_outside:
            return None
        return say(OUTSIDE, lang)
    try:
        target = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return say(INVALID, lang)
    if not plain_path(target):
        return say(NOT_ALLOWED, lang)
    for base in allowed:
        b = httpx.URL(base)
        same = (target.scheme, target.host, target.port) == (b.scheme, b.host, b.port)
        under = target.path.rstrip("/") + "/" if target.path else "/"
        if same and under.startswith(b.path.rstrip("/") + "/"):
            return None
    return say(NOT_ALLOWED, lang)


async def chosen_backend(
    kind: str, url: str, api_key: str, model: str, settings: Any = None, lang: str = "en"
) -> ChatBackend | None:
    """The form's backend (None: the embedded engine). A remote one asks the server's /v1/models when no model is
    named, and raises RemoteError or httpx.HTTPError when it cannot be reached, ValueError when it may not be used
    (its message in `lang`)."""
    if kind != REMOTE:
        return None
    url = (url or "").strip()
    if not url:
        raise ValueError(say(NO_URL, lang))
    reason = refusal(url, settings, lang)
    if reason is not None:
        raise ValueError(reason)
    # Async, with short connect and read limits (playground/client/remote.py): a server that never answers holds this
    # session's click a few seconds, and no thread the engine's callers need.
    return await RemoteBackend.open(
        url,
        model=(model or "").strip() or None,
        api_key=(api_key or "").strip() or None,
        allow=lambda target: refusal(target, settings) is None,
    )


def connector(h: ChatHandlers, header: Callable[[Any, str, str], str]) -> Callable[..., Any]:
    """`header(service, backend label, lang)`: the page header's HTML (capabilities.header_html)."""

    async def use(kind: str, url: str, api_key: str, model: str, session: Session) -> tuple[Any, str]:
        """Switch this browser session's backend; the header names the one in use. A server's or a connection's
        own error message is quoted as it came."""
        lang = session.lang
        try:
            # the server's own settings (its --remote-backend-urls, its bind), as the composition root gave the page
            session.backend = await chosen_backend(kind, url, api_key, model, h.page, lang)
        except (ApiError, httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
            message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            return gr.skip(), say(
                ("⚠️ **Not connected:** {message}", "⚠️ **未连接：** {message}"), lang, message=as_text(message)
            )
        label = h.backend(session).label()
        note = (
            say(("✓ Embedded engine.", "✓ 内置引擎。"), lang)
            if not session.remote
            else say(("✓ Connected: {label}.", "✓ 已连接：{label}。"), lang, label=as_text(backend_label(label, lang)))
        )
        return header(h.service(session), label, lang), note

    return use


@dataclass(eq=False)
class BackendForm:
    kind: gr.Radio
    url: gr.Textbox
    key: gr.Textbox
    model: gr.Textbox
    go: gr.Button
    status: gr.Markdown

    def wire(
        self, h: ChatHandlers, session: gr.State, header_comp: gr.HTML, header: Callable[[Any, str, str], str]
    ) -> None:
        """The "Use this backend" button: the `/backend` API endpoint (kind, url, api_key, model)."""
        self.go.click(
            connector(h, header),
            [self.kind, self.url, self.key, self.model, session],
            [header_comp, self.status],
            api_name="backend",
        )


def build() -> BackendForm:
    gr.Markdown(t("backend_help"))
    kinds = choices({EMBEDDED: "backend_embedded", REMOTE: "backend_remote"})
    return BackendForm(
        kind=gr.Radio(kinds, value=EMBEDDED, label=t("backend"), elem_id="pg-backend"),
        url=gr.Textbox(label=t("url"), placeholder="http://host:8000/v1", elem_id="pg-backend-url"),
        key=gr.Textbox(
            label=t("api_key"), type="password", placeholder=t("none_placeholder"), elem_id="pg-backend-key"
        ),
        model=gr.Textbox(label=t("model"), placeholder=t("first_model"), elem_id="pg-backend-model"),
        go=gr.Button(t("use_backend"), variant="primary", size="sm", elem_id="pg-backend-go"),
        status=gr.Markdown("", elem_id="pg-backend-status"),
    )
