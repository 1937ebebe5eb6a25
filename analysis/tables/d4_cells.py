"""The cells a D4 table is made of: a row, how per-step samples become one value (the step
statistic, then the rank policy), and how a value is printed. Shared by the table (d4.py) and the
rows kept beside its groups (comm_table.py), so neither imports the other. The step statistics are
data (analysis/data/tables/step_statistics.yaml): a new one is an entry there, not a field here."""
from __future__ import annotations

import statistics
from functools import lru_cache
from pathlib import Path
from typing import Literal

import msgspec

STATISTICS_FILE = Path(__file__).resolve().parent.parent / "data" / "tables" / "step_statistics.yaml"


class StepStatistic(msgspec.Struct, forbid_unknown_fields=True):
    how: Literal["mean", "median", "quantile"]
    q: float | None = None  # quantile's q, in [0, 1]
    column: str | None = None  # the meaning of its <name>_us column; None: only --stat shows it

    def __post_init__(self):
        if (self.how == "quantile") != (self.q is not None) or (self.q is not None and not 0.0 <= self.q <= 1.0):
            raise ValueError("q in [0, 1] goes with how: quantile, and only with it")

    def of(self, values: list[float]) -> float:
        if self.how == "mean":
            return statistics.fmean(values)
        if self.how == "median":
            return statistics.median(values)
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(round(self.q * (len(ordered) - 1))))]


class _StatisticsFile(msgspec.Struct, forbid_unknown_fields=True):
    statistics: dict[str, StepStatistic]


@lru_cache(maxsize=1)
def step_statistics() -> dict[str, StepStatistic]:
    """The statistics file's entries by name, in its order."""
    from analysis.io.data_files import read_yaml_file

    return read_yaml_file(STATISTICS_FILE, _StatisticsFile).statistics


STATS = tuple(step_statistics())
# The statistics kept beside value_us as <name>_us (d4_detail.csv, the export, analysis.json).
COLUMN_STATS = tuple(name for name, s in step_statistics().items() if s.column is not None)


class D4Row(msgspec.Struct):
    group: str
    module: str
    kernel: str
    value_us: float  # per layer, after the step statistic and the rank policy
    exposed_us: float
    layers: float  # layers per step that hold this row
    # Each of COLUMN_STATS in place of the step statistic; written out flat, as <name>_us (flat_stats).
    stats_us: dict[str, float] = {}
    # Speed of light (analysis/sol/estimate.py), filled by analysis.tables.d4_sol when deployment parameters are given.
    sol_us: float | None = None
    sol_pct: float | None = None  # 100 x SOL / value_us: 100 = at the hardware limit
    bound: str | None = None  # compute | memory | network
    sol_term: str | None = None
    # How much the per-layer value moves from step to step (standard deviation over the steps, per rank,
    # then the rank policy): what `compare` calls noise. None: fewer than two steps, or an analysis
    # written before it was recorded.
    step_sd_us: float | None = None


def _stat(values: list[float], how: str) -> float:
    if not values:
        return 0.0
    statistic = step_statistics().get(how)
    if statistic is None:
        raise ValueError(f"unknown statistic {how!r}; choose one of {', '.join(STATS)}")
    return statistic.of(values)


def column_stats(samples: dict[str, list[float]], policy: str) -> dict[str, float]:
    """A row's stats_us: each column statistic over each rank's samples, then the rank policy."""
    return {name: _policy(_per_rank_stat(samples, name), policy) for name in COLUMN_STATS}


def same_stats(value_us: float) -> dict[str, float]:
    """stats_us of a row that has one value, not per-step samples (MTP's per-iteration rows)."""
    return dict.fromkeys(COLUMN_STATS, value_us)


def flat_stats(data):
    """Builtins (msgspec.to_builtins of a D4 column or what holds one) with each row's stats_us
    written as <name>_us keys after exposed_us: analysis.json's form, the same bytes as before the
    statistics were data."""
    if isinstance(data, list):
        return [flat_stats(item) for item in data]
    if not isinstance(data, dict):
        return data
    out = {}
    for key, value in data.items():
        if key == "stats_us" and isinstance(value, dict) and "exposed_us" in data:
            continue
        out[key] = flat_stats(value)
        if key == "exposed_us" and isinstance(data.get("stats_us"), dict):
            out.update({f"{name}_us": data["stats_us"].get(name) for name in COLUMN_STATS})
    return out


def nested_stats(data):
    """flat_stats undone, for a saved analysis (whatever statistics it was written with): a row's
    <name>_us keys of the statistics file's column statistics gathered into stats_us."""
    if isinstance(data, list):
        return [nested_stats(item) for item in data]
    if not isinstance(data, dict):
        return data
    out = {key: nested_stats(value) for key, value in data.items()}
    if "value_us" in out and "exposed_us" in out and "stats_us" not in out:
        out["stats_us"] = {name: out.pop(f"{name}_us") for name in COLUMN_STATS
                           if isinstance(out.get(f"{name}_us"), (int, float))}
    return out


def _policy(per_rank: dict[str, float], policy: str) -> float:
    if not per_rank:
        return 0.0
    if policy == "mean":
        return statistics.fmean(per_rank.values())
    if policy == "max":
        return max(per_rank.values())
    if policy.startswith("rank:"):
        label = policy[5:]
        if label not in per_rank:
            raise ValueError(f"rank policy names rank {label!r}, which is not among {sorted(per_rank)}")
        return per_rank[label]
    raise ValueError(f"unknown rank policy {policy!r}: use mean, max or rank:LABEL")


def _per_rank_stat(samples: dict[str, list[float]], stat: str) -> dict[str, float]:
    return {rank: _stat(vals, stat) for rank, vals in samples.items() if vals}


def _spread(samples: dict[str, list[float]], policy: str) -> float | None:
    """Each rank's sample standard deviation over its steps, then the rank policy (the max policy
    takes the largest spread); None where no rank has two steps, or the named rank has fewer."""
    per_rank = {rank: statistics.stdev(vals) for rank, vals in samples.items() if len(vals) >= 2}
    if not per_rank or (policy.startswith("rank:") and policy[5:] not in per_rank):
        return None
    return _policy(per_rank, policy)


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return ""
    return f"{value:.2f}{unit}" if unit else f"{value:.1f}"


def values_by_module(columns: list, rows_of) -> list[tuple[str, str, list[str]]]:
    """(module, kernel, one formatted value per column) for rows kept beside the groups (MTP, the
    wait / transfer split): every (module, kernel) any column has, in first-seen order."""
    keys = dict.fromkeys((r.module, r.kernel) for c in columns for r in rows_of(c))
    lookup = []
    for c in columns:
        first: dict[tuple[str, str], D4Row] = {}
        for r in rows_of(c):
            first.setdefault((r.module, r.kernel), r)
        lookup.append(first)
    return [(module, kernel, [_fmt(look[(module, kernel)].value_us) if (module, kernel) in look else ""
                              for look in lookup]) for module, kernel in keys]
