"""The conversation kept across reloads and files: every change of it goes to the browser's storage (a budget of its
media) and to a download file (all of it); a reload or an imported file brings it back. A session's download
folder goes when the session does (`demo.unload`).

No file path comes from what a client sends: Gradio's session hash is the client's choice (any string, `..`
included, on `/gradio_api/queue/join` and `/gradio_api/heartbeat/{hash}`), so it only keys `Exports`, which
names each session's folder itself (a random name under its root). An imported file is read by the browser that
uploaded it (`READ_UPLOAD`); the server gets its text, never a path to open."""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from playground.client import tools_panel
from playground.page import export
from playground.page.chat_outputs import ChatOutputs
from playground.page.conversation import Conversation, display
from playground.page.i18n import lang_of, say
from playground.page.session import base_url_of

EXPORTS = Path(tempfile.gettempdir()) / "llm-playground-exports"
# The browser's storage (localStorage holds about 5 M characters per site) keeps at most BROWSER_CHARS of the
# conversation, of which at most BROWSER_MEDIA_CHARS of inline media (the newest attachments first). Every reply
# keeps its statistics, timeline, token ids and request; over the budget the raw chunks and the tokens'
# alternatives are left out, then the media. The exported file keeps everything.
BROWSER_CHARS = 4_000_000
NOT_IMPORTED = ("⚠️ **Not imported:** {why}", "⚠️ **未导入：** {why}")
BROWSER_MEDIA_CHARS = 2_000_000


def browser_doc(snap: export.Snapshot) -> dict[str, Any]:
    """What the browser keeps of `snap`: everything if it fits BROWSER_CHARS, else less (see above)."""
    doc: dict[str, Any] = {}
    for media, lean in ((BROWSER_MEDIA_CHARS, False), (BROWSER_MEDIA_CHARS, True), (0, True)):
        doc = export.dump(snap, media, lean=lean)
        if len(json.dumps(doc, ensure_ascii=False)) <= BROWSER_CHARS:
            break
    return doc


# The browser reads the file it uploaded and hands its text to the server (an UploadButton's value, in the
# browser, is the uploaded file's FileData with its `url` on this server).
READ_UPLOAD = """async (file) => {
  if (!file || !file.url) return "";
  const r = await fetch(file.url, {credentials: "same-origin"});
  return r.ok ? await r.text() : "";
}"""


class Exports:
    """The download folders of one page's sessions, each a random name under `root` that this object made. A
    session is known by Gradio's session hash, which the client picks: it is a key here and never part of a path,
    so a hash like `..` or `../../x` names no folder but its own. At most `capacity` sessions are kept (the
    oldest folder goes first), as Gradio keeps at most 10,000 sessions' state."""

    def __init__(self, root: Path | None = None, capacity: int = 10_000) -> None:
        self.root, self.capacity = root or EXPORTS, capacity
        self._folders: OrderedDict[str, Path] = OrderedDict()
        self._lock = threading.Lock()

    def folder(self, session: str | None) -> Path:
        """The session's folder (made on its first save)."""
        key = session or ""
        with self._lock:
            folder = self._folders.get(key)
            if folder is None:
                self.root.mkdir(parents=True, exist_ok=True)
                folder = self._folders[key] = Path(tempfile.mkdtemp(prefix=secrets.token_hex(4), dir=self.root))
            self._folders.move_to_end(key)
            evicted = [self._folders.popitem(last=False)[1] for _ in range(len(self._folders) - self.capacity)]
        for old in evicted:
            shutil.rmtree(old, ignore_errors=True)
        return folder

    def forget(self, session: str | None) -> None:
        """The session's folder goes, if it made one (Gradio served its own copy of the file)."""
        with self._lock:
            folder = self._folders.pop(session or "", None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def save(
        self,
        conv: Conversation,
        system: str,
        tools_text: str,
        tool_choice: str | None,
        request: gr.Request,
        **knobs: Any,
    ) -> tuple[dict[str, Any], str]:
        """(what the browser keeps, the download file's path)."""
        snap = export.Snapshot(conv, system or "", tools_text or "", tool_choice or "auto", knobs)
        folder = self.folder(getattr(request, "session_hash", None))  # every attachment; the browser a budget
        return browser_doc(snap), export.write(export.dump(snap), folder)

    def unload(self, request: gr.Request) -> None:
        self.forget(getattr(request, "session_hash", None))


@dataclass(eq=False)
class Restored:
    """The components a saved or imported conversation sets: the chat and its side panels (the selected reply's
    statistics, timeline, tokens and request), the system prompt, the tools and the sampling controls."""

    out: ChatOutputs
    system: gr.Textbox
    tools: gr.Code
    tool_choice: gr.Dropdown
    knobs: dict[str, Any]

    def outputs(self) -> list[Any]:
        return [*self.out.all(), self.system, self.tools, self.tool_choice, *self.knobs.values()]

    def restore(self, doc: Any, request: gr.Request) -> Any:
        """A saved or imported conversation back into the page; a broken file is explained, nothing changes."""
        if not doc:
            return gr.skip()
        lang = lang_of(request)
        try:
            snap = export.load(doc)
        except ValueError as exc:
            return {self.out.check: say(NOT_IMPORTED, lang, why=exc)}
        snap.conv.lang = lang
        options = tools_panel.choice_options(tools_panel.parse_tools(snap.tools, lang)[0])
        choice = gr.update(choices=options, value=snap.tool_choice if snap.tool_choice in options else "auto")
        knobs = {comp: snap.settings[name] for name, comp in self.knobs.items() if name in snap.settings}
        o = self.out
        return {
            o.chatbot: display(snap.conv)[0],
            o.conv: snap.conv,
            o.check: "",
            **o.tool_prompt(snap.conv),
            **o.panels(snap.conv.selected_reply(), base_url_of(request), conv=snap.conv, lang=lang),
            self.system: snap.system,
            self.tools: snap.tools,
            self.tool_choice: choice,
            **knobs,
        }


def wire(
    demo: gr.Blocks,
    restored: Restored,
    saved_state: gr.BrowserState,
    download: gr.DownloadButton,
    upload: gr.UploadButton,
    changes: list[Any],
    inputs: list[Any],
    exports: Exports | None = None,
) -> None:
    """Save after each of `changes` (the events that change the conversation); restore on load and import (the
    imported file's text, read by the browser: READ_UPLOAD)."""
    exports = exports or Exports()
    text = gr.Textbox(visible="hidden")
    imported = upload.upload(None, upload, text, js=READ_UPLOAD, api_name=False, queue=False)  # type: ignore[arg-type]
    changes = [
        *changes,
        imported.then(restored.restore, text, restored.outputs(), api_name=False),
        demo.load(restored.restore, saved_state, restored.outputs(), api_name=False),  # type: ignore[arg-type]
    ]
    for event in changes:
        event.then(
            exports.save,
            inputs,
            [saved_state, download],
            inputs_kwargs=restored.knobs,
            api_name=False,
            show_progress="hidden",
        )
    demo.unload(exports.unload)
