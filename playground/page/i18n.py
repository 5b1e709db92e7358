"""The lookup machinery of the page's two languages, English and Chinese: Gradio picks the browser's language and its
footer Settings switch it; request field names stay as the API spells them in both languages.

Each module owns the words it shows, as (English, Chinese) pairs side by side in that module: a label the browser
translates is registered here with `labels(__name__, {key: (en, zh)})` as the module is imported, and looked up with
`t(key)`; text the server renders goes through `say(pair, lang)`. This module keeps only that machinery and the words
more than one tab shows."""

from __future__ import annotations

import gradio as gr

from playground.client.say import say

LABELS: dict[str, tuple[str, str]] = {}  # every label a module registered: key -> (English, Chinese)
OWNER: dict[str, str] = {}  # key -> the module that registered it


def labels(owner: str, texts: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """Registers `owner`'s (its `__name__`) labels for the browser to translate, and returns them for the module to
    keep as its own. A key belongs to one module: a second module registering it is refused."""
    for key in texts:
        if OWNER.setdefault(key, owner) != owner:
            raise ValueError(f"the label {key!r} is defined by both {OWNER[key]} and {owner}")
    LABELS.update(texts)
    return texts


def catalogue() -> gr.I18n:
    """Gradio's catalogue of every registered label, once the page's modules are imported (playground/page/ui.py)."""
    return gr.I18n(en={k: en for k, (en, _) in LABELS.items()}, zh={k: zh for k, (_, zh) in LABELS.items()})


def lang_of(request: gr.Request | None) -> str:
    """ "zh" for a browser that prefers Chinese (its Accept-Language), else "en": the language of the text the
    server renders (statistics, notes, messages), as Gradio's own labels follow the browser's language."""
    headers = getattr(request, "headers", None) or {}
    first = str(headers.get("accept-language", "")).split(",")[0].strip().lower()
    return "zh" if first.startswith("zh") else "en"


def t(key: str) -> gr.i18n.I18nData:
    """A label translated in the browser."""
    assert key in LABELS, f"no module registered the label {key!r}"
    return gr.i18n.I18nData(key)


def choices(pairs: dict[str, str]) -> list[tuple[gr.i18n.I18nData, str]]:
    """A Radio's or Dropdown's (shown label, value) pairs from {value: key}: the label translated in the browser,
    the value (what handlers and the endpoints see) unchanged."""
    return [(t(key), value) for value, key in pairs.items()]


def preset_name(preset: str, lang: str) -> str:
    """A preset's name as shown in `lang` (server-rendered text such as the A/B side's title)."""
    key = PRESET_KEYS.get(preset)
    return say(LABELS[key], lang) if key else preset


# The words more than one tab shows: "(none)" (the System prompt box, the Backend tab's API key, the template's empty
# system prompt) and the presets' names (the Sampling tab's presets, the A/B tab's B side).
NONE = ("(none)", "（无）")
labels(
    __name__,
    {
        "none_placeholder": NONE,
        "preset_precise": ("Precise (greedy)", "精确（贪心）"),
        "preset_balanced": ("Balanced", "均衡"),
        "preset_creative": ("Creative", "创意"),
    },
)
# A preset's shown name; the value the page and the `/ab` endpoint use stays the English name.
PRESET_KEYS = {"Precise (greedy)": "preset_precise", "Balanced": "preset_balanced", "Creative": "preset_creative"}
