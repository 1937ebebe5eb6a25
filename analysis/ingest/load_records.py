"""A run's load records (load/requests.jsonl) as the times each request's chunks arrived.

Why chunks: the load writes, per request, the time to the first token and one inter-token latency
per later token, a chunk's gap split evenly over the tokens it carried (harness/load/client.py). A
run of equal values is one chunk, so each chunk's arrival time is exact again: with speculative
decoding a verify step delivers its accepted tokens in one chunk, and the chunk, not the token, is
what lines up with a profiled step. (Two chunks with bit-equal gaps would read as one; the load's
clock makes that vanishingly rare.) Times are seconds on the load's own clock.
"""
from __future__ import annotations

import math
from pathlib import Path

import msgspec

from analysis.errors import AnalysisError, shown_path
from analysis.io.input_files import TABLE_LIMIT_BYTES, InputFileError, JsonLineError, read_json_lines


class RequestChunks(msgspec.Struct):
    """One completed request: when its first token came, then each later chunk (time, tokens)."""

    request_id: int
    first_token_s: float
    chunks: list[tuple[float, int]]  # (arrival time, tokens in the chunk), by time


def _number(value, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise AnalysisError(f"{where}: {what} must be a finite number >= 0, got {value!r}")
    return float(value)


def chunks_of(itl_ms: list[float], first_token_s: float) -> list[tuple[float, int]]:
    """(arrival time, tokens) per chunk from the evenly split inter-token latencies."""
    out: list[tuple[float, int]] = []
    t = first_token_s
    i = 0
    while i < len(itl_ms):
        j = i
        while j + 1 < len(itl_ms) and itl_ms[j + 1] == itl_ms[i]:
            j += 1
        tokens = j - i + 1
        t += itl_ms[i] * tokens / 1000.0
        out.append((t, tokens))
        i = j + 1
    return out


def load_request_chunks(path: str | Path) -> list[RequestChunks]:
    """The completed requests of a requests.jsonl, read line by line through the input door (a table:
    TABLE_LIMIT_BYTES; a FIFO or pipe streamed, a device refused); a malformed line is an error naming
    file and line."""
    out: list[RequestChunks] = []
    try:
        for where, record in read_json_lines(path, TABLE_LIMIT_BYTES):
            _add_request(out, record, where)
    except JsonLineError as exc:
        raise AnalysisError(f"{exc.path}: not a JSON object: {exc.problem}") from None
    except InputFileError as exc:
        raise AnalysisError(f"{exc.path}: cannot read the load records: {exc.problem}") from None
    if not out:
        raise AnalysisError(f"{shown_path(path)}: no completed request in the load records")
    return out


def _add_request(out: list[RequestChunks], record: object, where: str) -> None:
    """The line's request (`where`: FILE:LINE), where it completed, appended to out."""
    if not isinstance(record, dict):
        raise AnalysisError(f"{where}: not a JSON object")
    if not record.get("ok"):
        return
    start = _number(record.get("start_s"), "start_s", where)
    ttft = _number(record.get("ttft_ms"), "ttft_ms", where)
    itl = record.get("itl_ms")
    if not isinstance(itl, list):
        raise AnalysisError(f"{where}: itl_ms must be a list of numbers, got {itl!r}")
    itl = [_number(v, f"itl_ms[{i}]", where) for i, v in enumerate(itl)]
    first = start + ttft / 1000.0
    line_number = int(where.rsplit(":", 1)[1])
    out.append(RequestChunks(int(record.get("request_id", line_number)), first, chunks_of(itl, first)))
