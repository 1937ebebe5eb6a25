"""The kernel report from what it reads: an analysis folder's tables, or trace files analysed here.

Why here and not in the command: reading the kernel table, the D4 rows and the saved SOL settings,
analysing traces, ranking the top kernels, the SOL rows and what-ifs, classing the Nsight Compute
kernels are analysis steps; `moe-harness report` (harness/commands/report.py) only finds its inputs
(an analysis, a run directory, traces), checks that a run's files are the ones it wrote, and writes
the blocks this returns (write_report). The harness reads its inputs through source_from_analysis_dir
or analysis/pipeline/report_inputs.py report_source_from_traces (which analyses them first), then asks kernel_report.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from analysis.attribution.stages import EXTEND
from analysis.errors import AnalysisError, shown_path
from analysis.io.input_files import DOCUMENT_LIMIT_BYTES, TABLE_LIMIT_BYTES, InputFileError, open_input_text, read_json
from analysis.report.kernel_report import ReportInputs, build_report
from analysis.report.top_kernels import samples_from_rows, top_kernels
from analysis.sol.estimate import SolSettings


@dataclass
class ReportSource:
    """What the inputs give: kernel samples, and D4 rows with the step time when analysed."""

    samples: list = field(default_factory=list)
    kernel_rows: list = field(default_factory=list)  # attributed kernel rows (empty when traces could not be analysed)
    sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    d4_rows: list[dict] | None = None
    step_ms: float | None = None
    saved_sol: SolSettings | None = None  # the SOL settings the analysis saved (analysis.json)
    stage: str | None = None  # the D4 table's stage (extend: prefill, which the SOL model does not count)


@dataclass
class ReportOptions:
    top: int = 20  # kernels per stage
    hardware: str | None = None  # --hardware: the roofline's peaks (else the SOL settings')
    sol: SolSettings | None = None  # SOL settings for the D4 rows (from the command line or the analysis)
    ncu: str | None = None  # an Nsight Compute CSV (ncu --csv --page raw)
    ncu_dtype: str = "bf16"
    speedup: float = 2.0  # the what-if factor


def source_from_analysis_dir(adir: Path) -> ReportSource:
    """An analysis folder's kernel table, D4 rows (d4_detail.csv) and step time / SOL settings (analysis.json)."""
    from analysis.tables.kernel_table import kernel_table_in, read_kernel_rows

    got = ReportSource()
    table = kernel_table_in(adir)
    got.kernel_rows = read_kernel_rows(table)
    got.samples = samples_from_rows(got.kernel_rows)
    got.sources = [str(table)]
    if (adir / "d4_detail.csv").exists():
        got.d4_rows = _read_d4_detail(adir / "d4_detail.csv")
    got.step_ms, got.saved_sol, got.stage = _saved_d4(adir)
    return got


@dataclass
class KernelReport:
    """A report made (its blocks and title), written by write into a folder."""
    blocks: list
    title: str

    def write(self, folder: Path) -> dict[str, Path]:
        """kernel_report.md, its PNGs and kernel_report.html in folder; {name: path}."""
        from analysis.report.kernel_report import write_report

        return write_report(self.blocks, folder, self.title)


def kernel_report(got: ReportSource, options: ReportOptions) -> KernelReport:
    """The report's blocks and title: top kernels per stage, SOL rows and what-ifs where the D4 rows
    and SOL settings allow, Nsight Compute kernels classed on the roofline where a CSV is given."""
    from analysis.report.ncu import classify, read_ncu_csv
    from analysis.report.sol_vs_ncu import row_checks
    from analysis.report.whatif import what_if_at_sol, what_if_speedup
    from analysis.sol.estimate import layer_sol, sol_for_d4_rows
    from analysis.sol.hardware import load_hardware

    settings = options.sol
    top = top_kernels(got.samples, top_n=options.top)
    hardware = load_hardware(options.hardware or (settings.hardware if settings else None)) \
        if (options.hardware or settings) else None
    inputs = ReportInputs(title="Kernel report", sources=[shown_path(s) for s in got.sources], top=top,
                          hardware=hardware, step_ms=got.step_ms, ncu_dtype=options.ncu_dtype,
                          notes=[shown_path(n) for n in got.notes], speedup=options.speedup)
    rows = got.d4_rows or []
    layers = {(r["group"], r["module"], r["kernel"]): max(1.0, r["layers"]) for r in rows}
    if rows and settings is not None and got.stage == EXTEND:
        inputs.notes.append("No SOL rows: the SOL model counts a decode step (each request one new token against its "
                            "KV length), and these D4 rows are of prefill (extend) steps, which compute whole prompts.")
    elif rows and settings is not None:
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
             for r in rows], got.step_ms, options.speedup)
        inputs.notes += [f"What-if left out: {s}" for s in skipped]
    if options.ncu:
        if hardware is None:
            raise AnalysisError("--ncu needs --hardware (the roofline's peaks)")
        inputs.ncu = classify(read_ncu_csv(options.ncu), hardware, options.ncu_dtype)
        inputs.sources.append(shown_path(options.ncu))
        if inputs.sol_rows and got.kernel_rows:
            inputs.sol_checks = row_checks(inputs.sol_rows, got.kernel_rows, inputs.ncu)
    return KernelReport(build_report(inputs), inputs.title)


def _read_d4_detail(path: Path) -> list[dict]:
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


def _saved_d4(analysis_dir: Path) -> tuple[float | None, SolSettings | None, str | None]:
    """(step ms, saved SolSettings or None, the table's stage) from analysis.json, when present."""
    path = analysis_dir / "analysis.json"
    if not path.exists():
        return None, None, None
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
    stage = d4.get("stage")
    return (float(value) if value else None), sol, stage if isinstance(stage, str) else None
