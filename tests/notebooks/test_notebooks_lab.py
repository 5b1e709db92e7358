"""Notebook 02 (the parameter explorer) in a real JupyterLab, driven in Debian's Chromium as a person would use it.

nbclient has no browser side: it never renders a widget and never sends back what a rendered slider reports, so
tests/notebooks/test_notebooks.py cannot see a slider column squeezed to truncated labels, nor the updates a browser sends
while a cell awaits a run (issue 30). Here `jupyter lab` runs from this venv on a free loopback port with a token,
on a temporary copy of the notebook and its own empty Jupyter config, data and runtime folders; the page runs all
cells from the Run menu, then a slider moves by one keyboard step. Screenshots go to $PLAYGROUND_SHOTS.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser_helpers import NEEDS_CHROMIUM, SHOTS, shot
from tests.paths import ROOT

pytestmark = NEEDS_CHROMIUM

ROOT = ROOT
NOTEBOOK = ROOT / "notebooks" / "02_parameter_explorer.ipynb"

# A newcomer's JupyterLab, less what would stop a test: the kernel starts without asking, no news toast.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"autoStartDefaultKernel": True},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}
IDLE_JS = """() => /\\| Idle/.test(document.querySelector('.jp-StatusBar-Widget, #jp-main-statusbar')?.textContent || '')
  && document.querySelector('.jp-Notebook-ExecutionIndicator[data-status="idle"]') !== null"""
# Every code cell has run (a number in its prompt, none running), or one failed.
DONE_JS = """() => {
  const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(e => e.textContent.trim());
  const failed = document.querySelector('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]');
  return prompts.length > 0 && !prompts.some(p => p.includes('*'))
    && (prompts.every(p => /\\[\\d+\\]/.test(p)) || failed !== null);
}"""
# Each slider of the explorer: its label, track and readout, as laid out on the page.
SLIDERS_JS = """() => [...document.querySelectorAll('.widget-slider')].map(s => {
  const box = e => { const r = e ? e.getBoundingClientRect() : null; return r ? [r.width, r.height] : [0, 0]; };
  const label = s.querySelector('.widget-label'), track = s.querySelector('.noUi-target, .slider');
  const readout = s.querySelector('.widget-readout');
  return {label: label ? label.textContent : '', labelFits: label ? label.scrollWidth <= label.clientWidth : false,
          track: box(track), readout: readout ? readout.textContent.trim() : '', readoutBox: box(readout)};
})"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`jupyter lab` from this venv on a copy of the notebook; yields the notebook's URL (token included)."""
    tmp = tmp_path_factory.mktemp("lab")
    work = tmp / "notebooks"
    work.mkdir()
    shutil.copy(NOTEBOOK, work / NOTEBOOK.name)
    port, token = free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PLAYGROUND_NOTEBOOK"))}
    env.update(
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_DATA_DIR=str(tmp / "data"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        JUPYTER_PLATFORM_DIRS="1",
        PYTHONPATH=str(ROOT),  # the copy is not under the repository, whose root its first cell puts on sys.path
        PLAYGROUND_NOTEBOOK_FAST="1",  # short replies
    )
    for name, values in LAB_SETTINGS.items():
        (tmp / "config" / "lab" / "user-settings" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "config" / "lab" / "user-settings" / name).write_text(json.dumps(values))
    jupyter = Path(sys.executable).with_name("jupyter")
    argv = [
        str(jupyter),
        "lab",
        "--ServerApp.open_browser=False",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--port-retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={work}",
    ]
    argv += ["--allow-root"] if os.geteuid() == 0 else []  # a CI container runs as root
    log = (tmp / "lab.log").open("w")
    proc = subprocess.Popen(argv, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp / "lab.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/api/status", params={"token": token}, timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, (tmp / "lab.log").read_text()
            time.sleep(0.5)
        yield f"{base}/lab/tree/{NOTEBOOK.name}?token={token}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp / "lab.log", SHOTS / "lab.log")  # the server's and the kernel's log, beside the shots


def explorer_status(page: Any) -> str:
    """The explorer's own line: which run it is on, and whether it finished."""
    return page.locator(".pg-explorer-runs").first.inner_text().strip()


def test_the_parameter_explorer_runs_all_and_reruns_once_per_slider_move(browser: Any, lab: str) -> None:
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.set_default_timeout(60_000)
    page.goto(lab)
    page.wait_for_selector(".jp-Notebook .jp-CodeCell")
    page.wait_for_function(IDLE_JS, timeout=120_000)  # the kernel started and connected
    page.get_by_role("menuitem", name="Run").click()
    page.locator('li[data-command="runmenu:run-all"]').click()
    try:
        page.wait_for_function(DONE_JS, timeout=240_000, polling=500)
    finally:
        shot(page, "lab-1-run-all", full_page=False)
    text = page.locator(".jp-Notebook").inner_text()
    assert "CancelledError" not in text and "Traceback" not in text, text
    errors = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    assert not [e for e in errors.all_inner_texts() if "Error" in e], errors.all_inner_texts()

    page.locator(".widget-slider").first.scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    shot(page, "lab-2-explorer", full_page=False)
    sliders = page.evaluate(SLIDERS_JS)
    assert len(sliders) == 8, sliders
    for s in sliders:  # every label whole, a track to drag and the value beside it
        assert s["labelFits"] and s["track"][0] >= 120 and s["readout"] and s["readoutBox"][0] >= 30, s
    shown = {s["label"]: s["readout"] for s in sliders}
    assert shown["temperature"] == "1.40" and shown["top_p"] == "0.90", shown  # what set() moved them to

    status = explorer_status(page)
    assert status == "run 2 · done", status  # run() and set(): one run each, no echo started another
    page.locator(".widget-slider", has_text="temperature").locator(".noUi-handle").focus()
    page.keyboard.press("ArrowRight")  # one step, as a person nudges a slider
    page.wait_for_function(
        "() => document.querySelector('.pg-explorer-runs').textContent.includes('run 3 · done')", timeout=60_000
    )
    page.wait_for_timeout(3000)  # no echo of the new value starts another run
    shot(page, "lab-3-after-slider-move", full_page=False)
    assert explorer_status(page) == "run 3 · done", explorer_status(page)
    temperature = page.locator(".widget-slider", has_text="temperature").locator(".widget-readout")
    assert temperature.inner_text().strip() == "1.45"
    page.close()
