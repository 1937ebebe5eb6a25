"""Cases of tests/test_forked_encoding.py, each in a fresh interpreter (no threads left by other tests).

    python tests/forked_encoding_driver.py CASE TRACE [ARGS]

Prints one JSON line of what it saw.
"""
from __future__ import annotations

import io
import json
import os
import signal
import sys
import threading
import time

from analysis import pipeline
from analysis.tables import forked_encoding
from analysis.tables.kernel_table import COLUMNS, METADATA
from analysis.tables.parquet_writer import write_row_groups

made: list[forked_encoding.ForkedEncoding] = []


class Counting(forked_encoding.ForkedEncoding):
    """Counts the helpers the pipeline makes and keeps each child's exit code."""

    def __init__(self, rows):
        self.exit_codes: list[int | None] = []
        super().__init__(rows)
        made.append(self)

    def _reap(self):
        code = super()._reap()
        self.exit_codes.append(code)
        return code


def children_left() -> int:
    """This process's children still there (running or not yet reaped): 0 or 1."""
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return 0
    return 1


def encoded_bytes(encoded) -> tuple[bytes, list]:
    groups, streams = encoded
    buffer = io.BytesIO()
    write_row_groups(buffer, groups, COLUMNS, METADATA)
    return buffer.getvalue(), list(streams)


def rows_of(trace: str):
    return pipeline.analyze([trace], options=pipeline.AnalysisOptions(jobs=1)).kernel_rows


def main() -> dict:
    case, trace, *args = sys.argv[1:]
    pipeline.ForkedEncoding = Counting
    if case == "analyze":
        out, jobs = args
        result = pipeline.analyze([trace], options=pipeline.AnalysisOptions(jobs=int(jobs) or None))
        pipeline.write_outputs(result, out)
        return {"helpers": len(made), "reaped": all(h.pid is None for h in made), "children_left": children_left()}
    if case in ("child-fails", "child-killed", "child-says-garbage"):
        rows = rows_of(trace)
        expected = encoded_bytes(forked_encoding._encoded(rows))
        parent = os.getpid()
        real = forked_encoding._encoded
        if case == "child-fails":
            forked_encoding._encoded = lambda r: real(r) if os.getpid() == parent else 1 / 0
        elif case == "child-says-garbage":  # a message that is not the encoding: refused, made here
            forked_encoding._encoded = lambda r: real(r) if os.getpid() == parent else (["not a row group"], [])
        helper = Counting(rows)
        if case == "child-killed":
            os.kill(helper.pid, signal.SIGKILL)
        got = helper.result()
        return {"child_exit": helper.exit_codes[0], "same_as_in_process": encoded_bytes(got) == expected,
                "children_left": children_left()}
    if case == "close-unread":  # a child still at work (slowed to 60 s) is stopped, not waited for
        rows = rows_of(trace)
        parent = os.getpid()
        real = forked_encoding._encoded
        forked_encoding._encoded = lambda r: real(r) if os.getpid() == parent else time.sleep(60)
        helper = Counting(rows)
        start = time.monotonic()
        helper.close()
        return {"reaped": helper.pid is None, "children_left": children_left(),
                "closed_within_10_s": time.monotonic() - start < 10, "child_exit": helper.exit_codes}
    if case == "combine-fails":
        try:
            pipeline.analyze([trace], options=pipeline.AnalysisOptions(rank_policy="rank:nobody"))
            error = ""
        except pipeline.AnalysisError as exc:
            error = str(exc)
        return {"error": error, "helpers": len(made), "reaped": all(h.pid is None for h in made),
                "children_left": children_left()}
    if case == "thread-running":
        stop = threading.Event()
        other = threading.Thread(target=stop.wait)
        other.start()
        try:
            pipeline.analyze([trace])
            safe = forked_encoding.fork_is_safe()
        finally:
            stop.set()
            other.join()
        return {"helpers": len(made), "fork_is_safe": safe, "children_left": children_left()}
    raise SystemExit(f"unknown case {case}")


if __name__ == "__main__":
    print(json.dumps(main()))
