"""The header's model picker and the A/B tab's "B's model": the base model or one of the server's LoRA adapters
(`--lora-adapters`). Both are hidden when the server has no adapters.

Picking an adapter in the header points the session at the embedded engine under that model name
(`AdapterBackend`: the chat's requests then carry `model` = the adapter id); picking the base model goes back to
the plain embedded backend. A session on a remote backend (Backend tab) keeps it: the picker is for the embedded
engine. On the A/B tab, B's model makes side B's request name an adapter while A keeps the header's model: both
are sent together, so the engine batches the base and the adapter rows in the same steps.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground.backend import LocalBackend

SAME = "(same as A)"


class AdapterBackend(LocalBackend):
    """The embedded engine, its requests sent for one LoRA adapter (`model` = the adapter id)."""

    def __init__(self, policy: Any, adapter: str) -> None:
        super().__init__(policy=policy)
        self.adapter = adapter

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.adapter if self.service is not None else ""


def model_choices(service: Any) -> list[str]:
    """The served model, then each adapter id (empty while the model loads)."""
    if service is None:
        return []
    return [service.served_name, *getattr(service, "adapters", {})]


def wire_model_picker(demo: gr.Blocks, h: Any, picker: gr.Dropdown, model_b: gr.Dropdown, session: gr.State) -> None:
    """Fill both dropdowns on page load; the header's choice sets the session's backend."""
    policy = h.embedded.policy

    def on_load(sess: Any) -> tuple[Any, Any]:
        names = model_choices(policy.get_service())
        shown = len(names) > 1
        current = sess.backend.model if isinstance(sess.backend, AdapterBackend) else (names[0] if names else None)
        return (gr.update(choices=names, value=current, visible=shown),
                gr.update(choices=[SAME, *names[1:]], value=SAME, visible=shown))  # fmt: skip

    demo.load(on_load, session, [picker, model_b], api_name=False, show_progress="hidden")

    def on_pick(name: str | None, sess: Any) -> None:
        if sess.remote or not name:  # a remote backend chosen on the Backend tab: not ours to replace
            return
        service = policy.get_service()
        adapters = getattr(service, "adapters", {}) if service is not None else {}
        sess.backend = AdapterBackend(policy, name) if name in adapters else None

    picker.change(on_pick, [picker, session], None, api_name=False, show_progress="hidden")
