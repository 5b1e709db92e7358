"""Issue 31, item 10: the page's import handlers (a saved conversation, a saved grid) opened whatever `.json` path
the client named in its event (Gradio skips its own upload-folder check for an app mounted on FastAPI), so a
stranger read another session's export back into their own page. The page now reads no path from a client: the
browser reads the file it uploaded and sends its text (tests/test_ui_browser*.py import files that way)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LiveServer, serving
from tests.security.gradio_raw import component_types, config, defaults, join
from tests.security.test_page_session_paths import sandbox  # noqa: F401  (the exports' root in a sandbox)

IMPORTERS = ("upload", "restore", "reopen")  # the functions behind the page's imports, old and new
SECRET = "victim-secret-7c31 my bank PIN is 0000"


def victim_files(root: Path) -> dict[str, Path]:
    """Another session's saved conversation (where the page saves them) and a saved grid, both holding SECRET."""
    from playground.client import grid
    from playground.page import export
    from playground.page.conversation import Conversation, Turn

    conv = Conversation([Turn("user", SECRET), Turn("assistant", "noted")])
    folder = root / "llm-playground-exports" / "someone-elses"
    folder.mkdir(parents=True, exist_ok=True)
    saved = Path(export.write(export.dump(export.Snapshot(conv, "", "", "auto", {})), folder))
    table = root / "grid.json"
    table.write_text(grid.Grid([grid.PromptRow([{"role": "user", "content": SECRET}])], [], []).to_json())
    return {"conversation": saved, "grid": table}


@pytest.fixture
def served(settings: Any, service: Any, sandbox: Path) -> Iterator[LiveServer]:  # noqa: F811
    with serving(settings, service) as server:
        yield server


def test_no_import_handler_reads_a_path_the_client_names(served: LiveServer, sandbox: Path) -> None:  # noqa: F811
    from playground.page.ui import page_app

    files = victim_files(sandbox)
    blocks = page_app(served.server.config.app).get_blocks()
    importers = {i: f.fn.__name__ for i, f in blocks.fns.items() if getattr(f.fn, "__name__", "") in IMPORTERS}
    assert importers, "the page has no import handlers"
    with served.client() as http:
        cfg = config(http)
        types = component_types(cfg)
        deps = {d.get("id", i): d for i, d in enumerate(cfg["dependencies"])}
        for index, name in importers.items():
            for path in files.values():
                data = defaults(cfg, index)
                if types.get(deps[index]["inputs"][0]) == "uploadbutton":
                    data[0] = {"path": str(path), "orig_name": path.name, "meta": {"_type": "gradio.FileData"}}
                else:
                    data[0] = str(path)
                done = join(http, index, data, f"attacker-{index}")
                assert SECRET not in json.dumps(done), f"{name} read {path}"


def test_an_attachment_is_read_only_from_gradios_uploads(live: LiveServer, tmp_path: Path) -> None:
    """The same hole in the attachment row: a file input's path, named by the client, was read and sent back to
    the page as a data URL (and on to the model)."""
    import base64
    import uuid

    from gradio.utils import get_upload_folder

    mine = f"{SECRET} {uuid.uuid4().hex}"  # this run's own: a copy found in Gradio's cache is this run's
    secret = tmp_path / f"secret-{uuid.uuid4().hex[:8]}.mp4"  # not an upload: a file of this machine
    secret.write_bytes(mine.encode() * 8)
    encoded = base64.b64encode(secret.read_bytes()).decode()[:40]
    with live.client() as http:
        cfg = config(http)
        for kind in ("video", "audio"):
            index = next(
                d.get("id", i) for i, d in enumerate(cfg["dependencies"]) if d.get("api_name") == f"attach_{kind}"
            )
            data = defaults(cfg, index)
            data[0] = {"path": str(secret), "orig_name": secret.name, "meta": {"_type": "gradio.FileData"}}
            data[1] = "base64"
            done = join(http, index, data, f"attacker-attach-{kind}")
            said = json.dumps(done)
            assert encoded not in said and mine not in said and "gradio_api/file=" not in said, said[:600]
            for copy in Path(get_upload_folder()).rglob(secret.name):
                assert mine.encode() not in copy.read_bytes(), f"Gradio copied the file to {copy}, served there"
