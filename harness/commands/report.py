"""`moe-harness report`: the kernel-level report (top kernels, SOL, what-if, Nsight Compute).

Input is an analysis directory (kernels_long.parquet, or an older analysis's kernels_long.csv;
d4_detail.csv, analysis.json), a run directory (its analysis/ subdirectory; when that lacks a kernel
table, the run's traces analysed again with
the options it recorded, harness/reanalysis.py), or trace files, which are analysed here
(--signature) for steps and D4 rows. Writes kernel_report.md, its PNGs, and a self-contained
kernel_report.html.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.arg_types import positive_float, positive_int
from harness.commands import COMMANDS
from harness.commands.sol_options import add_sol_options, sol_settings_from

REPORT_NAMES = ("kernel_report.md", "kernel_report.html", "kernel_report_files")  # what write_report writes


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help=COMMANDS["report"],
        description="Kernel report from an analysis directory (kernels_long.parquet or an older kernels_long.csv, "
                    "d4_detail.csv, analysis.json), a run "
                    "directory (its analysis/; without a kernel table there, its traces analysed again with the "
                    "options the run recorded), or trace files (analysed here). SOL columns need --hardware, "
                    "--batch-per-rank and --kv-len, unless the analysis saved them (a DeepSeek-V3 scenario run).")
    p.add_argument("inputs", nargs="+", help="an analysis or run directory, or trace files (.json / .json.gz)")
    p.add_argument("--out", default=None,
                   help="output directory (default: the analysis directory, beside its files; for traces a new "
                        "kernel-report-TIME directory); a new or empty folder, see --overwrite")
    p.add_argument("--overwrite", action="store_true",
                   help="the destination may hold this command's own earlier report, which is replaced (never other files)")
    p.add_argument("--top", type=positive_int, default=20, help="kernels per stage (default: 20)")
    p.add_argument("--signature", default="generic",
                   help="signature for analysing trace inputs (default: generic; a run directory is analysed with its own)")
    p.add_argument("--speedup", type=positive_float, default=2.0,
                   help="what-if factor: the step if one D4 row ran this many times faster (default: 2)")
    p.add_argument("--ncu", default=None, metavar="CSV", help="Nsight Compute export (ncu --csv --page raw)")
    p.add_argument("--model", default=None, help="model shapes for SOL (default: the saved analysis's, else deepseek-v3)")
    add_sol_options(p)
    p.add_argument("--ncu-dtype", default="bf16", choices=["fp8", "bf16"], help="compute peak for the roofline (default bf16)")
    p.set_defaults(func=run)


def _new_out_dir() -> Path:
    base = Path(f"kernel-report-{time.strftime('%Y%m%d-%H%M%S')}")
    out, n = base, 1
    while out.exists():
        n += 1
        out = Path(f"{base}-{n}")
    return out


def _checked(reads: list[Path]) -> None:
    """The analysis files the report reads are the ones written (harness/recorded_files.py); inside a
    run directory, the run must have its manifest."""
    from analysis.api import AnalysisError
    from harness.recorded_files import RecordError, check_as_written

    for path in reads:
        try:
            check_as_written(path, need_record=True)
        except RecordError as exc:
            raise AnalysisError(str(exc)) from None


def _from_analysis_dir(adir: Path, reads: list[Path]):
    """An analysis folder's tables, once checked to be the ones written (analysis reads them)."""
    from analysis.api import report_source

    _checked(reads)
    return report_source([adir], "generic")


def _from_run_dir(run_dir: Path):
    """A run directory whose analysis/ lacks a kernel table (left out, or never written): its traces
    analysed again as the run analysed them (harness/reanalysis.py), read as an analysis folder."""
    from analysis.api import report_reads
    from harness.reanalysis import reanalysed

    with reanalysed(run_dir) as (run, _, adir):
        got = _from_analysis_dir(adir, report_reads(adir) or [])
    got.sources = list(run.traces)
    got.notes.append(f"Analysed again from the run's {len(run.traces)} trace(s) with the options it recorded "
                     f"({run_dir / 'analysis'} has no kernel table).")
    got.notes += [f"Left out {note}" for note in run.notes]
    return got


def _load_inputs(paths: list[Path], signature: str):
    """What the report reads (analysis.api.report_source): an analysis or run directory's tables, or
    trace files analysed (a folder of them, or the files given)."""
    from analysis.api import report_reads, report_source

    if len(paths) == 1 and paths[0].is_dir():
        for adir in (paths[0], paths[0] / "analysis"):  # an analysis directory, or a run directory
            reads = report_reads(adir)
            if reads is not None:
                return _from_analysis_dir(adir, reads)
        from harness.recorded_run import is_run_dir

        if is_run_dir(paths[0]):
            return _from_run_dir(paths[0])
    return report_source(paths, signature)


def build(args):
    """The report (analysis.api.kernel_report: its blocks and title, written by .write) from the inputs
    and the options."""
    from analysis.api import ReportOptions, kernel_report

    got = _load_inputs([Path(p) for p in args.inputs], args.signature)
    settings = sol_settings_from(args, model=args.model, base=got.saved_sol, hardware_alone_ok=True)
    return kernel_report(got, ReportOptions(top=args.top, hardware=args.hardware, sol=settings, ncu=args.ncu,
                                            ncu_dtype=args.ncu_dtype, speedup=args.speedup))


def _analysis_dir_of(inputs: list[str]) -> Path | None:
    """The analysis folder a single input stands for (itself or a run's analysis/), else None."""
    from analysis.api import report_reads

    if len(inputs) == 1 and Path(inputs[0]).is_dir():
        for adir in (Path(inputs[0]), Path(inputs[0]) / "analysis"):
            if report_reads(adir) is not None:
                return adir
    return None


def prepare_out(args: argparse.Namespace):
    """The checked destination, before any work: --out, else beside the analysis files, else a new folder."""
    from harness.output_dir import prepare_output

    adir = _analysis_dir_of(args.inputs)
    if args.out is None and adir is not None:  # the report goes beside the analysis's own files
        return prepare_output(adir, "report", args.overwrite, beside=None)
    return prepare_output(Path(args.out) if args.out else _new_out_dir(), "report", args.overwrite)


def run(args: argparse.Namespace) -> int:
    from analysis.api import AnalysisError
    from harness.output_dir import OutputError
    from harness.recorded_run import RunDirError

    try:
        out = prepare_out(args)
        out.check_names(REPORT_NAMES)  # beside an analysis: never over a user's report, refused before the work
        report = build(args)
        files = out.write(report.write)
    except (AnalysisError, OutputError, RunDirError) as exc:
        print(f"moe-harness report: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"moe-harness report: {out.path}: {exc}", file=sys.stderr)
        return 2
    for path in files.values():
        print(out.path / path.name)
    return 0
