"""Issue 31, item 1: Gradio's session hash is the client's choice, and the page once made it a file path. The page's
download folder was `EXPORTS / session_hash`, removed by the unload handler and written by every save, so
`curl --path-as-is -N --max-time 2 HOST/gradio_api/heartbeat/..` removed the system temp directory, and
`/gradio_api/queue/join` with a hash like `../../dir` removed or wrote any directory. Here the exports' root is
moved into a sandbox (so the old code's damage stays there), and the attacks are sent as raw HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import extra_server
from tests.security.gradio_raw import component_types, config, defaults, find, join, raw_get


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for the system temp directory: the exports' root lies in it, beside a file the server never
    wrote (which must survive every attack)."""
    from playground.page import persist

    root = tmp_path / "tmp"
    (root / "victim").mkdir(parents=True)
    (root / "llm-playground-exports").mkdir()  # as on a host where some session has saved once
    (root / "canary.txt").write_text("still here")
    (root / "victim" / "canary.txt").write_text("still here")
    monkeypatch.setattr(persist, "EXPORTS", root / "llm-playground-exports")
    return root


@pytest.fixture
def page(settings: Any, service: Any, sandbox: Path) -> Iterator[httpx.Client]:
    """A server whose page was built after the exports' root moved into the sandbox."""
    with extra_server(settings, service) as http:
        yield http


def unload_index(cfg: dict[str, Any]) -> int:
    return find(cfg, lambda d: any(t and t[-1] == "unload" for t in d.get("targets", [])), "unload")


def test_a_heartbeat_for_dot_dot_removes_nothing(page: httpx.Client, sandbox: Path) -> None:
    got = raw_get(str(page.base_url), "/gradio_api/heartbeat/..", seconds=2)
    assert b" 200 " in got.split(b"\r\n", 1)[0]  # the route answered: the unload handler ran for session ".."
    page.get("/health")  # the unload runs as a background task after the stream closes: give it a moment
    _wait_settled(page)
    assert (sandbox / "canary.txt").read_text() == "still here"
    assert (sandbox / "victim" / "canary.txt").exists()


def test_an_unload_under_a_traversing_hash_removes_nothing(page: httpx.Client, sandbox: Path) -> None:
    cfg = config(page)
    for hash_ in ("../victim", "../../" + sandbox.name + "/victim", str(sandbox / "victim"), ".."):
        join(page, unload_index(cfg), [], hash_)
    assert (sandbox / "victim" / "canary.txt").read_text() == "still here"
    assert (sandbox / "canary.txt").exists()


def test_a_save_under_a_traversing_hash_writes_only_under_the_exports_root(page: httpx.Client, sandbox: Path) -> None:
    cfg = config(page)
    types = component_types(cfg)
    save = find(cfg, lambda d: any(types.get(o) == "browserstate" for o in d["outputs"]), "save")
    written = sandbox / "written"
    done = join(page, save, defaults(cfg, save), "../written")
    assert done.get("msg") == "process_completed" and done.get("success"), done
    assert not written.exists(), "a client-chosen hash named a folder outside the exports' root"
    files = list((sandbox / "llm-playground-exports").rglob("conversation.json"))
    assert len(files) == 1 and files[0].parent.parent == sandbox / "llm-playground-exports"
    # The session that saved it can still remove its own folder; no other hash reaches it.
    join(page, unload_index(cfg), [], "someone-else")
    assert files[0].exists()
    join(page, unload_index(cfg), [], "../written")
    _wait_settled(page)
    assert not files[0].exists()


def _wait_settled(http: httpx.Client, seconds: float = 1.5) -> None:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        http.get("/health")
        time.sleep(0.1)
