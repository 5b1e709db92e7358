"""The page's icons render without an emoji font (issue 30: Debian's Chromium showed every emoji as an empty box):
nothing the page or the notebooks show comes from the emoji planes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.paths import ROOT

ROOT = ROOT
EMOJI = re.compile("[\U0001f000-\U0001faff]")
SOURCES = sorted(p for ext in ("py", "js", "css") for p in (ROOT / "playground").rglob(f"*.{ext}"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_emoji_glyph_in_what_the_page_shows(path: Path) -> None:
    found = [
        (n, m.group())
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for m in EMOJI.finditer(line)
    ]
    assert not found, f"{path.name}: emoji glyphs need an emoji font: {found}"
