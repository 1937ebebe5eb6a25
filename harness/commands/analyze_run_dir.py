"""`moe-harness analyze RUN_DIR`: a run directory analysed again as its run analysed it.

Why a command of its own: a run directory is what a cluster run gives a user, and its analysis is
fixed by what the run recorded; harness/reanalysis.py runs the engine's own analysis end on the
kept traces, so --out gets the files the run wrote into RUN_DIR/analysis, and the printed table
is the run's table.md (notes included; the problem line names --out's problems.csv).
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from harness.output_dir import OutputError, prepare_output

PREFIX = "moe-harness analyze"


def analyze_run_dir(args, given: list[str]) -> int:
    """args.traces holds a run directory; `given`: the analysis options given (refused: the run's own apply)."""
    from analysis.api import AnalysisError
    from harness.commands.result_printout import print_result
    from harness.reanalysis import reanalyse
    from harness.recorded_run import RunDirError, is_run_dir, read_run_dir

    path = next(p for p in args.traces if is_run_dir(p))
    if len(args.traces) > 1:
        return _fail(f"{path} is a run directory: give it alone (its traces are analysed with the options its run "
                     f"recorded), or give {Path(path) / 'traces'} among the other traces")
    if given:
        return _fail(f"{path} is a run directory, analysed with the options its run recorded; {', '.join(given)} "
                     f"would change that: give {Path(path) / 'traces'} instead to analyse its traces with your options")
    try:
        run = read_run_dir(path)
        out = prepare_output(args.out, "analyze", args.overwrite) if args.out else None
    except (RunDirError, OutputError) as exc:
        return _fail(str(exc))
    for note in run.notes:
        print(f"note: {note}", file=sys.stderr)
    if run.manifest.get("status") != "ok":
        print(f"note: {path}: the run's status is {run.manifest.get('status')!r}, not ok", file=sys.stderr)
    try:
        if out is not None:
            written = out.write(lambda folder: reanalyse(run, folder, f"{Path(args.out) / 'problems.csv'}", args.jobs))
        else:
            with tempfile.TemporaryDirectory(prefix="moe-harness-analyze-") as tmp:
                written = reanalyse(run, Path(tmp), "the warnings below (problems.csv with --out)", args.jobs)
    except (AnalysisError, RunDirError) as exc:
        return _fail(str(exc))
    except (OutputError, OSError) as exc:
        return _fail(f"--out {args.out}: {exc}")
    print_result(written.result, written.table.rstrip("\n"))
    if out is not None:
        print(f"wrote {len(written.files)} files to {args.out}", file=sys.stderr)
    return 0


def _fail(message: str) -> int:
    print(f"{PREFIX}: {message}", file=sys.stderr)
    return 2
