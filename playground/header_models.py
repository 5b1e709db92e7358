"""The header's model picker and the A/B tab's "B's model": the server's models (`--models-dir`, a repeated
`--model`) and the LoRA adapters of the loaded ones (`--lora-adapters`). Both are hidden when there is nothing to
pick.

Each model is listed with its size, architecture and what it takes (text / image / video / audio, reasoning,
tools), read by the registry from its files (engine/model_registry.py), and whether it is loaded. Picking a model
that is not the current one switches the server to it (engine/serving/model_pool.py): it loads, with a progress
bar over the header, the previous models unloading first when memory would not hold them beside it. That changes
what every session's embedded chat uses, so once credentials are set it takes an admin key (typed beside the
picker; checked as the API checks `--admin-keys`). Picking an adapter points this session at the embedded engine
under that model name (`AdapterBackend`: the chat's requests then carry `model` = the adapter id); picking the
current model goes back to the plain embedded backend. A session on a remote backend (Backend tab) keeps it: the
picker is for the embedded engine. On the A/B tab, B's model makes side B's request name an adapter or another
loaded model while A keeps the header's model: both are sent together, each to its model's engine.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground.backend import LocalBackend
from playground.capabilities import header_html
from playground.i18n import say

SAME = "(same as A)"
MEDIA = ("image", "video", "audio")


class AdapterBackend(LocalBackend):
    """The embedded engine, its requests sent for one LoRA adapter (`model` = the adapter id)."""

    def __init__(self, policy: Any, adapter: str) -> None:
        super().__init__(policy=policy)
        self.adapter = adapter

    @property
    def model(self) -> str:  # type: ignore[override]
        return self.adapter if self.service is not None else ""


def human(n: int | None) -> str:
    """135M, 1.2B: a parameter count (or a byte count) as people say it."""
    if not n:
        return "?"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


def model_label(model_id: str, entry: dict[str, Any], modalities: list[str]) -> str:
    """One picker line: id · parameters · architecture · what it takes · whether it is loaded."""
    takes = "+".join(["text", *(m for m in MEDIA if m in modalities)])
    caps = [c for c in ("reasoning", "tools") if entry.get(c)]
    size = f"{human(entry.get('parameters'))} ({entry['size_bytes'] / 1e6:.0f} MB)"
    mark = {"loaded": "●", "loading": "◌"}.get(entry["status"], "○")
    return " · ".join([f"{mark} {model_id}", size, entry["architecture"] or "?", takes, *caps])


def model_choices(policy: Any) -> list[tuple[str, str]]:
    """(label, value) per model the picker offers: every model of the pool with each loaded one's adapters after
    it, or (one model) the served model and its adapters. Empty while nothing is loaded."""
    pool, service = policy.models, policy.get_service()
    if pool is None or not pool.candidates:
        if service is None:
            return []
        return [(n, n) for n in [service.served_name, *getattr(service, "adapters", {})]]
    out = []
    for model_id, c in pool.candidates.items():
        out.append((model_label(model_id, pool.entry(model_id), sorted(c.modalities)), model_id))
        loaded = pool.get(model_id)
        out += [(f"  ↳ {a} (LoRA of {model_id})", a) for a in getattr(loaded, "adapters", {})]
    return out


def b_choices(policy: Any) -> list[tuple[str, str]]:
    """Side B's models: the same as A's, another loaded model, or a loaded model's adapter."""
    pool, current = policy.models, policy.get_service()
    current_name = current.served_name if current is not None else None
    names = [n for _, n in model_choices(policy)]
    if pool is not None and pool.candidates:
        names = [n for n in names if n not in pool.candidates or pool.get(n) is not None]
    return [(SAME, SAME), *((n, n) for n in names if n != current_name)]


def wire_model_picker(demo: gr.Blocks, h: Any, header: Any, model_b: gr.Dropdown, session: gr.State) -> Any:
    """Fill both dropdowns on page load; the header's choice switches the model or sets the session's backend.
    Returns the pick's event, for what follows a switch (the context meter)."""
    policy = h.embedded.policy
    picker, key = header.model, header.admin_key
    pool = policy.models
    needs_key = pool is not None and not pool.admin(None)

    def current_value(sess: Any) -> str | None:
        if isinstance(sess.backend, AdapterBackend):
            return sess.backend.model
        service = policy.get_service()
        return service.served_name if service is not None else None

    def menus(sess: Any) -> tuple[Any, Any]:
        names = model_choices(policy)
        shown = len(names) > 1
        b = b_choices(policy)
        return (gr.update(choices=names, value=current_value(sess), visible=shown),
                gr.update(choices=b, value=SAME, visible=len(b) > 1))  # fmt: skip

    def on_load(sess: Any) -> tuple[Any, Any, Any]:
        picker_update, b_update = menus(sess)
        return picker_update, b_update, gr.update(visible=needs_key and picker_update["visible"])

    demo.load(on_load, session, [picker, model_b, header.admin_box], api_name=False, show_progress="hidden")

    def header_now(sess: Any) -> str:
        label = sess.backend.label() if sess.backend is not None else "backend: embedded engine"
        return header_html(policy.get_service(), label, sess.lang)

    def on_pick(name: str | None, admin_key: str, sess: Any, progress: Any = gr.Progress()) -> tuple[Any, Any, Any]:
        if sess.remote or not name:  # a remote backend chosen on the Backend tab: not ours to replace
            return gr.skip(), gr.skip(), gr.skip()
        service = policy.get_service()
        if pool is not None:
            owner = pool.owner_of(name)
        else:
            owner = service.served_name if service is not None and name in getattr(service, "adapters", {}) else None
        if pool is not None and name in pool.candidates and (service is None or service.served_name != name):
            if not pool.admin(admin_key or None):
                gr.Warning(say(("Switching the model needs an admin key (--admin-keys): type it beside the picker.",
                                "切换模型需要管理员密钥（--admin-keys）：请在选择框旁输入。"), sess.lang))  # fmt: skip
                return (*menus(sess), gr.skip())
            loading = pool.load(name, make_current=True)
            while True:  # the bar over the header follows the load's stages until it is done
                progress(loading.fraction, desc=say(("Loading {name}: {stage}", "正在加载 {name}：{stage}"), sess.lang,
                                                    name=name, stage=loading.stage))  # fmt: skip
                if loading.done.wait(0.1):
                    break
            if loading.error is not None:
                gr.Warning(say(("{name} failed to load; see the server log.", "{name} 加载失败；请查看服务器日志。"),
                               sess.lang, name=name))  # fmt: skip
            sess.backend = None
        elif owner is not None and owner != name:  # a LoRA adapter of a loaded model
            sess.backend = AdapterBackend(policy, name)
        else:
            sess.backend = None
        return (*menus(sess), header_now(sess))

    return picker.select(on_pick, [picker, key, session], [picker, model_b, header.html], api_name=False,
                         show_progress="full")  # fmt: skip
