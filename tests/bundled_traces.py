"""The real traces this repository carries under tests/data, one list for every tool that walks them all.

Why one module: benchmarks/same_outputs.py analyses each file, the reference outputs
(tests/reference_outputs.py) analyse each run's ranks together; both must see the same traces, so
adding a trace to tests/data reaches both.
"""
from __future__ import annotations

from pathlib import Path

from analysis.ingest.rank_id import run_prefix


def bundled_traces(root: Path) -> list[Path]:
    """Rank traces the repository carries (capture traces are inputs of other traces, left out)."""
    return sorted(p for p in (root / "tests" / "data").rglob("*.trace.json*")
                  if "capture" not in p.name and "sglang_releases" not in p.parts)


def bundled_inputs(root: Path) -> dict[str, list[Path]]:
    """The bundled traces grouped as `moe-harness analyze` is given them: every rank file of one run
    (same folder, same name before `-TP-`) together. Keyed by a stable name under tests/data: the
    folder and the run's name prefix (a file not named by rank stands alone, by its name), or the run
    directory for the traces/ of one (its file names only repeat it, with a timestamp)."""
    data = root / "tests" / "data"
    inputs: dict[str, list[Path]] = {}
    for trace in bundled_traces(root):
        if trace.parent.name == "traces":
            name = trace.parent.parent.relative_to(data)
        else:
            name = trace.parent.relative_to(data) / (run_prefix(str(trace)) or trace.name.split(".trace")[0])
        inputs.setdefault(name.as_posix(), []).append(trace)
    return dict(sorted(inputs.items()))


def bundled_run_dirs(root: Path) -> list[Path]:
    """The run directories the repository carries that `moe-harness analyze RUN_DIR` re-analyses as the
    run did (its nodes' analysis, then their combination): each holds its traces/ beside manifest.json
    (a prefill/decode run: each role's directory)."""
    return sorted(m.parent for m in (root / "tests" / "data").rglob("manifest.json") if (m.parent / "traces").is_dir())
