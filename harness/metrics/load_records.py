"""Latency summaries from the per-request load records (load/requests.jsonl).

The per-request JSONL is the source of truth (as in aiperf and vLLM's bench serve); every
summary here is derived from it. Two writers produce it, and both are read:

- the HTTP load client (harness/load, docs/load-metrics.md): `ok`, `error`, `start_s` (seconds
  from the load's start), `ttft_ms`, `itl_ms` (list), `tpot_ms`, `e2e_ms`, `output_tokens`;
- the embedded engine: `completed`, `submitted_ts` / `finished_ts` (Unix seconds), `ttft_ms`,
  `itl_ms`, `tpot_ms`, `e2e_latency_ms`, `output_len`, optional `error`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from harness.metrics.errors import RunDataError


@dataclass
class RequestRecord:
    start_s: float
    end_s: float
    ttft_s: float | None
    itl_s: list[float]
    output_tokens: int
    error: str | None
    given_tpot_s: float | None = None  # the writer's own TPOT, when it records one

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tpot_s(self) -> float | None:
        """(latency - ttft) / (output_tokens - 1): undefined for one-token or failed requests."""
        if not self.ok:
            return None
        if self.given_tpot_s is not None:
            return self.given_tpot_s
        if self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.end_s - self.start_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass
class LatencySummary:
    """What a Prometheus summary carries: quantiles, sum and count of the observations."""

    quantiles: dict[float, float]
    sum: float
    count: int


@dataclass
class LoadStats:
    requests_ok: int
    requests_error: int
    output_tokens: int
    window_s: float  # first successful request's start to the last one's end
    ttft: LatencySummary
    tpot: LatencySummary
    itl: LatencySummary
    records: list[RequestRecord] = field(repr=False, default_factory=list)


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default method) of already sorted values."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(values: list[float], quantiles: tuple[float, ...]) -> LatencySummary:
    ordered = sorted(values)
    return LatencySummary({q: quantile(ordered, q) for q in quantiles}, math.fsum(ordered), len(ordered))


def _number(record: dict, key: str, where: str, required: bool = True):
    value = record.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RunDataError(where, f"field {key!r} must be a number, got {value!r}")
    return value


def _record(raw: dict, where: str) -> RequestRecord:
    itl = raw.get("itl_ms") or []
    if not isinstance(itl, list) or not all(isinstance(v, (int, float)) for v in itl):
        raise RunDataError(where, "field 'itl_ms' must be a list of numbers")
    error = raw.get("error") or None
    ok = bool(raw["ok"]) if "ok" in raw else (raw.get("completed") is True and error is None)
    if not ok and error is None:
        error = "not completed"
    ttft_ms = _number(raw, "ttft_ms", where, required=ok)
    tokens_key = "output_tokens" if "output_tokens" in raw else "output_len"
    output_tokens = int(_number(raw, tokens_key, where, required=ok) or 0)
    if "start_s" in raw:  # load client: start relative to the load, e2e in ms
        start_s = float(_number(raw, "start_s", where))
        e2e_ms = _number(raw, "e2e_ms", where, required=ok)
        end_s = start_s + (e2e_ms or 0.0) * 1e-3
    else:  # embedded engine: Unix times
        start_s = float(_number(raw, "submitted_ts", where))
        end_s = float(_number(raw, "finished_ts", where, required=ok) or start_s)
    tpot_ms = _number(raw, "tpot_ms", where, required=False)
    return RequestRecord(
        start_s=start_s, end_s=end_s, ttft_s=None if ttft_ms is None else ttft_ms * 1e-3,
        itl_s=[float(v) * 1e-3 for v in itl], output_tokens=output_tokens, error=None if ok else str(error),
        given_tpot_s=None if tpot_ms is None else tpot_ms * 1e-3,
    )


def read_records(path: Path) -> list[RequestRecord]:
    from analysis.api import TABLE_LIMIT_BYTES, InputFileError, read_json_lines

    records = []
    try:
        for where, raw in read_json_lines(path, TABLE_LIMIT_BYTES, "the load records"):
            if not isinstance(raw, dict):
                raise RunDataError(where, "each line must be a JSON object")
            records.append(_record(raw, where))
    except InputFileError as exc:  # a line that is not JSON names FILE:LINE
        raise RunDataError(exc.path, exc.problem) from None
    return records


def load_stats(records: list[RequestRecord], quantiles: tuple[float, ...]) -> LoadStats:
    ok = [r for r in records if r.ok]
    # the same window as harness/load/summary.py: successful requests only
    window_s = (max(r.end_s for r in ok) - min(r.start_s for r in ok)) if ok else 0.0
    return LoadStats(
        requests_ok=len(ok),
        requests_error=len(records) - len(ok),
        output_tokens=sum(r.output_tokens for r in ok),
        window_s=window_s,
        ttft=summarize([r.ttft_s for r in ok if r.ttft_s is not None], quantiles),
        tpot=summarize([t for r in ok if (t := r.tpot_s) is not None], quantiles),
        itl=summarize([v for r in ok for v in r.itl_s], quantiles),
        records=records,
    )
