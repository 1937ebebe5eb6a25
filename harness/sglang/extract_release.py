"""What each SGLang release offers the harness, read out of its wheel and kept as data.

`tests/data/sglang_releases/<version>.json` holds, per release: its launch flags (as the offline
check reads them, harness/sglang/cli_source.py), its SGLANG_* variables, the files that read the
variables the harness sets, its HTTP routes, its step labels (`build_step_span_name`) and the file
names of its CUDA-graph capture traces. tests/test_sglang_releases.py holds versions.yaml against
these tables and the tables against the wheels they name.

    python -m harness.sglang.extract_release            # every release of versions.yaml, rewritten
    python -m harness.sglang.extract_release --check    # compare only; exit 1 when a table differs
    python -m harness.sglang.extract_release --add 0.5.24   # a new release: its table, its
                                                        # versions.yaml entry, what changed since the last

Every run asks PyPI (`pip index versions sglang`) whether a release newer than the table exists
and says how to add it. Wheels come from the wheel cache (harness/sglang/wheel_source.py).
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from harness.sglang.cli_source import parse_cli_sources
from harness.sglang.flags import FlagError
from harness.sglang.version import (VERSIONS_PATH, SGLangVersion, VersionError, known_releases, load_table,
                                    load_version, release_key)

REPO_ROOT = Path(__file__).resolve().parents[2]
TABLES_DIR = REPO_ROOT / "tests" / "data" / "sglang_releases"
ROUTE_FILES = ("sglang/srt/entrypoints/http_server.py", "sglang/srt/entrypoints/v1_loads.py",
               "sglang/srt/utils/common.py")
ROUTE_CALLS = {"get", "post", "put", "delete", "api_route", "add_api_route", "Mount"}
CAPTURE_FILES = ("sglang/srt/utils/profile_utils.py", "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py",
                 "sglang/srt/model_executor/cuda_graph_runner.py")
FORWARD_MODE_FILE = "sglang/srt/model_executor/forward_batch_info.py"
STEP_LABEL_FUNCTIONS = ("build_step_span_name", "_build_step_span_name")


def _render(node: ast.JoinedStr) -> str:
    """An f-string as its source template: literal parts as they are, `{expression}` for the rest."""
    return "".join(v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}" for v in node.values)


def _members(zf: zipfile.ZipFile, prefix: str) -> dict[str, str]:
    return {n: zf.read(n).decode("utf-8", errors="replace") for n in zf.namelist()
            if n.startswith(prefix) and n.endswith(".py")}


def harness_variables() -> set[str]:
    """The SGLANG_* variables the harness may set: every release's row, env_defaults.yaml, the plan."""
    text = "".join((VERSIONS_PATH.parent / name).read_text() for name in ("versions.yaml", "env_defaults.yaml", "plan.py"))
    return set(re.findall(r"\bSGLANG_[A-Z0-9_]+", text))


def _step_labels(sources: dict[str, str]) -> dict:
    """Where the step label is built, its templates, the stage names it writes besides mode names."""
    for path in sorted(sources):
        if "def build_step_span_name" not in sources[path] and "def _build_step_span_name" not in sources[path]:
            continue
        for node in ast.walk(ast.parse(sources[path])):
            if isinstance(node, ast.FunctionDef) and node.name in STEP_LABEL_FUNCTIONS:
                templates = sorted({_render(n) for n in ast.walk(node)
                                    if isinstance(n, ast.JoinedStr) and _render(n).startswith(("step[", "{base}"))})
                stages = sorted({n.value.value for n in ast.walk(node) if isinstance(n, ast.Assign)
                                 and any(isinstance(t, ast.Name) and t.id == "stage" for t in n.targets)
                                 and isinstance(n.value, ast.Constant)})
                return {"function": f"{path}:{node.name}", "templates": templates, "stage_names": stages}
    return {"function": None, "templates": [], "stage_names": []}


def _forward_modes(text: str) -> list[str]:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.name == "ForwardMode":
            return [t.id for s in node.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)]
    return []


def _routes(sources: dict[str, str]) -> list[str]:
    routes = set()
    for path in ROUTE_FILES:
        if path not in sources:
            continue
        for node in ast.walk(ast.parse(sources[path])):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str) and node.args[0].value.startswith("/"):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if name in ROUTE_CALLS:
                    routes.add(node.args[0].value)
    return sorted(routes)


def _capture_names(sources: dict[str, str]) -> dict[str, list[str]]:
    """f-string file names ending in .json.gz in the files that export CUDA-graph capture traces."""
    out = {}
    for path in CAPTURE_FILES:
        if path in sources:
            names = sorted({_render(n) for n in ast.walk(ast.parse(sources[path]))
                            if isinstance(n, ast.JoinedStr) and _render(n).endswith(".json.gz")})
            if names:
                out[path] = names
    return out


def _environ(text: str) -> list[str]:
    names = set()
    for node in ast.walk(ast.parse(text)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name) and t.id.startswith(("SGLANG_", "SGL_"))}
    return sorted(names)


def release_table(wheel: Path, row: SGLangVersion) -> dict:
    """The release's table, from its wheel alone (nothing imported or run)."""
    with zipfile.ZipFile(wheel) as zf:
        sources = _members(zf, "sglang/")

    def picked(members):
        out = {}
        for m in members:
            hits = {p: t for p, t in sources.items()
                    if ((p.startswith(m) and "/" not in p[len(m):]) if m.endswith("/") else p == m)}
            if not hits:
                raise FlagError(f"{wheel.name} has no {m}: update harness/sglang/versions.yaml for {row.version}")
            out.update(dict(sorted(hits.items())))
        return out

    cli = picked(row.cli_sources)
    choices = {p: t for p, t in picked(row.choice_sources).items() if p not in cli}
    flags = parse_cli_sources(cli, row.version, choices).flags
    wanted = harness_variables()
    pattern = re.compile(r"\b(" + "|".join(sorted(wanted)) + r")\b")
    readers: dict[str, list[str]] = {}
    for path, text in sorted(sources.items()):
        if path != row.environ_source and any(name in text for name in wanted):
            for name in sorted(set(pattern.findall(text))):
                readers.setdefault(name, []).append(path)
    return {
        "sglang_version": row.version,
        "wheel": wheel.name,
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "flags": {name: {"takes_value": s.takes_value, "multiple": s.multiple,
                         "choices": sorted(s.choices) if s.choices is not None else None,
                         "deprecated": s.deprecated}
                  for name, s in sorted(flags.items())},
        "environ": _environ(sources[row.environ_source]),
        "readers_of_harness_variables": dict(sorted(readers.items())),
        "routes": _routes(sources),
        "step_labels": _step_labels(sources) | {"forward_modes": _forward_modes(sources.get(FORWARD_MODE_FILE, ""))},
        "capture_trace_names": _capture_names(sources),
    }


def dumps(table: dict) -> str:
    """One flag per line, so a review of a new release reads flag by flag."""
    lines = ["{"]
    items = list(table.items())
    for i, (key, value) in enumerate(items):
        end = "," if i < len(items) - 1 else ""
        if key == "flags":
            inner = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in value.items())
            lines.append(f' "flags": {{\n{inner}\n }}{end}')
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value, sort_keys=True)}{end}")
    return "\n".join(lines) + "\n}\n"


def table_path(version: str, tables_dir: Path = TABLES_DIR) -> Path:
    return tables_dir / f"{version}.json"


def changes(old: dict, new: dict) -> list[str]:
    """What differs between two releases' tables, one line per fact (for the review of a new release)."""
    out = []
    of, nf = old["flags"], new["flags"]
    out += [f"flag added: {f}" for f in sorted(set(nf) - set(of))]
    out += [f"flag removed: {f}" for f in sorted(set(of) - set(nf))]
    out += [f"flag now deprecated: {f}" for f in sorted(set(of) & set(nf))
            if nf[f]["deprecated"] and not of[f]["deprecated"]]
    out += [f"flag changed: {f}: {of[f]} -> {nf[f]}" for f in sorted(set(of) & set(nf))
            if {k: v for k, v in of[f].items() if k != "choices"} != {k: v for k, v in nf[f].items() if k != "choices"}
            and not (nf[f]["deprecated"] and not of[f]["deprecated"])]
    for f in sorted(set(of) & set(nf)):
        before, after = of[f]["choices"], nf[f]["choices"]
        if before is not None and after is not None and set(before) != set(after):
            out.append(f"flag choices changed: {f}: added {sorted(set(after) - set(before))}, "
                       f"removed {sorted(set(before) - set(after))}")
        elif (before is None) != (after is None):
            out.append(f"flag choices changed: {f}: {before} -> {after}")
    for key in ("environ", "routes"):
        out += [f"{key} added: {x}" for x in sorted(set(new[key]) - set(old[key]))]
        out += [f"{key} removed: {x}" for x in sorted(set(old[key]) - set(new[key]))]
    for key in ("readers_of_harness_variables", "step_labels", "capture_trace_names"):
        if old[key] != new[key]:
            out.append(f"{key}: {json.dumps(old[key], sort_keys=True)} -> {json.dumps(new[key], sort_keys=True)}")
    return out


def pypi_releases() -> list[str]:
    """The SGLang releases PyPI lists (pip index versions), or [] when it cannot be asked."""
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "sglang"], capture_output=True,
                              text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return []
    match = re.search(r"Available versions:\s*(.+)", proc.stdout)
    return [v.strip() for v in match.group(1).split(",")] if match else []


def newer_than_table(available: list[str], known: list[str]) -> list[str]:
    """Releases in `available` newer than the newest known one, oldest first (names that are not
    release names, e.g. dev builds, are left out)."""
    newest = release_key(known[-1])
    newer = []
    for v in available:
        try:
            if release_key(v) > newest:
                newer.append(v)
        except VersionError:
            continue
    return sorted(newer, key=release_key)


def add_release_entry(version: str, path: Path = VERSIONS_PATH) -> None:
    """Append `"<version>": {}` to versions.yaml's releases (the last block of the file)."""
    text = path.read_text()
    if not text.rstrip().splitlines()[-1].startswith("  \""):
        raise VersionError(f"{path}: the releases block is not the last block; add {version} by hand")
    path.write_text(text.rstrip("\n") + f'\n  "{version}": {{}}\n')
    load_table.cache_clear()
    load_version.cache_clear()


def main(argv: list[str] | None = None) -> int:
    from harness.sglang.wheel_source import release_wheel

    p = argparse.ArgumentParser(prog="python -m harness.sglang.extract_release", description=__doc__.split("\n\n")[0])
    p.add_argument("versions", nargs="*", help="releases to extract (default: every release of versions.yaml)")
    p.add_argument("--check", action="store_true", help="compare with the kept tables instead of writing them")
    p.add_argument("--add", metavar="VERSION", help="a release newer than the table: add its entry and table")
    p.add_argument("--tables-dir", default=str(TABLES_DIR), help="where the tables are kept")
    p.add_argument("--offline", action="store_true", help="do not ask PyPI for newer releases")
    args = p.parse_args(argv)
    tables_dir = Path(args.tables_dir)
    status = 0
    try:
        if args.add:
            previous = known_releases()[-1]
            if newer_than_table([args.add], known_releases()) != [args.add]:
                raise VersionError(f"{args.add} is not newer than the newest release in versions.yaml ({previous})")
            add_release_entry(args.add)
            versions = [args.add]
        else:
            versions = args.versions or known_releases()
        for version in versions:
            row = load_version(version)
            table = release_table(release_wheel(row), row)
            path = table_path(version, tables_dir)
            if args.check:
                kept = json.loads(path.read_text()) if path.exists() else None
                if kept != table:
                    status = 1
                    print(f"{path}: differs from {table['wheel']}" + ("" if kept else " (missing)"))
                    for line in (changes(kept, table) if kept else [])[:40]:
                        print(f"  {line}")
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(dumps(table))
            print(f"{path}: {len(table['flags'])} flags, {len(table['environ'])} variables, "
                  f"{len(table['routes'])} routes")
        if args.add:
            from harness.sglang.launch_flags import main as launch_flags_main

            launch_flags_main(["--write"])  # validate's shipped flag table gets the new release too
            old = json.loads(table_path(previous, tables_dir).read_text())
            print(f"\nWhat changed from {previous} to {args.add} (review, then record it under releases "
                  f"\"{args.add}\" in {VERSIONS_PATH.relative_to(REPO_ROOT)} and in docs/sglang.md):")
            for line in changes(old, json.loads(table_path(args.add, tables_dir).read_text())) or ["nothing"]:
                print(f"  {line}")
    except (FlagError, VersionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check and status == 0:
        print(f"{len(versions)} kept table(s) match their wheels")
    if not args.offline:
        available, newest = pypi_releases(), known_releases()[-1]
        if not available:
            print("could not ask PyPI which SGLang releases it has (pip index versions sglang): "
                  "newer releases not checked", file=sys.stderr)
        for version in newer_than_table(available, known_releases()):
            print(f"PyPI has SGLang {version}, newer than harness/sglang/versions.yaml: add it with "
                  f"`python -m harness.sglang.extract_release --add {version}`")
        if available and not newer_than_table(available, known_releases()):
            print(f"PyPI has no SGLang release newer than {newest}")
    return status


if __name__ == "__main__":
    sys.exit(main())
