"""What each table costs made from a rank's columns against made from its KernelRows, and that both
give the same result.

Why: #48 moved the tables after the attribution onto the columns the attribution writes
(analysis/attribution/kernel_columns.py); docs/performance.md (seventeenth session) quotes these
figures. One trace is loaded and attributed once (untimed); then each table is made from the columns
and from the rows (KernelColumns.rows(), also timed: what a reader of objects pays), in this process,
CPU seconds, and the results are compared: the kernel table's bytes, the step cells' floats, the stream
summary, the shared-expert cells, the collectives, the self-check part.

Usage: python benchmarks/columns_bench.py TRACE
"""
from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from analysis.attribution.comm_split import rank_collectives, rank_collectives_of_columns  # noqa: E402
from analysis.attribution.overlap import stream_summary  # noqa: E402
from analysis.attribution.rank.attribute import RankOptions, attribute_rank_columns  # noqa: E402
from analysis.attribution.signature import load_signature  # noqa: E402
from analysis.ingest.trace_loader import load_trace  # noqa: E402
from analysis.tables.column_cells import share_cells_of_columns, step_cells_of_columns, stream_summary_of_columns  # noqa: E402
from analysis.tables.d4 import main_stage, step_cells  # noqa: E402
from analysis.io.parquet_writer import encode_row_groups  # noqa: E402
from analysis.tables.kernel_table import COLUMNS, encode_kernel_columns  # noqa: E402
from analysis.tables.self_check_columns import rank_checks_of_columns  # noqa: E402
from analysis.tables.self_checks import thresholds  # noqa: E402
from analysis.tables.share_overlap import share_cells  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from self_check_rows import rank_checks, rows_by_step  # noqa: E402  (the checks' plain loops over rows)


def _timed(make):
    started = time.process_time()
    made = make()
    return made, time.process_time() - started


def _pages(groups) -> list:
    return [[c.pages for c in g.chunks] for g in groups]


def _cells(cells) -> dict:
    return {key: ([(k, v[0], v[1], v[2].bits, v[2].others) for k, v in c.cells.items()], c.outside, c.mtp_us,
                  [(s, [float(x) for x in us]) for s, us in c.source_us.items()]) for key, c in cells.items()}


def main(trace: str) -> None:
    gc.disable()
    options = RankOptions(release_kernels=True)
    columns, steps = attribute_rank_columns(load_trace(trace), load_signature("generic"), None, options)
    chains = {(columns.rank, step): chain for step, chain in options.chains.items()}
    stage = main_stage(steps)
    rows, rows_s = _timed(columns.rows)
    print(f"{len(columns)} rows; making them KernelRows {rows_s:.3f} CPU-s")
    parts = [
        ("kernel table", lambda: encode_kernel_columns(columns), lambda: list(encode_row_groups(rows, COLUMNS)), _pages),
        ("step cells", lambda: step_cells_of_columns(columns), lambda: step_cells(rows), _cells),
        ("stream summary", lambda: stream_summary_of_columns(columns), lambda: stream_summary(rows), repr),
        ("shared-expert cells", lambda: share_cells_of_columns(columns), lambda: share_cells(rows), repr),
        ("collectives", lambda: rank_collectives_of_columns(columns.rank, columns),
         lambda: rank_collectives(columns.rank, rows), repr),
        ("self-check part", lambda: rank_checks_of_columns(columns.rank, steps, columns, stage, False, chains, thresholds()),
         lambda: rank_checks(columns.rank, steps, rows_by_step(rows), stage, False, chains, thresholds()), repr),
    ]
    print(f"{'table':20s} {'from rows s':>12s} {'from columns s':>15s}  same")
    for name, from_columns, from_rows, seen in parts:
        by_columns, columns_s = _timed(from_columns)
        by_rows, rows_s = _timed(from_rows)
        print(f"{name:20s} {rows_s:12.3f} {columns_s:15.3f}  {seen(by_columns) == seen(by_rows)}")


if __name__ == "__main__":
    main(sys.argv[1])
