"""Server-rendered text in the session's language, without Gradio: the page's i18n and the client's messages (a
branch's reason, a tool definition's JSON error) both call it."""

from __future__ import annotations


def say(text: tuple[str, str], lang: str, **values: object) -> str:
    """Server-rendered text in the session's language: `text` is its (English, Chinese) pair, kept beside the code
    that renders it; `values` fill its {placeholders}."""
    chosen = text[1] if lang == "zh" else text[0]
    return chosen.format(**values) if values else chosen
