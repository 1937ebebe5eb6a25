"""Cases of tests/test_second_half_load.py, in a fresh interpreter (a fork from the test process would
copy threads earlier tests left running, and the loader then refuses to fork).

    python tests/second_half_driver.py CASE ARGS

Prints one JSON line of what it saw.
"""
from __future__ import annotations

import json
import os
import signal
import sys

import msgspec

from analysis.errors import TraceLoadError
from analysis.ingest import second_half, trace_loader
from child_processes import children_left

taken: list[int] = []  # the kernels of each child's part the loader took
real_add_half = trace_loader._Collector.add_half


def _counting_add_half(self, half):
    taken.append(len(half.kernel_name))
    return real_add_half(self, half)


trace_loader._Collector.add_half = _counting_add_half


def _loaded(path: str, second_core: bool) -> str:
    """The loaded trace as JSON text, or the loader's error."""
    try:
        return msgspec.json.encode(trace_loader.load_trace(path, second_core=second_core)).decode()
    except TraceLoadError as exc:
        return f"error: {exc}"


def _kind(error: str) -> str:
    """An error without its file and where it locates the problem: "not valid trace JSON: ..."."""
    return error.split(": ", 2)[-1].split(" (in the events after")[0]


def compare(paths: list[str], shares: list[float]) -> dict:
    """Each file loaded in one process and, at each share, with a child reading its later part."""
    second_half.SPLIT_MIN_BYTES = second_half.SPLIT_MIN_GZIP_BYTES = 0
    cases = []
    for path in paths:
        alone = _loaded(path, False)
        for share in shares:
            second_half.CHILD_SHARE = second_half.GZIP_CHILD_SHARE = share
            before = len(taken)
            split = _loaded(path, True)
            cases.append({"path": os.path.basename(path), "share": share, "same": split == alone,
                          "taken": len(taken) > before, "error": alone.startswith("error: ") and alone[7:],
                          "error_kind": split.startswith("error: ") and _kind(split)})
    return {"cases": cases, "children_left": children_left()}


def main() -> dict:
    case, *args = sys.argv[1:]
    if case == "compare":  # SHARES (comma-separated) PATH...
        return compare(args[1:], [float(s) for s in args[0].split(",")])
    if case == "analyze":  # OUT JOBS PATH: one rank analysed, every file written
        from analysis import pipeline

        out, jobs, path = args
        second_half.SPLIT_MIN_BYTES = second_half.SPLIT_MIN_GZIP_BYTES = 0
        result = pipeline.analyze([path], options=pipeline.AnalysisOptions(jobs=int(jobs) or None))
        pipeline.write_outputs(result, out)
        return {"taken": len(taken), "children_left": children_left()}
    if case in ("child-fails", "child-says-garbage", "child-killed", "child-sends-uneven-columns",
                "child-stops-early", "child-starts-elsewhere"):  # PATH
        path = args[0]
        second_half.SPLIT_MIN_BYTES = second_half.SPLIT_MIN_GZIP_BYTES = 0
        parent = os.getpid()
        name = "_read_gzip_second_half" if path.endswith(".gz") else "_read_second_half"
        real = getattr(trace_loader, name)

        def in_child(fd: int, start: int):
            if os.getpid() == parent:
                return real(fd, start)
            if case == "child-fails":
                raise RuntimeError("the child fails")
            if case == "child-says-garbage":
                return b"\xc1 not msgpack"
            if case == "child-killed":
                os.kill(os.getpid(), signal.SIGKILL)
            half = msgspec.msgpack.decode(real(fd, start))  # HalfRead is sent as an array of its fields
            if case == "child-stops-early":  # a whole part, having read less of the file than all of it
                half[-1] -= 1
            elif case == "child-starts-elsewhere":  # a whole part, from another place than the parent's cut
                half[-3] += 1
            else:  # one kernel name fewer than kernel starts: would drop a kernel unseen
                half[1] = half[1][:-1]
            return msgspec.msgpack.encode(half)
        setattr(trace_loader, name, in_child)
        alone = _loaded(path, False)
        split = _loaded(path, True)
        return {"same": split == alone, "taken": len(taken), "children_left": children_left()}
    raise SystemExit(f"unknown case {case}")


if __name__ == "__main__":
    print(json.dumps(main()))
