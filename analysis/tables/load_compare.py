"""The profiled steps' time against what the load measured outside the profile window.

Why: the table describes steps run with the profiler on (with stacks it slows the host), while the
load's TPOT and ITL come from the same server without it. Their difference per token is the
profiler's own cost; when it is large the table describes a perturbed system (the self-check
`profiler_overhead` says so).

Profiled: per rank the start-to-start time of consecutive steps of the table's stage (the step
period: what a token costs, host work between steps included), the statistic over them, then the
rank policy; per token, divided by the tokens a step yields (1; the accept length for a verify
step). Load: every completed request's chunks (analysis/ingest/load_records.py) that arrived before
the profile window opened, each chunk's gap spread over its tokens: the ITL's median over those
tokens and the TPOT (their summed gaps over their tokens). The window's start is the load-clock
time the run recorded when it asked for the profile; else it is located by cadence: the profiled
step periods are found as a run of consecutive chunk gaps in one request (the best fit of
|log(gap / period)|, which must be good enough), and the window is taken to open a few gaps before
that run (load_compare.yaml), where the profiler starts.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import msgspec

from analysis.attribution.rows import StepRow
from analysis.io.data_files import read_yaml_file
from analysis.ingest.load_records import RequestChunks
from analysis.tables.comm_table import used_steps
from analysis.tables.d4_cells import _per_rank_stat, _policy
from analysis.attribution.stages import VERIFY

SETTINGS_FILE = Path(__file__).with_name("load_compare.yaml")
GROUP = "profiled vs load"


class LoadCompare(msgspec.Struct):
    """Profiled step time next to the load's, per token (ms); None where a figure cannot be had."""

    profiled_period_ms: float | None
    tokens_per_step: float | None  # 1 for decode; the accept length for a verify step
    profiled_ms_per_token: float | None
    load_itl_p50_ms: float | None  # before the profile window
    load_tpot_ms: float | None  # before the profile window: summed gaps / tokens
    load_tokens: int  # tokens (of every request) the load figures are over
    window_start_s: float | None  # load clock
    window_from: str  # "recorded" | "cadence" | ""
    fit: float | None  # cadence: mean |log(gap / period)| of the best fit
    overhead_ms: float | None  # profiled per token - load ITL p50
    ratio: float | None  # profiled per token / load ITL p50
    note: str = ""  # why a figure is missing


@lru_cache(maxsize=1)
def settings() -> dict:
    """load_compare.yaml (read_yaml_file: an unreadable file names itself)."""
    return read_yaml_file(SETTINGS_FILE, dict)


def step_periods_us(step_rows: list[StepRow], used: set[tuple[str, int]]) -> dict[str, list[float]]:
    """Per rank, start-to-start times of consecutive used steps (of one stage), in step order."""
    by_rank: dict[str, list[StepRow]] = defaultdict(list)
    for s in step_rows:
        if (s.rank, s.step) in used:
            by_rank[s.rank].append(s)
    out = {}
    for rank, steps in by_rank.items():
        steps.sort(key=lambda s: s.start_us)
        out[rank] = [b.start_us - a.start_us for a, b in zip(steps, steps[1:])]
    return out


def _locate(periods_s: list[float], requests: list[RequestChunks]) -> tuple[float | None, float | None]:
    """(window start on the load clock, fit) by cadence, or (None, best fit) when no run fits well."""
    limits = settings()["cadence"]
    m = len(periods_s)
    if m < limits["min_periods"]:
        return None, None
    logs_p = [math.log(p) for p in periods_s]
    best = (math.inf, None)
    for request in requests:
        arrivals = [request.first_token_s] + [t for t, _ in request.chunks]
        gaps = [max(b - a, 1e-9) for a, b in zip(arrivals, arrivals[1:])]  # gaps[j] ends at arrivals[j + 1]
        logs_x = [math.log(x) for x in gaps]
        for k in range(len(gaps) - m + 1):
            fit = sum(abs(logs_x[k + i] - logs_p[i]) for i in range(m)) / m
            if fit < best[0]:
                opens = k - limits["margin_gaps"]  # arrivals[k] ends the gap before the run
                best = (fit, arrivals[opens] if opens >= 0 else -math.inf)
    fit, start = best
    if start is None or fit > limits["max_fit"]:
        return None, fit if math.isfinite(fit) else None
    return start, fit


def _before(requests: list[RequestChunks], start_s: float) -> tuple[list[float], float, int]:
    """(per-token gaps, summed gaps, tokens) of the chunks that arrived before the window opened."""
    per_token: list[float] = []
    total, tokens = 0.0, 0
    for request in requests:
        previous = request.first_token_s
        for arrival, count in request.chunks:
            if arrival > start_s:
                break
            gap = arrival - previous
            per_token += [gap / count] * count
            total += gap
            tokens += count
            previous = arrival
    return per_token, total, tokens


def compare_with_load(column, step_rows: list[StepRow], requests: list[RequestChunks],
                      window_start_s: float | None = None, strict: bool = False) -> LoadCompare:
    """The column's profiled steps against the load records (window_start_s: recorded by the run)."""
    used = used_steps(step_rows, column.stage, strict)
    periods = {r: p for r, p in step_periods_us(step_rows, used).items() if p}
    notes = []
    period_us = _policy(_per_rank_stat(periods, column.stat), column.rank_policy) if periods else None
    if period_us is None:
        notes.append("fewer than two profiled steps of the stage on every rank: no step period")
    tokens_per_step = column.accept_length if column.stage == VERIFY else 1.0
    if column.stage == VERIFY and not tokens_per_step:
        notes.append("MTP without an accept length: no time per token")
    per_token = period_us / 1000 / tokens_per_step if period_us is not None and tokens_per_step else None
    fit = None
    if window_start_s is not None:
        start, how = window_start_s, "recorded"
    else:
        reference = max(sorted(periods), key=lambda r: len(periods[r])) if periods else None
        start, fit = _locate([p / 1e6 for p in periods[reference]], requests) if reference else (None, None)
        how = "cadence" if start is not None else ""
        if start is None:
            notes.append("the profiled steps were not found in the load's chunk gaps (no recorded window)"
                         + (f"; best fit {fit:.2f}" if fit is not None else ""))
    itl_p50 = tpot = None
    tokens = 0
    if start is not None:
        per_tok, total, tokens = _before(requests, start)
        if tokens:
            itl_p50 = statistics.median(per_tok) * 1000
            tpot = total / tokens * 1000
        else:
            notes.append("no token arrived before the profile window")
    overhead = per_token - itl_p50 if per_token is not None and itl_p50 is not None else None
    ratio = per_token / itl_p50 if per_token is not None and itl_p50 else None
    return LoadCompare(period_us / 1000 if period_us is not None else None, tokens_per_step, per_token, itl_p50,
                       tpot, tokens, None if start is None or not math.isfinite(start) else start, how, fit,
                       overhead, ratio, "; ".join(notes))


def table_lines(columns) -> list[tuple[str, str, list[str]]]:
    """(module, kernel, one value per column) for the rows under the table; blank where a column has none."""
    rows = (("profiled step", "start to start (ms/step)", "profiled_period_ms"),
            ("profiled", "per token (ms)", "profiled_ms_per_token"),
            ("load before the profile", "ITL p50 (ms/token)", "load_itl_p50_ms"),
            ("load before the profile", "TPOT (ms/token)", "load_tpot_ms"),
            ("profiler overhead", "profiled - ITL p50 (ms/token)", "overhead_ms"))
    if not any(c.load is not None for c in columns):
        return []
    out = []
    for module, kernel, name in rows:
        values = [getattr(c.load, name) if c.load is not None else None for c in columns]
        out.append((module, kernel, ["" if v is None else f"{v:.2f}ms" for v in values]))
    return out


def note(column) -> str:
    """One line for the table's notes: where the window is, what the load figures are over."""
    load = column.load
    if load is None:
        return ""
    if load.window_from == "recorded":
        where = f"opened at {load.window_start_s:.3f} s on the load's clock (recorded by the run)"
    elif load.window_from == "cadence":
        where = (f"located by cadence: the profiled step periods match the load's chunk gaps (fit {load.fit:.2f}), "
                 f"opening at {load.window_start_s:.3f} s on the load's clock")
    else:
        where = "not found"
    text = f"{column.name}: profiled steps against the load: the profile window {where}"
    if load.load_tokens:
        text += f"; the load's figures are over the {load.load_tokens} tokens that arrived before it"
    if load.ratio is not None:
        text += f"; profiled time per token = {load.ratio:.2f}x the load's ITL p50"
    if load.note:
        text += f"; {load.note}"
    return text
