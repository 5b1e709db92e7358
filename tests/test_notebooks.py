"""Every notebook in notebooks/ runs top to bottom on a fresh kernel of this venv's python, on the real model.

PLAYGROUND_NOTEBOOK_FAST=1 shrinks replies and grids so the four run in about two minutes on 2 cores (each
kernel loads the model once). The committed notebooks carry no outputs, so their diffs stay readable.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL = "playground-test"
CELL_TIMEOUT_S = 180  # the model-loading cell converts the GGUF on a fresh machine (about a minute on 2 cores)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A kernelspec for sys.executable (whatever `python3` a machine has installed may be another environment)
    and the environment the kernels inherit; yields the folder the notebooks write their exports to."""
    jupyter = tmp_path_factory.mktemp("jupyter")
    spec = jupyter / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    out = tmp_path_factory.mktemp("notebook-out")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(jupyter))
        mp.setenv("JUPYTER_PLATFORM_DIRS", "1")  # jupyter_core warns about its path migration otherwise
        mp.setenv("PLAYGROUND_NOTEBOOK_FAST", "1")
        mp.setenv("PLAYGROUND_NOTEBOOK_OUT", str(out))
        mp.delenv("PLAYGROUND_NOTEBOOK_URL", raising=False)  # always the embedded engine here
        yield out


def code_cells(nb: Any) -> list[Any]:
    return [c for c in nb.cells if c.cell_type == "code"]


def outputs_text(cell: Any) -> str:
    parts = []
    for out in cell.outputs:
        parts.append(out.get("text", ""))
        parts += [str(v) for k, v in out.get("data", {}).items() if k.startswith("text/")]
    return "\n".join(parts)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebooks_carry_no_outputs(path: Path) -> None:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    for cell in code_cells(nb):
        assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: strip outputs before committing"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path: Path, kernel: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name=KERNEL, timeout=CELL_TIMEOUT_S, startup_timeout=60,
                            resources={"metadata": {"path": str(path.parent)}})  # fmt: skip
    started = time.monotonic()
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on the first failing cell
    print(f"{path.name}: {time.monotonic() - started:.1f} s")
    cells = code_cells(nb)
    assert all(c.execution_count for c in cells)
    assert cells[-1].outputs or path.name.startswith("01"), f"{path.name}: the last cell showed nothing"
    if path.name.startswith("01"):
        sdk = outputs_text(cells[-2])
        assert "prompt_tokens" in sdk and "batch_size" in sdk, sdk
    if path.name.startswith("03"):
        assert (kernel / "sweep.csv").read_text().startswith("temperature,top_p,seed,reply,")
