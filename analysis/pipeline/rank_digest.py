"""What a rank's worker process makes of its own rows, so the parent combines small results.

Why: with several ranks, each rank is loaded and attributed in a worker process, one per core; the
tables after that (the kernel table's encoding, the self-checks, the D4 column's cells, the stream
summary) walked every rank's rows again in the parent, on one core, after the workers: about 2 s of
4.4 for 8 ranks of 100 MB (docs/performance.md). Each of them reads one rank's rows at a time, so the
worker that holds the rows does its rank's share beside the other workers, and the parent merges the
digests in rank order. Each share is exact: the tables built from digests are the ones built from
the rows (tests/test_rank_digest.py). A one-rank analysis makes none and builds from its rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from analysis.attribution.comm_split import RankCollectives, rank_collectives
from analysis.attribution.overlap import StreamSummary, stream_summary
from analysis.attribution.rows import KernelRow, StepRow
from analysis.tables.d4 import StepCells, main_stage, step_cells
from analysis.tables.kernel_table import encode_kernel_table
from analysis.io.parquet_writer import RowGroup
from analysis.tables.self_check_parts import RankChecks, rank_checks, rows_by_step
from analysis.tables.self_checks import thresholds
from analysis.tables.share_overlap import ShareCells, share_cells


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
        self.rows += part.rows
        self.kernel_table += part.kernel_table
        self.checks[label] = part.checks
        self.cells.update(part.cells)
        self.streams = sorted([*self.streams, *part.streams], key=lambda s: (s.rank, s.stream))
        self.collectives[label] = part.collectives
        self.share.update(part.share)

    def holds(self, kernel_rows: list[KernelRow]) -> bool:
        """Made from as many rows as these (a caller that filtered the rows gets them built again)."""
        return self.rows == len(kernel_rows)


def digest_rank(label: str, kernel_rows: list[KernelRow], step_rows: list[StepRow],
                chains: dict[int, list[int]], strict: bool, prefer_stage: str | None = None) -> RankDigest:
    """The rank's digest; `chains`: step -> its chain, from the attribution."""
    checks = rank_checks(label, step_rows, rows_by_step(kernel_rows), main_stage(step_rows, prefer_stage), strict,
                         {(label, step): chain for step, chain in chains.items()}, thresholds())
    return RankDigest(len(kernel_rows), encode_kernel_table(kernel_rows), checks, step_cells(kernel_rows),
                      stream_summary(kernel_rows), rank_collectives(label, kernel_rows), share_cells(kernel_rows))
