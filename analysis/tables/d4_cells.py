"""The cells a D4 table is made of: a row, how per-step samples become one value (the step
statistic, then the rank policy), and how a value is printed. Shared by the table (d4.py) and the
rows kept beside its groups (comm_table.py), so neither imports the other."""
from __future__ import annotations

import statistics

import msgspec

STATS = ("mean", "median", "p90")


class D4Row(msgspec.Struct):
    group: str
    module: str
    kernel: str
    value_us: float  # per layer, after the step statistic and the rank policy
    exposed_us: float
    median_us: float
    p90_us: float
    layers: float  # layers per step that hold this row
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
    if how == "mean":
        return statistics.fmean(values)
    if how == "median":
        return statistics.median(values)
    if how == "p90":
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    raise ValueError(f"unknown statistic {how!r}; choose one of {', '.join(STATS)}")


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
