"""The header's model picker and the A/B tab's "B's model": the server's models (the bundled ones, always offered:
SmolLM2, Gemma 3 270M and the tiny demo Qwen3; `--models-dir`, a repeated `--model`) and the LoRA adapters of the
loaded ones (`--lora-adapters`). Both are hidden when there is nothing to pick.

Each model is listed with its size, architecture and what it takes (text / image / video / audio, reasoning,
tools), read by the registry from its files (engine/model_registry.py) or, for a bundled model not fetched yet,
from its published facts with the size of its download; and whether it is loaded. The pick is this browser
session's own (`Session.model`): its requests name that model, which the request policy routes to its engine, and
its header, context meter, Tools and Server tabs describe it; no other page changes. Picking a model that is not
loaded loads it (engine/serving/model_pool.py; a bundled one is downloaded and converted first), with a progress
bar over the header, the least recently used models unloading first when memory would not hold them beside it.
Loading is an administrator's action once credentials are set, as on the API: the admin key is typed beside the
picker. A session on a remote backend (Backend tab) keeps it: the picker is for the embedded engine. The pick is
also the page's `/model` endpoint (for gradio_client: `predict(name=..., admin_key=..., api_name="/model")`).
On the A/B tab, B's model makes side B's request name an adapter or another loaded model while A keeps the
header's model: both are sent together, each to its model's engine.
"""

from __future__ import annotations

import time
from typing import Any

import gradio as gr

from playground.page.capabilities import header_html
from playground.page.i18n import say

SAME = "(same as A)"
MEDIA = ("image", "video", "audio")
NEEDS_KEY = (
    "Loading a model needs an admin key (--admin-keys): type it beside the picker.",
    "加载模型需要管理员密钥（--admin-keys）：请在选择框旁输入。",
)
UNKNOWN = ("There is no model {name!r} on this server.", "此服务器上没有模型 {name!r}。")
FAILED = ("{name} failed to load; see the server log.", "{name} 加载失败；请查看服务器日志。")
LOADING = ("Loading {name}: {stage} · {s} s", "正在加载 {name}：{stage} · {s} 秒")


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
    fetch = [f"⇣ {entry['download_bytes'] / 1e6:.0f} MB on first use"] if entry.get("download_bytes") else []
    return " · ".join([f"{mark} {model_id}", size, entry["architecture"] or "?", takes, *caps, *fetch])


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


def b_choices(policy: Any, current: Any) -> list[tuple[str, str]]:
    """Side B's models: the same as A's (`current`, the session's service), another loaded model, or a loaded
    model's adapter."""
    pool = policy.models
    current_name = current.served_name if current is not None else None
    names = [n for _, n in model_choices(policy)]
    if pool is not None and pool.candidates:
        names = [n for n in names if n not in pool.candidates or pool.get(n) is not None]
    return [(SAME, SAME), *((n, n) for n in names if n != current_name)]


def wire_model_picker(demo: gr.Blocks, h: Any, header: Any, model_b: gr.Dropdown, session: gr.State) -> Any:
    """Fill both dropdowns on page load; the header's choice sets the session's model (loading it first when it is
    not loaded). Returns the pick's event, for what follows a switch (the context meter)."""
    policy = h.policy
    picker, key = header.model, header.admin_key
    pool = policy.models
    needs_key = pool is not None and not pool.admin(None)

    def current_value(sess: Any) -> str | None:
        if sess.model:
            return str(sess.model)
        service = policy.get_service()
        return service.served_name if service is not None else None

    def menus(sess: Any) -> tuple[Any, Any]:
        names = model_choices(policy)
        shown = len(names) > 1
        b = b_choices(policy, h.service(sess))
        return (
            gr.update(choices=names, value=current_value(sess), visible=shown),
            gr.update(choices=b, value=SAME, visible=len(b) > 1),
        )

    def on_load(sess: Any) -> tuple[Any, Any, Any]:
        if pool is not None and not sess.model:  # this page talks to the model it opened on, whatever others pick
            sess.model = pool.current
        picker_update, b_update = menus(sess)
        return picker_update, b_update, gr.update(visible=needs_key and picker_update["visible"])

    demo.load(on_load, session, [picker, model_b, header.admin_box], api_name=False, show_progress="hidden")  # type: ignore[arg-type]

    def header_now(sess: Any) -> str:
        label = sess.backend.label() if sess.backend is not None else "backend: embedded engine"
        return header_html(h.service(sess), label, sess.lang)

    def on_pick(
        name: str | None, admin_key: str | None, sess: Any, progress: Any = gr.Progress()
    ) -> tuple[Any, Any, Any]:
        if sess.remote or not name:  # a remote backend chosen on the Backend tab: not ours to replace
            return gr.skip(), gr.skip(), gr.skip()
        name = str(name)
        if name not in {value for _, value in model_choices(policy)}:
            gr.Warning(say(UNKNOWN, sess.lang, name=name[:64]))
            return (*menus(sess), gr.skip())
        if pool is not None and name in pool.candidates and pool.get(name) is None:
            if not pool.admin((admin_key or "").strip() or None):  # the API's rule: an admin key, once keys exist
                gr.Warning(say(NEEDS_KEY, sess.lang))
                return (*menus(sess), gr.skip())
            loading = pool.load(name)  # not made the server's current model: other pages keep theirs
            while True:  # the bar over the header follows the load's stages (download, conversion) until done
                waited = int(time.monotonic() - loading.started)  # a conversion reports no steps of its own
                progress(loading.fraction, desc=say(LOADING, sess.lang, name=name, stage=loading.stage, s=waited))
                if loading.done.wait(0.1):
                    break
            if loading.error is not None:
                gr.Warning(say(FAILED, sess.lang, name=name))
                return (*menus(sess), gr.skip())
        service = policy.get_service()
        served = pool is None and service is not None and name == service.served_name
        sess.model = None if served else name
        return (*menus(sess), header_now(sess))

    outputs = [picker, model_b, header.html]
    # For API clients (gradio_client): the same pick, by name, on a hidden box (the dropdown checks its value
    # against the choices its page was given, which an API session never loaded).
    by_name = gr.Textbox(visible="hidden", elem_id="pg-model-name")
    by_name.submit(on_pick, [by_name, key, session], outputs, api_name="model", show_progress="hidden")
    return picker.select(on_pick, [picker, key, session], outputs, api_name=False, show_progress="full")
