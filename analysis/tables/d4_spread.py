"""Per-step spreads for a D4 column saved before they were recorded.

Why: `compare` judges a difference against each run's per-step spread (D4Row.step_sd_us), which
analysis.json holds only since it was added. For an older analysis the spreads are computed again
from its kernels (kernels_long.csv, or the run's traces analysed again) and copied onto the saved
rows, but only onto rows whose value the recomputation reproduces: a spread taken from a different
attribution would judge the saved numbers by someone else's noise.
"""
from __future__ import annotations

import msgspec

from analysis.tables.d4 import D4Column
from analysis.tables.d4_cells import D4Row

REL_TOLERANCE = 1e-3  # a recomputed value this close to the saved one is the same row
ABS_TOLERANCE_US = 0.01


def _same(a: float, b: float, abs_tol: float = ABS_TOLERANCE_US) -> bool:
    return abs(a - b) <= max(abs_tol, REL_TOLERANCE * max(abs(a), abs(b)))


def with_spreads(saved: D4Column, rebuilt: D4Column) -> tuple[D4Column, list[str]]:
    """The saved column with the rebuilt column's spreads, and 'group / module / kernel' of every
    saved row the rebuild does not reproduce (its spread stays unknown)."""
    disagree: list[str] = []

    def merged(saved_rows: list[D4Row], rebuilt_rows: list[D4Row]) -> list[D4Row]:
        lookup = {(r.group, r.module, r.kernel): r for r in rebuilt_rows}
        out = []
        for row in saved_rows:
            twin = lookup.get((row.group, row.module, row.kernel))
            if twin is not None and _same(row.value_us, twin.value_us):
                out.append(msgspec.structs.replace(row, step_sd_us=twin.step_sd_us))
            else:
                disagree.append(f"{row.group} / {row.module} / {row.kernel}")
                out.append(row)
        return out

    step_same = _same(saved.step_ms, rebuilt.step_ms, ABS_TOLERANCE_US / 1000)
    if not step_same:
        disagree.append("end-to-end")
    column = msgspec.structs.replace(
        saved, rows=merged(saved.rows, rebuilt.rows), mtp_rows=merged(saved.mtp_rows, rebuilt.mtp_rows),
        comm_rows=merged(saved.comm_rows, rebuilt.comm_rows), step_sd_ms=rebuilt.step_sd_ms if step_same else None)
    return column, disagree
