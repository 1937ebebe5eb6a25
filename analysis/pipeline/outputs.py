"""An analysis written to a folder (write_outputs) and read back (load_column, saved_rows)."""
from __future__ import annotations

import csv
from pathlib import Path

import msgspec

from analysis.attribution.comm_split import CommRow, split_collectives
from analysis.tables.comm_table import with_comm
from analysis.tables.d4 import D4Column, build_column, render_markdown, write_table_csv
from analysis.tables.d4_cells import flat_stats, nested_stats
from analysis.tables.d4_detail import write_detail
from analysis.tables.kernel_table import KERNEL_TABLE, write_kernel_table
from analysis.io.parquet_writer import RowGroup
from analysis.tables.self_checks import CheckRow, verdict_line
from analysis.errors import AnalysisError, shown_path
from analysis.io.atomic_files import write_atomically
from analysis.io.input_files import DOCUMENT_LIMIT_BYTES, read_input
from analysis.attribution.overlap import StreamSummary
from analysis.attribution.rows import KernelRow, RankProblem, StepRow
from analysis.pipeline.combine import Analysis



ANALYSIS_FILE = "analysis.json"


# ---------------------------------------------------------------- writing / reading


def _write_structs(path: Path, rows: list, cls) -> None:
    fields = list(cls.__struct_fields__)

    def write(fh):
        out = csv.writer(fh)
        out.writerow(fields)
        for row in rows:
            out.writerow([getattr(row, f) if getattr(row, f) is not None else "" for f in fields])

    write_atomically(path, write, binary=False)


def write_kernel_table_file(path: Path, rows: list[KernelRow], encoded: list[RowGroup] | None = None) -> None:
    """kernels_long.parquet of these rows (as write_outputs writes it); `encoded`: the same rows
    already encoded (Analysis.digest_of_rows)."""
    write_atomically(Path(path), lambda fh: write_kernel_table(fh, rows, encoded))


def write_outputs(analysis: Analysis, out_dir: str | Path, lang: str = "en") -> dict[str, Path]:
    """d4.md, d4.csv, d4_detail.csv, kernels_long.parquet, steps.csv, streams.csv, problems.csv, comm.csv,
    checks.csv, analysis.json."""
    out = Path(out_dir)
    names = ("d4.md", "d4.csv", "d4_detail.csv", KERNEL_TABLE, "steps.csv", "streams.csv", "problems.csv",
             "comm.csv", "checks.csv", ANALYSIS_FILE)
    files = {name: out / name for name in names}
    _write_structs(files["comm.csv"], analysis.comm_rows, CommRow)
    _write_structs(files["streams.csv"], analysis.streams, StreamSummary)
    digest = analysis.digest_of_rows
    write_kernel_table_file(files[KERNEL_TABLE], analysis.kernel_rows, digest.kernel_table if digest is not None else None)
    _write_structs(files["steps.csv"], analysis.step_rows, StepRow)
    _write_structs(files["problems.csv"], analysis.problems, RankProblem)
    _write_structs(files["checks.csv"], analysis.checks, CheckRow)
    write_table_csv(files["d4.csv"], [analysis.d4], lang)
    write_atomically(files["d4.md"], lambda fh: fh.write(render_markdown([analysis.d4], lang)), binary=False)

    write_atomically(files["d4_detail.csv"], lambda fh: write_detail(fh, analysis.d4), binary=False)
    summary = {"run": analysis.run, "signature": analysis.signature, "model": analysis.model, "d4": analysis.d4,
               "problems": analysis.problems, "steps": len(analysis.step_rows),
               "checks": {"verdict": verdict_line(analysis.checks), "failed": [c.check for c in analysis.failed_checks],
                          "rows": analysis.checks}}
    text = msgspec.json.format(msgspec.json.encode(flat_stats(msgspec.to_builtins(summary))).decode(), indent=2)
    write_atomically(files[ANALYSIS_FILE], lambda fh: fh.write(text), binary=False)
    return files


class _Saved(msgspec.Struct):
    run: str
    signature: str
    model: str | None
    d4: D4Column


def load_column(analysis_dir: str | Path) -> D4Column:
    """The D4 column saved by write_outputs, for `compare`."""
    path = Path(analysis_dir) / ANALYSIS_FILE
    if not path.exists():
        raise AnalysisError(f"{shown_path(analysis_dir)}: not an analysis directory (no {ANALYSIS_FILE})")
    try:
        saved = msgspec.json.decode(read_input(path, DOCUMENT_LIMIT_BYTES, "an analysis.json"))
        return msgspec.convert(nested_stats(saved), _Saved).d4
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise AnalysisError(f"{shown_path(path)}: unreadable analysis file: {exc}") from None
    except RecursionError:
        raise AnalysisError(f"{shown_path(path)}: unreadable analysis file: nested too deeply") from None


def saved_rows(analysis_dir: str | Path, like: D4Column) -> tuple[list[KernelRow], list[StepRow], str, D4Column] | None:
    """An analysis folder's kernel and step rows (its kernel table and steps.csv), where it has both:
    (kernel rows, step rows, the table's path, the D4 column built again from them with `like`'s
    statistic and rank policy); None without them."""
    from analysis.tables.kernel_table import kernel_table_in, read_kernel_rows
    from analysis.tables.struct_csv import read_struct_csv

    table, steps_csv = kernel_table_in(analysis_dir), Path(analysis_dir) / "steps.csv"
    if table is None or not steps_csv.is_file():
        return None
    kernel_rows, step_rows = read_kernel_rows(table), read_struct_csv(steps_csv, StepRow)
    return kernel_rows, step_rows, str(table), column_from_rows(kernel_rows, step_rows, like)


def column_from_rows(kernel_rows: list[KernelRow], step_rows: list[StepRow], like: D4Column) -> D4Column:
    """The D4 column (kernel, MTP and wait / transfer rows) built again from saved rows with a saved
    column's statistic and rank policy: what an older analysis needs for its per-step spreads."""
    column = build_column(kernel_rows, step_rows, name=like.name, stat=like.stat, rank_policy=like.rank_policy,
                          accept_length=like.accept_length, prefer_stage=like.stage)
    return with_comm(column, split_collectives(kernel_rows, step_rows), step_rows)
