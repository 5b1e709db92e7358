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
    bad = {
        m
        for m in imports(path)
        if m.split(".")[0] in {"fastapi", "starlette", "gradio", "pydantic", "playground"}
        or m.startswith(("engine.protocol", "engine.serving", "engine.http", "engine.parsers"))
    }
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


# Settings (engine/config.py) is the parsed whole that the composition root holds (app.py, engine/cli.py and the
# service builders below); a layer takes its part (EngineSettings, ServingSettings, HttpSettings, PageSettings) or the
# values it needs, never the whole: no import of `Settings`, no `cfg.Settings` annotation.
WHOLE_SETTINGS_HOLDERS = {"engine/serving/factory.py", "engine/serving/model_catalog.py"}
PART_TAKERS = ["engine/core", "engine/serving", "engine/http", "engine/media", "playground"]


def names_whole_settings(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and any(a.name == "Settings" for a in node.names):
            return True
        if (isinstance(node, ast.Name) and node.id == "Settings") or (
            isinstance(node, ast.Attribute) and node.attr == "Settings"
        ):
            return True
    return False


@pytest.mark.parametrize(
    "path",
    [p for f in PART_TAKERS for p in sources(f) if str(p.relative_to(ROOT)) not in WHOLE_SETTINGS_HOLDERS],
    ids=str,
)
def test_a_layer_takes_only_its_part_of_the_settings(path: Path) -> None:
    assert not names_whole_settings(path), f"{path.relative_to(ROOT)} names the whole Settings, not its part"


def test_the_settings_rule_sees_the_whole() -> None:
    assert names_whole_settings(ROOT / "app.py") and names_whole_settings(ROOT / "engine/serving/factory.py")


# The serving stack's layers, top to bottom: http -> serving -> protocol; none imports a layer above it.
LAYER_BANS = {
    "engine/protocol": (
        "engine.serving",
        "engine.http",
        "engine.core",
        "engine.models",
        "fastapi",
        "starlette",
        "gradio",
        "torch",
        "transformers",
        "playground",
    ),
    "engine/serving": ("engine.http", "fastapi", "starlette", "gradio", "playground"),
    "engine/http": ("gradio", "playground"),
}


@pytest.mark.parametrize("path", [p for folder in LAYER_BANS for p in sources(folder)], ids=str)
def test_serving_layers_import_only_downwards(path: Path) -> None:
    banned = LAYER_BANS[str(path.parent.relative_to(ROOT))]
    bad = {m for m in imports(path) if any(m == b or m.startswith(b + ".") for b in banned)}
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_serving_layers_are_checked() -> None:
    for folder in LAYER_BANS:  # a renamed folder must not turn the check above into no check
        assert len(sources(folder)) >= 5, folder


@pytest.mark.parametrize("path", sources("playground"), ids=str)
def test_playground_uses_only_the_service_and_protocol(path: Path) -> None:
    bad = {
        m
        for m in imports(path)
        if m.startswith("engine.")
        and not m.startswith(("engine.protocol.", "engine.serving."))
        or m.split(".")[0] in {"torch", "transformers", "tests"}
    }
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


# Test concerns stay out of what ships: the app, the engine, the page and the demo models never import tests/ (a
# test injects what it needs instead, e.g. the address check of engine/media/remote.py), and the engine knows
# nothing of the demo models.
PRODUCT_FOLDERS = ("engine", "playground", "demo_models")


def product_sources() -> list[Path]:
    return [ROOT / "app.py"] + [path for folder in PRODUCT_FOLDERS for path in sources(folder)]


@pytest.mark.parametrize("path", product_sources(), ids=str)
def test_product_code_never_imports_tests(path: Path) -> None:
    found = imports(path)
    bad = {m for m in found if m.split(".")[0] == "tests"}
    if path.is_relative_to(ROOT / "engine"):
        bad |= {m for m in found if m.split(".")[0] == "demo_models"}
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_product_code_is_checked() -> None:
    assert (ROOT / "app.py").is_file()
    for folder in PRODUCT_FOLDERS:  # a renamed folder must not turn the check above into no check
        assert len(sources(folder)) >= 3, folder


# Outside engine/, the product reaches the engine only through serving's public API (engine/serving/operations.py for
# the operator's actions): an attribute chain such as `get_service().engine` or `service.engine.step_log` is
# invisible to the import rules above, so any `.engine` attribute is refused here. bench/ and tests/ measure and test
# the core itself and may reach it.
def engine_attributes(tree: ast.AST) -> list[int]:
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "engine"]


@pytest.mark.parametrize("path", [p for p in product_sources() if not p.is_relative_to(ROOT / "engine")], ids=str)
def test_only_the_engine_reaches_behind_a_service(path: Path) -> None:
    lines = engine_attributes(ast.parse(path.read_text()))
    assert not lines, f"{path.relative_to(ROOT)} reaches `.engine` on lines {lines}: use engine/serving's API"


# A secret is compared in one place (constant time over every configured value): the keys by engine/serving/rights.py,
# which the API, the page and the pool all ask, and AK/SK signatures by engine/http/aksk.py. A second copy of the
# comparison (the page's admin check once was one) drifts from the first.
COMPARES_SECRETS = {"engine/serving/rights.py", "engine/http/aksk.py"}


@pytest.mark.parametrize("path", product_sources(), ids=str)
def test_secrets_are_compared_only_by_the_rights_module(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    if rel not in COMPARES_SECRETS:
        assert "compare_digest" not in path.read_text(), f"{rel} compares secrets itself: use engine/serving/rights.py"


# app.py only wires (flags, settings, the pool, the API and the page, the process-wide switches): what it wires lives
# in modules of their own (engine/serving/factory.py, model_catalog.py, engine/http/server_lifecycle.py, ...), so it
# defines no class and stays short enough to read at once.
def test_the_composition_root_only_wires() -> None:
    source = (ROOT / "app.py").read_text()
    classes = [n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)]
    assert not classes, f"app.py defines {classes}: a class belongs in the layer it serves"
    assert len(source.splitlines()) <= 200, "app.py grew past 200 lines: move what is not wiring out of it"


# engine/device.py is the one module that imports a device library and knows which backends exist; the NPU's ops
# table (engine/core/npu_ops.py) is handed torch_npu by it and names its functions, and nothing else does.
BACKEND_OPS = {"engine/core/npu_ops.py": {"torch_npu"}}


@pytest.mark.parametrize("path", [p for p in sorted(ROOT.rglob("*.py")) if ".venv" not in p.parts], ids=str)
def test_device_apis_only_in_device_module(path: Path) -> None:
    rel = path.relative_to(ROOT)
    if rel == Path("engine/device.py") or "tests" in rel.parts:
        return
    text = path.read_text()
    for needle in {"torch.cuda", "torch_npu", "torch.npu", "torch.mps"} - BACKEND_OPS.get(str(rel), set()):
        assert needle not in text, f"{rel} uses {needle}"


@pytest.mark.parametrize("path", sources("engine/parsers"), ids=str)
def test_parsers_import_only_the_standard_library(path: Path) -> None:
    tree = ast.parse(path.read_text())
    relative = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
    assert not relative, f"{path.relative_to(ROOT)} uses relative imports {relative}"
    bad = {
        m
        for m in imports(path)
        if not m.startswith("engine.parsers") and m.split(".")[0] not in sys.stdlib_module_names | {"__future__"}
    }
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_parsers_package_is_checked() -> None:
    assert len(sources("engine/parsers")) >= 3  # a renamed folder must not turn the check above into no check


# The notebook layer renders only the service's chunks: it reaches the engine through the request parser, the chunk
# models and their fold, the errors and (in-process) the ChatService, never the tokenizer, the chat template or the
# model.
NOTEBOOK_ENGINE_MODULES = {
    "engine.protocol.request",
    "engine.protocol.response",
    "engine.serving.fold",
    "engine.protocol.errors",
    "engine.serving.service",
}
NOT_IN_NOTEBOOKS = ("tokenizer", "apply_chat_template", ".generate(", "render_prompt", "<think>")


def notebook_cells(path: Path) -> str:
    import json

    cells = json.loads(path.read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def notebook_imports(source: str) -> set[str]:
    tree = compile(source, "cell", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", sources("playground/notebooks"), ids=str)
def test_notebook_helpers_use_only_the_service_and_protocol(path: Path) -> None:
    bad = {m for m in imports(path) if m.startswith("engine") and m not in NOTEBOOK_ENGINE_MODULES}
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"
    text = path.read_text()
    assert not [n for n in NOT_IN_NOTEBOOKS if n in text], f"{path.relative_to(ROOT)} works around the service"


# The tiny trained Qwen3 of demo_models/ is the one model here that thinks and calls tools on CPU: a notebook builds
# it where the reader sees that it is a demo model. Nothing a notebook runs comes from tests/.
@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_cells_stay_thin(path: Path) -> None:
    source = notebook_cells(path)
    allowed = {"playground", "app", "demo_models", "os", "sys", "pathlib", "json", "openai", "IPython"}
    found = notebook_imports(source)
    assert not {m for m in found if m.split(".")[0] == "tests"}, f"{path.name} imports the tests"
    bad = {m for m in found if m.split(".")[0] not in allowed or m.startswith("playground.page")}
    assert not bad, f"{path.name} imports {bad}: logic belongs in playground/notebooks"
    assert not [n for n in NOT_IN_NOTEBOOKS if n in source], f"{path.name} works around the service"
    tree = compile(source, "cell", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    assert not engine_attributes(tree), f"{path.name} reaches `.engine` behind the service"


# playground/ by role: client/ is what the page, the notebooks, MCP and bench/ share (no Gradio, no ipywidgets, and
# nothing of the rooms above it); page/ is the Gradio page; notebooks/ is the notebooks' layer, on client/ only.
# Module-level, function-level and type-checking imports alike: a late import is still an arrow.
PLAYGROUND_ROOMS = ("playground/client", "playground/page", "playground/page/tabs", "playground/notebooks")


def test_playground_rooms_are_checked() -> None:
    for folder in PLAYGROUND_ROOMS:  # a renamed folder must not turn the checks below into no check
        assert len(sources(folder)) >= 5, folder
    assert len(list((ROOT / "playground/page/static").glob("*.css"))) >= 3  # the page's sheets and scripts


def under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("path", sources("playground/client"), ids=str)
def test_client_imports_no_gradio_ipywidgets_page_or_notebooks(path: Path) -> None:
    bad = {
        m
        for m in imports(path)
        if m.split(".")[0] in {"gradio", "ipywidgets"}
        or under(m, "playground.page")
        or under(m, "playground.notebooks")
    }
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize("path", sources("playground/page"), ids=str)
def test_page_never_imports_the_notebooks(path: Path) -> None:
    bad = {m for m in imports(path) if under(m, "playground.notebooks")}
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize("path", sources("playground/notebooks"), ids=str)
def test_notebooks_import_only_the_client(path: Path) -> None:
    bad = {
        m
        for m in imports(path)
        if under(m, "playground") and not under(m, "playground.client") and not under(m, "playground.notebooks")
    }
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def playground_graph() -> dict[str, set[str]]:
    """Each playground module -> the playground modules it imports (`from playground.client import stats` names the
    module playground.client.stats)."""
    modules = {}
    for path in sources("playground"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set(imports(path))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {f"{node.module}.{a.name}" for a in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif step not in index:
                index[step] = low[step] = len(index)
                stack.append(step)
                work.append((step, iter(sorted(graph[step]))))
            elif step in stack:
                low[node] = min(low[node], index[step])
    return found


def test_circles_are_found() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_playground() -> None:
    graph = playground_graph()
    assert sum(len(edges) for edges in graph.values()) > 100  # the graph is read, not empty
    assert not circles(graph), f"import circles in playground/: {circles(graph)}"
