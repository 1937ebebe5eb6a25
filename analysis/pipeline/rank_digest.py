"""What one rank's kernel rows give the tables, made where the rank was attributed, so the tables
combine small results.

Why: the tables after the attribution (the kernel table's encoding, the self-checks, the D4 column's
cells, the stream summary, the collectives, the shared expert's cells) each read every kernel row of
a rank. Each is read from the rank's columns (analysis/attribution/kernel_columns.py) in the process
that attributed it: a worker per rank beside the others when there are several, or this process; the
parent merges the digests in rank order. Each share is exact: the tables built from digests are the
ones built from KernelRows (tests/test_rank_digest.py, tests/test_kernel_columns.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from analysis.attribution.comm_split import RankCollectives, rank_collectives_of_columns
from analysis.attribution.kernel_columns import KernelColumns
from analysis.attribution.overlap import StreamSummary
from analysis.attribution.rows import KernelRow, StepRow
from analysis.io.parquet_writer import RowGroup
from analysis.tables.d4 import StepCells, main_stage, step_cells
from analysis.tables.kernel_table import encode_kernel_columns
from analysis.tables.self_check_parts import RankChecks
from analysis.tables.self_checks import thresholds
from analysis.tables.share_overlap import ShareCells


@dataclass
class RankDigest:
    """One rank's share of the tables (picklable)."""

    rows: int  # how many kernel rows it was made from
    kernel_table: list[RowGroup]  # the rows encoded as the kernel table's row groups
    checks: RankChecks  # for the stage of the rank's own steps (the parent redoes it for another)
    cells: dict[tuple[str, int], StepCells]  # (rank, step) -> its D4 cells, every step
    streams: list[StreamSummary]  # busy and exposed time per stream
    collectives: RankCollectives  # its collectives before the split (comm_split.py)
    share: ShareCells  # its shared expert's layers and what ran beside them (share_overlap.py)


@dataclass
class Digest:
    """Every rank's digest merged in rank order: what combine_rows takes instead of walking the rows."""

    rows: int = 0
    kernel_table: list[RowGroup] = field(default_factory=list)
    checks: dict[str, RankChecks] = field(default_factory=dict)  # rank -> its part
    cells: dict[tuple[str, int], StepCells] = field(default_factory=dict)
    streams: list[StreamSummary] = field(default_factory=list)
    collectives: dict[str, RankCollectives] = field(default_factory=dict)  # rank -> its part
    share: ShareCells = field(default_factory=dict)

    def add(self, label: str, part: RankDigest) -> None:
        """One rank's digest after these ranks."""
        self.merge(Digest(part.rows, part.kernel_table, {label: part.checks}, part.cells, part.streams,
                          {label: part.collectives}, part.share))

    def merge(self, other: Digest) -> None:
        """Another digest's ranks after these (a run's nodes, in node order)."""
        self.rows += other.rows
        self.kernel_table += other.kernel_table
        self.checks.update(other.checks)
        self.cells.update(other.cells)
        self.streams = sorted([*self.streams, *other.streams], key=lambda s: (s.rank, s.stream))
        self.collectives.update(other.collectives)
        self.share.update(other.share)

    def holds(self, kernel_rows: list[KernelRow]) -> bool:
        """Made from as many rows as these (a caller that filtered the rows gets them built again)."""
        return self.rows == len(kernel_rows)


def digest_rank(label: str, columns: KernelColumns, step_rows: list[StepRow], chains: dict[int, list[int]],
                strict: bool, prefer_stage: str | None = None) -> RankDigest:
    """The rank's digest from its columns (analysis/attribution/kernel_columns.py); `chains`: step ->
    its chain, from the attribution."""
    from analysis.tables.column_cells import share_cells_of_columns, step_cells_of_columns, stream_summary_of_columns
    from analysis.tables.self_check_columns import rank_checks_of_columns  # numpy: kernel_columns.py says why

    checks = rank_checks_of_columns(label, step_rows, columns, main_stage(step_rows, prefer_stage), strict,
                                    {(label, step): chain for step, chain in chains.items()}, thresholds())
    cells = step_cells_of_columns(columns)
    return RankDigest(len(columns), encode_kernel_columns(columns), checks,
                      cells if cells is not None else step_cells(columns.rows()), stream_summary_of_columns(columns),
                      rank_collectives_of_columns(label, columns), share_cells_of_columns(columns))
