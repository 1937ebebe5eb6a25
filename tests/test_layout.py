"""The import graph stays one-way (docs/architecture.md): analysis/ never imports the harness, Ray,
torch or the network, and each analysis stage imports only the stages before it."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["ingest", "attribution", "sol", "tables", "report"]  # in pipeline order
SHARED = {"errors", "data_files"}  # analysis' own helpers every stage may use
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


def _past_the_door(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, module) of each import of analysis/ other than analysis.api, at any level of nesting."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names
                      if a.name.startswith("analysis.") and a.name != "analysis.api"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "analysis":
            found += [(node.lineno, f"analysis.{a.name}") for a in node.names if a.name != "api"]
        elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.startswith("analysis.")
              and node.module != "analysis.api"):
            found.append((node.lineno, node.module))
    return found


def test_the_harness_reaches_analysis_only_through_analysis_api():
    """harness/ imports analysis.api and nothing else of analysis/, so analysis can move its
    internals without the harness noticing (tests and benchmarks may import internals)."""
    past = [f"{path.relative_to(ROOT)}:{line}: imports {name}" for path in sorted((ROOT / "harness").rglob("*.py"))
            for line, name in _past_the_door(path.read_text(), str(path))]
    assert not past, "import these through analysis.api:\n" + "\n".join(past)


def test_the_door_check_sees_every_spelling():
    source = ("import analysis.api\nfrom analysis import api\nfrom analysis.api import analyze\nimport analysis\n"
              "def f():\n    from analysis.errors import AnalysisError\n    import analysis.tables.d4\n"
              "    from analysis import tables\n    from . import analysis\n")
    assert [name for _, name in _past_the_door(source)] == ["analysis.errors", "analysis.tables.d4", "analysis.tables"]
