"""The conversation kept across reloads and files: every change of it goes to the browser's storage (a budget of its
media) and to a download file (all of it); a reload or an imported file brings it back. A session's download
folder goes when the session does (`demo.unload`)."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from playground import export, tools_panel
from playground.chat_outputs import ChatOutputs
from playground.conversation import Conversation, display
from playground.i18n import lang_of, say
from playground.session import base_url_of, session_key

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


def save(conv: Conversation, system: str, tools_text: str, tool_choice: str | None, request: gr.Request,
         **knobs: Any) -> tuple[dict[str, Any], str]:  # fmt: skip
    """(what the browser keeps, the download file's path)."""
    snap = export.Snapshot(conv, system or "", tools_text or "", tool_choice or "auto", knobs)
    folder = EXPORTS / session_key(request)  # the file keeps every attachment; the browser a budget
    return browser_doc(snap), export.write(export.dump(snap), folder)


def forget(request: gr.Request) -> None:
    """The session's download folder, when its page closes (Gradio served its own copy of the file)."""
    shutil.rmtree(EXPORTS / session_key(request), ignore_errors=True)


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
        return {o.chatbot: display(snap.conv)[0], o.conv: snap.conv, o.check: "", **o.tool_prompt(snap.conv),
                **o.panels(snap.conv.selected_reply(), base_url_of(request), conv=snap.conv, lang=lang), self.system: snap.system,
                self.tools: snap.tools, self.tool_choice: choice, **knobs}  # fmt: skip

    def upload(self, path: str, request: gr.Request) -> Any:
        return self.restore(Path(path).read_text(encoding="utf-8"), request)


def wire(demo: gr.Blocks, restored: Restored, saved_state: gr.BrowserState, download: gr.DownloadButton,
         upload: gr.UploadButton, changes: list[Any], inputs: list[Any]) -> None:  # fmt: skip
    """Save after each of `changes` (the events that change the conversation); restore on load and import."""
    changes = [*changes, upload.upload(restored.upload, upload, restored.outputs(), api_name=False),
               demo.load(restored.restore, saved_state, restored.outputs(), api_name=False)]  # fmt: skip
    for event in changes:
        event.then(save, inputs, [saved_state, download], inputs_kwargs=restored.knobs, api_name=False,
                   show_progress="hidden")  # fmt: skip
    demo.unload(forget)
