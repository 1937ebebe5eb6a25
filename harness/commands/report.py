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
import csv
import sys
import time
from pathlib import Path

from harness.arg_types import positive_float, positive_int
from harness.commands import COMMANDS
from harness.commands.sol_options import add_sol_options, sol_settings_from

TRACE_SUFFIXES = (".json", ".json.gz")
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


def _read_d4_detail(path: Path) -> list[dict]:
    from analysis.api import TABLE_LIMIT_BYTES, AnalysisError, InputFileError, open_input_text, shown_path

    rows = []
    try:
        with open_input_text(path, TABLE_LIMIT_BYTES, "a d4_detail.csv") as handle:
            reader = csv.DictReader(handle)
            for line_no, rec in enumerate(reader, start=2):
                if None in rec or None in rec.values():
                    raise AnalysisError(f"{shown_path(path)}: line {line_no}: not the {len(reader.fieldnames)} fields "
                                        "of the header (a cut or edited file)")
                try:
                    rows.append({"group": rec["group"], "module": rec["module"], "kernel": rec["kernel"],
                                 "value_us": float(rec["value_us"]), "layers": float(rec.get("layers") or 0)})
                except (KeyError, ValueError) as exc:
                    raise AnalysisError(f"{shown_path(path)}: line {line_no}: bad D4 row ({exc})") from None
    except InputFileError as exc:
        raise AnalysisError(str(exc)) from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise AnalysisError(f"{shown_path(path)}: unreadable: {exc}") from None
    return rows


def _saved_d4(analysis_dir: Path) -> tuple[float | None, object]:
    """(step ms, saved SolSettings or None) from analysis.json, when present."""
    import msgspec

    from analysis.api import DOCUMENT_LIMIT_BYTES, AnalysisError, InputFileError, SolSettings, read_json, shown_path

    path = analysis_dir / "analysis.json"
    if not path.exists():
        return None, None
    try:
        saved = read_json(path, DOCUMENT_LIMIT_BYTES, "an analysis.json")
        d4 = saved.get("d4", {}) if isinstance(saved, dict) else None
        if not isinstance(d4, dict):
            raise AnalysisError(f"{shown_path(path)}: unreadable: no `d4` object")
        sol = msgspec.convert(d4["sol"], SolSettings) if d4.get("sol") else None
    except InputFileError as exc:
        raise AnalysisError(f"{exc.path}: unreadable: {exc.problem}") from None
    except (ValueError, TypeError, msgspec.ValidationError) as exc:
        raise AnalysisError(f"{shown_path(path)}: unreadable: {exc}") from None
    value = d4.get("step_ms")
    if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)):
        raise AnalysisError(f"{shown_path(path)}: d4.step_ms is {value!r}, not a number")
    return (float(value) if value else None), sol


def _new_out_dir() -> Path:
    base = Path(f"kernel-report-{time.strftime('%Y%m%d-%H%M%S')}")
    out, n = base, 1
    while out.exists():
        n += 1
        out = Path(f"{base}-{n}")
    return out


class _Loaded:
    """What the inputs give: kernel samples, and D4 rows with the step time when analysed."""

    def __init__(self):
        self.samples: list = []
        self.kernel_rows: list = []  # attributed kernel rows (empty when the traces could not be analysed)
        self.sources: list[str] = []
        self.notes: list[str] = []
        self.d4_rows: list[dict] | None = None
        self.step_ms: float | None = None
        self.saved_sol = None
        self.analysis_dir: Path | None = None


def _checked(adir: Path) -> None:
    """The analysis files the report reads are the ones written (harness/recorded_files.py); inside a
    run directory, the run must have its manifest."""
    from analysis.api import KERNEL_TABLES, AnalysisError
    from harness.recorded_files import RecordError, check_as_written

    for name in (*KERNEL_TABLES, "d4_detail.csv", "analysis.json"):
        if (adir / name).exists():
            try:
                check_as_written(adir / name, need_record=True)
            except RecordError as exc:
                raise AnalysisError(str(exc)) from None


def _from_analysis_dir(adir: Path) -> _Loaded:
    from analysis.api import kernel_table_in, read_kernel_rows, samples_from_rows

    _checked(adir)
    got = _Loaded()
    table = kernel_table_in(adir)
    got.kernel_rows = read_kernel_rows(table)
    got.samples = samples_from_rows(got.kernel_rows)
    got.sources = [str(table)]
    if (adir / "d4_detail.csv").exists():
        got.d4_rows = _read_d4_detail(adir / "d4_detail.csv")
    got.step_ms, got.saved_sol = _saved_d4(adir)
    got.analysis_dir = adir
    return got


def _from_run_dir(run_dir: Path) -> _Loaded:
    """A run directory whose analysis/ lacks a kernel table (left out, or never written): its traces
    analysed again as the run analysed them (harness/reanalysis.py), read as an analysis folder."""
    from harness.reanalysis import reanalysed

    with reanalysed(run_dir) as (run, _, adir):
        got = _from_analysis_dir(adir)
    got.analysis_dir, got.sources = None, list(run.traces)
    got.notes.append(f"Analysed again from the run's {len(run.traces)} trace(s) with the options it recorded "
                     f"({run_dir / 'analysis'} has no kernel table).")
    got.notes += [f"Left out {note}" for note in run.notes]
    return got


def _from_traces(paths: list[Path], signature: str) -> _Loaded:
    """Analyse the traces (steps, D4 rows); if no rank can be analysed, every kernel of each file counts."""
    from analysis.api import (AnalysisError, AnalysisOptions, TraceLoadError, analyze, load_trace, samples_from_rows,
                              samples_from_traces)

    got = _Loaded()
    try:
        result = analyze([str(p) for p in paths], signature=signature, options=AnalysisOptions(run="report", jobs=1))
    except AnalysisError as exc:
        got.notes.append(f"The traces could not be analysed into steps ({exc}); every kernel in each file counts, "
                         "its stage from the file name, and there are no D4 rows.")
    else:
        got.kernel_rows = result.kernel_rows
        got.samples = samples_from_rows(result.kernel_rows)
        got.sources = [str(p) for p in paths if str(p) not in {pr.path for pr in result.problems}]
        got.d4_rows = [{"group": r.group, "module": r.module, "kernel": r.kernel, "value_us": r.value_us,
                        "layers": r.layers} for r in result.d4.rows]
        got.step_ms = result.d4.step_ms or None
        got.notes.append(f"Analysed here with the `{signature}` signature: {len(result.step_rows)} steps, "
                         f"stage {result.d4.stage}, step {result.d4.step_ms:.2f} ms (`moe-harness analyze` gives the D4 table).")
        got.notes += [f"Skipped {pr.path or pr.rank}: {pr.message}" for pr in result.problems]
        return got
    loaded = []
    for p in paths:
        try:
            loaded.append(load_trace(str(p)))
            got.sources.append(str(p))
        except TraceLoadError as exc:  # e.g. a .json side file in a trace directory
            got.notes.append(f"Skipped {exc}")
    if not loaded:
        raise AnalysisError("no readable trace among the inputs: " + "; ".join(got.notes))
    got.samples = samples_from_traces(loaded)
    return got


def _load_inputs(paths: list[Path], signature: str) -> _Loaded:
    from analysis.api import KERNEL_TABLE, AnalysisError, kernel_table_in

    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise AnalysisError(f"no such file or directory: {', '.join(missing)}")
    if len(paths) == 1 and paths[0].is_dir():
        for adir in (paths[0], paths[0] / "analysis"):  # an analysis directory, or a run directory
            if kernel_table_in(adir) is not None:
                return _from_analysis_dir(adir)
        from harness.recorded_run import is_run_dir

        if is_run_dir(paths[0]):
            return _from_run_dir(paths[0])
        traces = sorted(p for p in paths[0].rglob("*") if p.name.endswith(TRACE_SUFFIXES) and p.is_file())
        if not traces:
            raise AnalysisError(f"{paths[0]}: neither {KERNEL_TABLE} (or analysis/{KERNEL_TABLE}, or an older "
                                "analysis's kernels_long.csv) nor trace files inside")
        paths = traces
    bad = [str(p) for p in paths if not p.name.endswith(TRACE_SUFFIXES)]
    if bad:
        raise AnalysisError(f"not trace files (.json/.json.gz): {', '.join(bad)}")
    return _from_traces(paths, signature)


def build(args) -> tuple[list, str]:
    from analysis.api import (AnalysisError, ReportInputs, build_report, classify, layer_sol, load_hardware,
                              read_ncu_csv, shown_path, sol_for_d4_rows, top_kernels, what_if_at_sol, what_if_speedup)

    got = _load_inputs([Path(p) for p in args.inputs], args.signature)
    top = top_kernels(got.samples, top_n=args.top)
    settings = sol_settings_from(args, model=args.model, base=got.saved_sol, hardware_alone_ok=True)
    hardware = load_hardware(args.hardware or (settings.hardware if settings else None)) \
        if (args.hardware or settings) else None
    inputs = ReportInputs(title="Kernel report", sources=[shown_path(s) for s in got.sources], top=top,
                          hardware=hardware, step_ms=got.step_ms, ncu_dtype=args.ncu_dtype,
                          notes=[shown_path(n) for n in got.notes], speedup=args.speedup)
    rows = got.d4_rows or []
    layers = {(r["group"], r["module"], r["kernel"]): max(1.0, r["layers"]) for r in rows}
    if rows and settings is not None:
        if got.saved_sol is not None and settings == got.saved_sol:
            inputs.notes.append("SOL deployment as saved by the analysis (analysis.json).")
        inputs.deployment = settings.deployment
        inputs.sol_rows = sol_for_d4_rows(rows, settings.deployment, hardware, model=settings.model)
        inputs.step_sol = layer_sol(settings.model, settings.deployment, hardware)
        if got.step_ms:
            inputs.what_ifs = what_if_at_sol(inputs.sol_rows, got.step_ms,
                                             lambda row: layers.get((row.group, row.module, row.kernel), 1.0))
    if rows and got.step_ms:
        inputs.speedup_what_ifs, skipped = what_if_speedup(
            [(r["group"], r["module"], r["kernel"], r["value_us"], layers[(r["group"], r["module"], r["kernel"])])
             for r in rows], got.step_ms, args.speedup)
        inputs.notes += [f"What-if left out: {s}" for s in skipped]
    if args.ncu:
        if hardware is None:
            raise AnalysisError("--ncu needs --hardware (the roofline's peaks)")
        inputs.ncu = classify(read_ncu_csv(args.ncu), hardware, args.ncu_dtype)
        inputs.sources.append(shown_path(args.ncu))
        if inputs.sol_rows and got.kernel_rows:
            from analysis.api import row_checks

            inputs.sol_checks = row_checks(inputs.sol_rows, got.kernel_rows, inputs.ncu)
    return build_report(inputs), inputs.title


def _analysis_dir_of(inputs: list[str]) -> Path | None:
    """The analysis folder a single input stands for (itself or a run's analysis/), else None."""
    from analysis.api import kernel_table_in

    if len(inputs) == 1 and Path(inputs[0]).is_dir():
        for adir in (Path(inputs[0]), Path(inputs[0]) / "analysis"):
            if kernel_table_in(adir) is not None:
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
    from analysis.api import AnalysisError, write_report
    from harness.output_dir import OutputError
    from harness.recorded_run import RunDirError

    try:
        out = prepare_out(args)
        out.check_names(REPORT_NAMES)  # beside an analysis: never over a user's report, refused before the work
        blocks, title = build(args)
        files = out.write(lambda folder: write_report(blocks, folder, title))
    except (AnalysisError, OutputError, RunDirError) as exc:
        print(f"moe-harness report: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"moe-harness report: {out.path}: {exc}", file=sys.stderr)
        return 2
    for path in files.values():
        print(out.path / path.name)
    return 0
