"""The run directory: one new folder per run, files written to a temp name and renamed.

Why: a run is evidence. Two runs never share a folder (a suffix is added when the name is taken),
a half-written file never has its final name, and the manifest, written last, is what says
whether the run finished.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

RUNS_DIR_ENV = "MOE_HARNESS_RUNS_DIR"
RAY_JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray in the environment of a job's driver
MANIFEST = "manifest.json"


def in_ray_job() -> bool:
    return RAY_JOB_ENV in os.environ


def default_runs_root() -> Path:
    """--runs-dir wins (handled by the caller); then $MOE_HARNESS_RUNS_DIR; then ./runs.

    Inside a Ray job the working directory is a temporary copy that Ray deletes, so there the
    fallback is ~/moe-harness/runs on the node that runs the job's driver (the head node).
    """
    env = os.environ.get(RUNS_DIR_ENV)
    if env:
        return Path(env).expanduser().resolve()
    if in_ray_job():
        return (Path.home() / "moe-harness" / "runs").resolve()
    return (Path.cwd() / "runs").resolve()


def create_run_dir(root: Path, scenario_name: str, now: float | None = None) -> Path:
    """A new, empty `<root>/<scenario>-<YYYYmmdd-HHMMSS>[-N]`; never an existing one."""
    root.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    base = f"{scenario_name}-{stamp}"
    for n in range(1, 1000):
        path = root / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir()  # atomic: fails if another run took the name
        except FileExistsError:
            continue
        return path
    raise RuntimeError(f"cannot create a run directory under {root}: 999 runs named {base}")


def write_atomic(path: Path, data) -> Path:
    """A run directory's file (bytes, text, or a function writing into the open binary file), written
    aside, on disk, then moved in (analysis.api.write_atomically)."""
    from analysis.api import write_atomically

    return write_atomically(path, data, durable=True)


def append_lines(path: Path, lines: list[str]) -> None:
    """Append log lines as they arrive, so a crash keeps everything logged before it."""
    if not lines:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(line.rstrip("\n") + "\n" for line in lines))


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    return write_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def sha256_of(path: Path) -> str:
    """A run file's sha256, streamed through the input door (constant memory; a device is refused)."""
    from analysis.api import input_sha256

    return input_sha256(path, None, "a run file")


def file_inventory(run_dir: Path) -> list[dict[str, Any]]:
    """Every file in the run (except the manifest itself) with its size and sha256."""
    files = []
    for path in sorted(run_dir.rglob("*")):
        if not path.is_file() or path.name == MANIFEST or path.name.startswith("."):
            continue
        files.append({"path": str(path.relative_to(run_dir)), "bytes": path.stat().st_size, "sha256": sha256_of(path)})
    return files


def write_manifest(run_dir: Path, manifest: dict[str, Any], mask=None) -> Path:
    """manifest.json with every file's size and sha256; `mask` (a run's Secrets.data) hides secrets by value."""
    manifest = dict(manifest) if mask is None else mask(manifest)
    manifest["files"] = file_inventory(run_dir)
    return write_atomic(run_dir / MANIFEST, json.dumps(manifest, indent=2, sort_keys=False) + "\n")
