"""The import graph stays one-way (docs/architecture.md): analysis/ never imports the harness, Ray,
torch or the network, and each analysis stage imports only the stages before it."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["ingest", "attribution", "sol", "tables", "report"]  # in pipeline order
SHARED = {"errors", "io", "rules", "rules_schema", "gc_paused"}  # analysis' own helpers every stage may use
FORBIDDEN_IN_ANALYSIS = {"harness", "ray", "torch", "requests", "urllib", "http", "socket", "aiohttp"}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == "analysis":
                names.update(f"analysis.{a.name}" for a in node.names)
    return names


def test_analysis_imports_no_harness_ray_torch_or_network():
    found = {(str(p.relative_to(ROOT)), name) for p in (ROOT / "analysis").rglob("*.py") for name in _imports(p)
             if name.split(".")[0] in FORBIDDEN_IN_ANALYSIS}
    assert not found, found


def test_each_stage_imports_only_the_stages_before_it():
    backwards = []
    for index, stage in enumerate(STAGES):
        files = list((ROOT / "analysis" / stage).rglob("*.py"))
        assert files, f"analysis/{stage}/ is empty"
        for path in files:
            for name in _imports(path):
                parts = name.split(".")
                if parts[0] != "analysis" or len(parts) < 2 or parts[1] in SHARED:
                    continue
                if parts[1] == "api" or (parts[1] in STAGES and STAGES.index(parts[1]) > index):
                    backwards.append((str(path.relative_to(ROOT)), name))
    assert not backwards, backwards


def test_every_stage_says_what_comes_in_and_what_goes_out():
    for stage in STAGES:
        doc = ast.get_docstring(ast.parse((ROOT / "analysis" / stage / "__init__.py").read_text())) or ""
        assert "In:" in doc and "Out:" in doc, stage


def test_both_engines_implement_the_one_engine_interface():
    from harness.engines.base import Engine
    from harness.engines.embedded.ray_engine import EmbeddedRayEngine
    from harness.engines.sglang import SGLangEngine

    for cls in (EmbeddedRayEngine, SGLangEngine):
        assert issubclass(cls, Engine) and not getattr(cls, "__abstractmethods__", None), cls


def _all_imports(path: Path) -> list[str]:
    """Every module `path` imports, at module level or inside functions, spelled absolutely; a
    `from X import y` also yields X.y (y may be a module)."""
    rel = path.relative_to(ROOT).with_suffix("")
    package = list(rel.parts[:-1])  # the package a relative import starts from
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            names.append(module)
            names.extend(f"{module}.{a.name}" for a in node.names)
    return names



DOORS = ("analysis.api",)  # what the harness asks analysis for, and how it reads and writes files


def _past_the_door(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, module) of each import of analysis/ other than its two doors, at any level of nesting."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names
                      if a.name.startswith("analysis.") and a.name not in DOORS]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "analysis":
            found += [(node.lineno, f"analysis.{a.name}") for a in node.names if f"analysis.{a.name}" not in DOORS]
        elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.startswith("analysis.")
              and node.module not in DOORS):
            found.append((node.lineno, node.module))
    return found


def test_the_harness_reaches_analysis_only_through_analysis_api():
    """harness/ imports analysis.api (what it asks analysis for, and its bounded reads and atomic writes)
    and nothing else of analysis/, so analysis can move its internals without the harness noticing
    (tests and benchmarks may import internals)."""
    past = [f"{path.relative_to(ROOT)}:{line}: imports {name}" for path in sorted((ROOT / "harness").rglob("*.py"))
            for line, name in _past_the_door(path.read_text(), str(path))]
    assert not past, "import these through analysis.api:\n" + "\n".join(past)


# How many names the harness takes from analysis.api: lower it as verbs (kernel_report,
# write_view_files, saved_rows, sol_settings, attribute, combine_rows, calibrate) replace the steps the
# commands still run themselves (issue #36 asks for about 20); never raise it.
DOOR_NAMES_AT_MOST = 21


def _api_tree() -> ast.Module:
    return ast.parse((ROOT / "analysis" / "api.py").read_text())


def _io_names() -> set[str]:
    """The names analysis.api takes from analysis/io (the file helpers, not verbs)."""
    return {a.asname or a.name for node in _api_tree().body if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("analysis.io") for a in node.names}


def _harness_door_names() -> set[str]:
    names = set()
    for path in (ROOT / "harness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "analysis.api":
                names.update(a.name for a in node.names)
    return names


def test_the_door_does_not_grow():
    verbs = _harness_door_names() - _io_names()
    assert len(verbs) <= DOOR_NAMES_AT_MOST, f"{len(verbs)} verbs and types cross analysis.api: {sorted(verbs)}"


def test_the_doors_names_are_visible_to_static_tools():
    """Every name the harness takes from analysis.api is defined or imported in api.py itself (no module
    __getattr__, no importlib): an editor or a static tool follows each one to where it lives. At module
    level api.py imports only analysis/io and the two light types."""
    tree = _api_tree()
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    used = _harness_door_names()
    assert used <= defined | imported, sorted(used - defined - imported)
    assert "__getattr__" not in defined and "importlib" not in (ROOT / "analysis" / "api.py").read_text()
    top_level = {n.module for n in tree.body if isinstance(n, ast.ImportFrom)} - {"__future__"}
    heavy = {m for m in top_level if not m.startswith("analysis.io.")} - {"analysis.analysis_options", "analysis.errors"}
    assert not heavy, heavy


def test_the_door_check_sees_every_spelling():
    source = ("import analysis.api\nfrom analysis import api\nfrom analysis.api import analyze\nimport analysis\n"
              "from analysis.api import read_json\n"
              "def f():\n    from analysis.errors import AnalysisError\n    import analysis.tables.d4\n"
              "    from analysis import tables\n    from . import analysis\n")
    assert [name for _, name in _past_the_door(source)] == ["analysis.errors", "analysis.tables.d4", "analysis.tables"]

# Import cycles allowed for now, each listed by its modules: none (the last, analysis.tables.d4 <->
# comm_table, ended when both began to share analysis/tables/d4_cells.py).
KNOWN_ANALYSIS_CYCLES: list[set[str]] = []


def _module_graph() -> dict[str, set[str]]:
    """harness/ and analysis/ modules -> the modules of theirs they import (module or function level)."""
    files = {}
    for package in ("harness", "analysis"):
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join(parts)] = path
    graph = {}
    for module, path in files.items():
        targets = set()
        for name in _all_imports(path):
            parts = name.split(".")
            while parts and ".".join(parts) not in files:  # harness.x.y -> the module it names, if any
                parts.pop()
            if parts:
                targets.add(".".join(parts))
        targets.discard(module)
        graph[module] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles_in_harness_or_analysis():
    """Modules of harness/ and analysis/ import one another one way only (function-level imports
    count too: they hide a cycle, they do not remove it)."""
    graph = _module_graph()
    cycles = [c for c in _cycles(graph) if set(c) not in KNOWN_ANALYSIS_CYCLES]
    described = ["; ".join(f"{m} -> {', '.join(sorted(graph[m] & set(c)))}" for m in c) for c in cycles]
    assert not cycles, "import cycles:\n" + "\n".join(described)


def _folder(module: str, packages: set[str]) -> str:
    """The folder (package) a module lies in: itself for a package's __init__; the top package's own
    modules (analysis's door and shared helpers, harness's command-wide modules) each stand alone."""
    folder = module if module in packages else module.rsplit(".", 1)[0]
    return module if folder in ("analysis", "harness") else folder


def _folder_graph(top: str) -> dict[str, set[str]]:
    """The folders of one top package (analysis or harness) -> the folders of it their modules import."""
    graph = {m: t for m, t in _module_graph().items() if m.split(".")[0] == top}
    packages = {".".join(p.relative_to(ROOT).parts[:-1]) for p in (ROOT / top).rglob("__init__.py")}
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        here = _folder(module, packages)
        folders.setdefault(here, set()).update(_folder(t, packages) for t in targets if t.split(".")[0] == top)
    for here, targets in folders.items():
        targets.discard(here)
    return folders


@pytest.mark.parametrize("top", ["analysis", "harness"])
def test_no_import_cycles_between_folders(top: str):
    """The folders of analysis/ (attribution <- attribution.namers <- attribution.rank) and of harness/
    (engines -> sglang, never back) import one another one way only: a folder whose modules import
    another's, while that one's import it back, is one design cut in two places."""
    cycles = _cycles(_folder_graph(top))
    assert not cycles, f"folder cycles in {top}/: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_every_engine_kind_has_a_registered_engine():
    """The registry names one Engine class per `engine.kind` a scenario may give."""
    import typing

    from harness.engines.base import Engine
    from harness.engines.registry import ENGINES, engine_class
    from harness.scenario import EmbeddedEngine, SGLangEngine

    kinds = {typing.get_args(cls.model_fields["kind"].annotation)[0] for cls in (EmbeddedEngine, SGLangEngine)}
    assert set(ENGINES) == kinds | {"sglang_pd"}  # sglang_pd: an sglang scenario with engine.disaggregation
    for kind in ENGINES:
        cls = engine_class(kind)
        assert issubclass(cls, Engine) and not getattr(cls, "__abstractmethods__", None), kind


def test_every_runner_goes_through_the_one_stage_driver():
    """The Ray job, the standalone runner and the Ray-free SGLang driver call harness/stages.py's
    run_stages instead of writing the stage order again."""
    for rel in ("harness/run.py", "harness/engines/embedded/standalone.py", "benchmarks/gpu/sglang_real/drive.py"):
        tree = ast.parse((ROOT / rel).read_text())
        imported = any(isinstance(n, ast.ImportFrom) and n.module == "harness.stages"
                       and any(a.name == "run_stages" for a in n.names) for n in ast.walk(tree))
        called = any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "run_stages" for n in ast.walk(tree))
        assert imported and called, rel


def test_the_node_package_knows_no_engine():
    """harness/node/ (processes, files and analysis on each node) imports no engine: an engine's own
    node code (harness/sglang/server_actor.py) builds on it, never the reverse."""
    found = [(str(p.relative_to(ROOT)), name) for p in (ROOT / "harness" / "node").rglob("*.py")
             for name in _all_imports(p) if name.startswith(("harness.sglang", "harness.engines"))]
    assert not found, found
