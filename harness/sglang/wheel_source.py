"""A supported release's source files, read out of its wheel once and kept in a small cache.

Why: the offline checks (flags, SGLANG_* variables, metric names) read SGLang's own source, but
neither CI nor a laptop has SGLang installed. `pip download --no-deps` fetches the wheel (tens of
MB) once into `$MOE_HARNESS_WHEELS` (default `~/.cache/moe-harness-wheels`), where the release
tables' regeneration (harness/sglang/extract_release.py) reads it too; the files versions.yaml names
are extracted (about 1 MB a release) and later calls read them: `$MOE_HARNESS_CACHE/sglang-src/<version>`
(default `~/.cache/moe-harness`).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from harness.sglang.cli_source import parse_cli_sources
from harness.sglang.flags import FlagError, FlagTable
from harness.sglang.version import SGLangVersion, load_version

COMPLETE = ".complete.json"


def default_cache_root() -> Path:
    base = os.environ.get("MOE_HARNESS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "moe-harness")
    return Path(base)


def wheel_cache_dir() -> Path:
    """Where downloaded SGLang wheels are kept ($MOE_HARNESS_WHEELS, default ~/.cache/moe-harness-wheels)."""
    return Path(os.environ.get("MOE_HARNESS_WHEELS")
                or os.path.join(os.path.expanduser("~"), ".cache", "moe-harness-wheels"))


def release_wheel(row: SGLangVersion) -> Path:
    """The release's wheel in the wheel cache, downloaded first when it is not there."""
    into = wheel_cache_dir()
    found = sorted(into.glob(f"sglang-{row.version}-*.whl"))
    if found:
        return found[0]
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=into, prefix=f".{row.version}-") as tmp:
        wheel = _download_wheel(row, Path(tmp))
        target = into / wheel.name
        wheel.rename(target)  # whole file at once: a reader never sees half a wheel
    return target


def wanted_members(row: SGLangVersion) -> tuple[str, ...]:
    """The wheel paths (files, or folders ending in /) the offline checks read for this release."""
    return (*row.cli_sources, *row.choice_sources, row.environ_source, row.metrics_source)


def _download_wheel(row: SGLangVersion, into: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", row.wheel_python_version, "--platform", row.wheel_platform,
           f"sglang=={row.version}", "-d", str(into)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    found = sorted(into.glob(f"sglang-{row.version}-*.whl"))
    if proc.returncode != 0 or not found:
        raise FlagError(f"could not download sglang=={row.version} to read its source ({' '.join(cmd)}): "
                        f"{proc.stderr.strip()[-800:]}")
    return found[0]


def extract_members(wheel: Path, members: tuple[str, ...], dest: Path) -> list[str]:
    """Copy the named files and folders (`.py` files directly inside) of the wheel into dest."""
    kept = []
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        for member in members:
            if member.endswith("/"):
                picked = [n for n in names if n.startswith(member) and n.endswith(".py") and "/" not in n[len(member):]]
            else:
                picked = [member] if member in names else []
            if not picked:
                raise FlagError(f"{wheel.name} has no {member}: update harness/sglang/versions.yaml for this release")
            for name in picked:
                target = dest / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))
                kept.append(name)
    return kept


def _complete_members(marker: Path) -> list | None:
    """The members a complete cache holds, per its marker; None when the marker is missing or unreadable
    (the cache is then filled again)."""
    from analysis.api import CONFIG_LIMIT_BYTES, read_json
    from analysis.api import AnalysisError

    try:
        data = read_json(marker, CONFIG_LIMIT_BYTES, "a cache marker")
    except AnalysisError:
        return None
    return data.get("members") if isinstance(data, dict) else None


def sglang_source_dir(row: SGLangVersion | None = None, cache_root: Path | None = None) -> Path:
    """The folder holding this release's wanted source files (downloaded and extracted on first use)."""
    row = row or load_version()
    target = (cache_root or default_cache_root()) / "sglang-src" / row.version
    marker = target / COMPLETE
    if _complete_members(marker) == list(wanted_members(row)):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    wheel = release_wheel(row)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{row.version}-") as tmp:
        staged = Path(tmp) / "src"
        files = extract_members(wheel, wanted_members(row), staged)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        (staged / COMPLETE).write_text(json.dumps({"wheel": wheel.name, "sha256": digest,
                                                   "members": list(wanted_members(row)), "files": files}, indent=1))
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)  # whole folder at once: a reader never sees half a cache
    return target


def read_sources(root: Path, members: tuple[str, ...]) -> dict[str, str]:
    """{wheel path: text} for the named files and folders under an extracted source root."""
    out: dict[str, str] = {}
    for member in members:
        if member.endswith("/"):
            for path in sorted((root / member).glob("*.py")):
                out[member + path.name] = path.read_text(encoding="utf-8")
        else:
            out[member] = (root / member).read_text(encoding="utf-8")
    return out


def flag_table(version: str | None = None, cache_root: Path | None = None) -> FlagTable:
    """The release's launch flags, read from its own source (see harness/sglang/cli_source.py)."""
    row = load_version(version)
    root = sglang_source_dir(row, cache_root)
    choices_only = tuple(m for m in row.choice_sources if m not in row.cli_sources)  # each file read once
    return parse_cli_sources(read_sources(root, row.cli_sources), row.version, read_sources(root, choices_only))


def environ_names(version: str | None = None, cache_root: Path | None = None) -> set[str]:
    """SGLANG_* variables the release declares (class attributes in srt/environ.py)."""
    import ast

    row = load_version(version)
    tree = ast.parse((sglang_source_dir(row, cache_root) / row.environ_source).read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name) and t.id.startswith(("SGLANG_", "SGL_"))}
    return names


def metric_names(version: str | None = None, cache_root: Path | None = None) -> set[str]:
    """Prometheus names (`sglang:...`) the release's metrics collector registers."""
    import re

    row = load_version(version)
    text = (sglang_source_dir(row, cache_root) / row.metrics_source).read_text(encoding="utf-8")
    return set(re.findall(r"""name\s*=\s*["'](sglang:[a-z0-9_]+)["']""", text))
