"""Latency summaries from the per-request load records (load/requests.jsonl).

The per-request JSONL is the source of truth (as in aiperf and vLLM's bench serve); every
summary here is derived from it. One record per line, as the load driver writes it:

    {"request_id": ..., "input_len": int, "output_len": int, "submitted_ts": float,
     "finished_ts": float, "ttft_ms": float | null, "tpot_ms": float | null,
     "itl_ms": [float, ...], "e2e_latency_ms": float, "completed": bool, "error": str (optional)}

submitted_ts / finished_ts are Unix seconds; the other times are milliseconds. A request counts
as successful when `completed` is true and it has no `error`.
"""
from __future__ import annotations

import json
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

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tpot_s(self) -> float | None:
        """(latency - ttft) / (output_tokens - 1): undefined for one-token or failed requests."""
        if not self.ok or self.ttft_s is None or self.output_tokens < 2:
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
    window_s: float  # first request's start to last request's end
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


def read_records(path: Path) -> list[RequestRecord]:
    records = []
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RunDataError(where, f"not valid JSON ({exc.msg})") from None
            if not isinstance(raw, dict):
                raise RunDataError(where, "each line must be a JSON object")
            itl = raw.get("itl_ms") or []
            if not isinstance(itl, list) or not all(isinstance(v, (int, float)) for v in itl):
                raise RunDataError(where, "field 'itl_ms' must be a list of numbers")
            error = raw.get("error")
            if error in (None, "") and raw.get("completed") is not True:
                error = "not completed"
            ok = error in (None, "")
            ttft_ms = _number(raw, "ttft_ms", where, required=ok)
            records.append(RequestRecord(
                start_s=float(_number(raw, "submitted_ts", where)),
                end_s=float(_number(raw, "finished_ts", where, required=ok) or raw["submitted_ts"]),
                ttft_s=None if ttft_ms is None else ttft_ms * 1e-3,
                itl_s=[float(v) * 1e-3 for v in itl],
                output_tokens=int(_number(raw, "output_len", where, required=ok) or 0),
                error=None if ok else str(error),
            ))
    return records


def load_stats(records: list[RequestRecord], quantiles: tuple[float, ...]) -> LoadStats:
    ok = [r for r in records if r.ok]
    window_s = (max(r.end_s for r in records) - min(r.start_s for r in records)) if records else 0.0
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
