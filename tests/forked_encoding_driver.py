"""Cases of tests/test_forked_encoding.py and tests/test_forked_naming.py, each in a fresh interpreter
(no threads left by other tests).

    python tests/forked_encoding_driver.py CASE TRACE [ARGS]

Prints one JSON line of what it saw.
"""
from __future__ import annotations

import io
import json
import os
import signal
import sys
import _thread
import threading
import time

from analysis import forked_call, pipeline
from analysis.pipeline import analyze_traces
from analysis.attribution.rank import attribute as rank_attribute
from analysis.attribution.rank import forked_naming
from analysis.pipeline import forked_encoding
from analysis.tables.kernel_table import COLUMNS, METADATA
from analysis.io.parquet_writer import write_row_groups
from child_processes import children_left

made: list[forked_encoding.ForkedEncoding] = []


class _Recorded:
    """Keeps each child's exit code as the helper reaps it."""

    def _reap(self):
        code = super()._reap()
        self.exit_codes.append(code)
        return code


class Counting(_Recorded, forked_encoding.ForkedEncoding):
    """The encoding helpers the pipeline makes."""

    def __init__(self, rows):
        self.exit_codes: list[int | None] = []
        super().__init__(rows)
        made.append(self)


naming: list[forked_naming.ForkedNaming] = []


class CountingNaming(_Recorded, forked_naming.ForkedNaming):
    """The naming helpers the attribution makes."""

    def __init__(self, namers, steps, first):
        self.exit_codes: list[int | None] = []
        super().__init__(namers, steps, first)
        naming.append(self)


def encoded_bytes(groups) -> bytes:
    buffer = io.BytesIO()
    write_row_groups(buffer, groups, COLUMNS, METADATA)
    return buffer.getvalue()


def rows_of(trace: str):
    return pipeline.analyze([trace], options=pipeline.AnalysisOptions(jobs=1)).kernel_rows


def main() -> dict:
    case, trace, *args = sys.argv[1:]
    analyze_traces.ForkedEncoding = Counting
    rank_attribute.ForkedNaming = CountingNaming
    if case in ("name", "name-child-fails"):  # the steps named partly by a child, every file written
        out, jobs = args
        if case == "name-child-fails":
            parent = os.getpid()
            real = forked_naming.name_steps
            forked_naming.name_steps = lambda n, s: real(n, s) if os.getpid() == parent else 1 / 0
        result = pipeline.analyze([trace], options=pipeline.AnalysisOptions(jobs=int(jobs) or None))
        pipeline.write_outputs(result, out)
        return {"naming_helpers": len(naming), "child_exits": [c for h in naming for c in h.exit_codes],
                "children_left": children_left()}
    if case == "progress":  # analyze's progress bar on: the steps are still named by two processes
        pipeline.analyze([trace], progress=True)
        return {"naming_helpers": len(naming), "children_left": children_left()}
    if case == "sigchld-ignored":  # the system reaps the children: no exit status, the answers still count
        out = args[0]
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        result = pipeline.analyze([trace])
        pipeline.write_outputs(result, out)
        return {"helpers": len(made) + len(naming), "exit_codes": [c for h in made + naming for c in h.exit_codes],
                "children_left": children_left()}
    if case == "fork-refused":  # the system refuses the fork (no memory, no process left): one process
        out = args[0]

        def refused():
            raise BlockingIOError(11, "Resource temporarily unavailable")
        forked_call.os.fork = refused
        result = pipeline.analyze([trace])
        pipeline.write_outputs(result, out)
        return {"helpers": len(made) + len(naming), "children_left": children_left()}
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
            forked_encoding._encoded = lambda r: real(r) if os.getpid() == parent else ["not a row group"]
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
    if case in ("thread-running", "native-thread-running"):
        stop = threading.Event()
        if case == "thread-running":
            other = threading.Thread(target=stop.wait)
            other.start()
        else:  # a thread the threading module does not know of, as a C++ library's (Ray's) would be
            _thread.start_new_thread(stop.wait, ())
            assert threading.active_count() == 1
        try:
            pipeline.analyze([trace])
            safe = forked_call.fork_is_safe()
        finally:
            stop.set()
            if case == "thread-running":
                other.join()
        return {"helpers": len(made) + len(naming), "fork_is_safe": safe, "children_left": children_left()}
    if case == "no-room":  # the machine has less memory available than twice this process's
        forked_call._proc_kib = lambda path, key: 1 if key == "MemAvailable" else 1000
        pipeline.analyze([trace])
        return {"helpers": len(made) + len(naming), "room": forked_call.room_for_a_copy(),
                "children_left": children_left()}
    raise SystemExit(f"unknown case {case}")


if __name__ == "__main__":
    print(json.dumps(main()))
