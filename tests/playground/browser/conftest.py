"""One headless Chromium for the whole browser package, not one per module.

Launching Playwright's driver and Chromium costs 3-5 s on 2 busy cores, and the 22 modules here each paid it.
The browser lives while this package's tests run and is closed when the package ends (package scope), so the
tests after it that call asyncio.run still run with no Playwright event loop in the main thread (tests/conftest.py
says why it is not one per session). Each module still ends as it did with its own browser: the contexts (pages)
it opened are closed when it ends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="package")
def chromium() -> Iterator[Any]:
    from tests.browser_helpers import launch, sync_api

    # Process-wide, on purpose: Playwright's assertions wait 5 s by default, and on 2 cores shared by the server,
    # the model and Chromium a first event after a page opens has been seen to take longer (CI, stop 42). A page
    # that never shows what is expected still fails, only later. Put back when the package ends.
    sync_api.expect.set_options(timeout=20_000)
    with sync_api.sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()
    sync_api.expect.set_options(timeout=5_000)


@pytest.fixture(scope="module")
def browser(chromium: Any) -> Iterator[Any]:
    """The package's Chromium for one module; what the module opened in it is closed when the module ends."""
    before = set(chromium.contexts)
    yield chromium
    for context in chromium.contexts:
        if context not in before:
            context.close()
