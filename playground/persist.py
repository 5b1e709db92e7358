"""The conversation kept across reloads and files: every change of it goes to the browser's storage (a budget of its
media) and to a download file (all of it); a reload or an imported file brings it back. A session's download
folder goes when the session does (`demo.unload`)."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from playground import export, tools_panel
from playground.conversation import Conversation, display
from playground.session import session_key

EXPORTS = Path(tempfile.gettempdir()) / "llm-playground-exports"
BROWSER_MEDIA_CHARS = 2_000_000  # inline media kept in the browser's storage (localStorage holds ~5 M characters)


def save(conv: Conversation, system: str, tools_text: str, tool_choice: str | None, request: gr.Request,
         **knobs: Any) -> tuple[dict[str, Any], str]:  # fmt: skip
    """(what the browser keeps, the download file's path)."""
    snap = export.Snapshot(conv, system or "", tools_text or "", tool_choice or "auto", knobs)
    folder = EXPORTS / session_key(request)  # the file keeps every attachment; the browser a budget
    return export.dump(snap, BROWSER_MEDIA_CHARS), export.write(export.dump(snap), folder)


def forget(request: gr.Request) -> None:
    """The session's download folder, when its page closes (Gradio served its own copy of the file)."""
    shutil.rmtree(EXPORTS / session_key(request), ignore_errors=True)


@dataclass(eq=False)
class Restored:
    """The components a saved or imported conversation sets."""

    chatbot: gr.Chatbot
    conv: gr.State
    system: gr.Textbox
    tools: gr.Code
    tool_choice: gr.Dropdown
    check: gr.Markdown
    knobs: dict[str, Any]

    def outputs(self) -> list[Any]:
        return [self.chatbot, self.conv, self.system, self.tools, self.tool_choice, self.check, *self.knobs.values()]

    def restore(self, doc: Any) -> Any:
        """A saved or imported conversation back into the page; a broken file is explained, nothing changes."""
        if not doc:
            return gr.skip()
        try:
            snap = export.load(doc)
        except ValueError as exc:
            return {self.check: f"⚠️ **Not imported:** {exc}"}
        options = tools_panel.choice_options(tools_panel.parse_tools(snap.tools)[0])
        choice = gr.update(choices=options, value=snap.tool_choice if snap.tool_choice in options else "auto")
        knobs = {comp: snap.settings[name] for name, comp in self.knobs.items() if name in snap.settings}
        return {self.chatbot: display(snap.conv)[0], self.conv: snap.conv, self.system: snap.system,
                self.tools: snap.tools, self.tool_choice: choice, self.check: "", **knobs}  # fmt: skip

    def upload(self, path: str) -> Any:
        return self.restore(Path(path).read_text(encoding="utf-8"))


def wire(demo: gr.Blocks, restored: Restored, saved_state: gr.BrowserState, download: gr.DownloadButton,
         upload: gr.UploadButton, changes: list[Any], inputs: list[Any]) -> None:  # fmt: skip
    """Save after each of `changes` (the events that change the conversation); restore on load and import."""
    changes = [*changes, upload.upload(restored.upload, upload, restored.outputs(), api_name=False)]
    for event in changes:
        event.then(save, inputs, [saved_state, download], inputs_kwargs=restored.knobs, api_name=False,
                   show_progress="hidden")  # fmt: skip
    demo.load(restored.restore, saved_state, restored.outputs(), api_name=False)
    demo.unload(forget)
