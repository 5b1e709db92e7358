"""Import direction of ARCHITECTURE.md, checked on the source: cheap, and it keeps the layers honest."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", sources("engine/core"), ids=str)
def test_core_knows_nothing_of_http_ui_or_protocol(path: Path) -> None:
    bad = {m for m in imports(path) if m.split(".")[0] in {"fastapi", "starlette", "gradio", "pydantic", "playground"}
           or m.startswith(("engine.openai", "engine.parsers"))}  # fmt: skip
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize("path", sources("playground"), ids=str)
def test_playground_uses_only_the_service_and_protocol(path: Path) -> None:
    bad = {m for m in imports(path) if m.startswith("engine.") and not m.startswith(("engine.openai",))
           or m.split(".")[0] in {"torch", "transformers"}}  # fmt: skip
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize("path", [p for p in sorted(ROOT.rglob("*.py")) if ".venv" not in p.parts], ids=str)
def test_device_apis_only_in_device_module(path: Path) -> None:
    if path.name == "device.py" or "tests" in path.relative_to(ROOT).parts:
        return
    text = path.read_text()
    for needle in ("torch.cuda", "torch_npu", "torch.npu", "torch.mps"):
        assert needle not in text, f"{path.relative_to(ROOT)} uses {needle}"


@pytest.mark.parametrize("path", sources("engine/parsers"), ids=str)
def test_parsers_import_only_the_standard_library(path: Path) -> None:
    tree = ast.parse(path.read_text())
    relative = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
    assert not relative, f"{path.relative_to(ROOT)} uses relative imports {relative}"
    bad = {m for m in imports(path) if not m.startswith("engine.parsers")
           and m.split(".")[0] not in sys.stdlib_module_names | {"__future__"}}  # fmt: skip
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_parsers_package_is_checked() -> None:
    assert len(sources("engine/parsers")) >= 3  # a renamed folder must not turn the check above into no check
