"""The input trace with its attribution added: a track beside each stream whose slices say, per
kernel, the step, the layer, the group and the module it was counted under.

Why: users read profiles in Perfetto or chrome://tracing; the D4 table says where the time went,
this shows in their usual viewer why each kernel got its row. Every event of the input is kept as
it was; only new events are added, in the chrome trace format both viewers read:

- per stream S of a rank's kernels, a new thread in the same process as S's kernels, tid
  S + 10^k (10^k above every tid of that process, so no existing track is touched), named
  "stream S · layer / group / module" and sorted with S's own sort index (beside it);
- on it, nested complete ("X") slices: the step ("step 3 · decode"), the layer ("layer 2 · MoE",
  "before layers", "after layers"), the group ("moe") and the module ("experts"). Each slice spans
  a run of consecutive kernels of that stream that share it, clipped so that slices nest (kernels
  of one stream may overlap by the profiler's rounding); its args name the group, module, layer,
  the kernels' source / role / rule (docs/architecture.md) and their busy time.

The slices are of category gpu_user_annotation, so the project's own loader reads them back as GPU
ranges; their names are neither step labels nor `group.module` annotations, so analysing the
annotated trace again gives the same table (tests/test_annotated_trace.py).
"""
from __future__ import annotations

import gzip
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from analysis.attribution.rows import SECTION_LAYER, SECTION_PRE, KernelRow
from analysis.errors import AnalysisError
from analysis.io.input_files import InputFileError, read_input, read_input_gzip

# the trace is held whole to be written again (its events as objects take several times its size):
# at most this much, as stored and as inflated
ANNOTATED_TRACE_LIMIT_BYTES = 1024 * 1024 * 1024
SLICE_CAT = "gpu_user_annotation"
TRACK_SUFFIX = " · layer / group / module"
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_MOE_GROUPS = frozenset({"moe", "combine/share overlap"})


@dataclass
class AnnotatedTrace:
    path: Path
    tracks: dict[int, int]  # stream -> the tid of its attribution track
    slices: int
    kernels: int  # kernel rows placed on the tracks


def moe_layers(rows: list[KernelRow]) -> set[tuple[str, int, int]]:
    """(rank, step, layer) of the layers that run experts (any stream)."""
    return {(r.rank, r.step, r.layer) for r in rows if r.section == SECTION_LAYER and r.group in _MOE_GROUPS}


def _layer_name(row: KernelRow, moe: set[tuple[str, int, int]]) -> str:
    if row.section != SECTION_LAYER:
        return "before layers" if row.section == SECTION_PRE else "after layers"
    return f"layer {row.layer} · {'MoE' if (row.rank, row.step, row.layer) in moe else 'dense'}"


# One level of nesting: the key that keeps kernels in one slice, and the slice's name.
_Level = tuple[Callable[[KernelRow], tuple], Callable[[KernelRow], str]]


def _levels(moe: set[tuple[str, int, int]]) -> list[_Level]:
    return [
        (lambda r: (r.step,), lambda r: f"step {r.step} · {r.stage}"),
        (lambda r: (r.step, r.section, r.layer), lambda r: _layer_name(r, moe)),
        (lambda r: (r.step, r.section, r.layer, r.group), lambda r: r.group),
        (lambda r: (r.step, r.section, r.layer, r.group, r.module), lambda r: r.module),
    ]


def _joined(values) -> str:
    return ", ".join(sorted(set(values)))


def _slice_args(level: int, run: list[KernelRow]) -> dict:
    first = run[0]
    args: dict = {"step": first.step, "stage": first.stage, "kernels": len(run),
                  "busy_us": round(sum(r.busy_us for r in run), 3)}
    if level >= 1:
        args["layer"] = first.layer
    if level >= 2:
        args["group"] = first.group
    if level >= 3:
        args.update(module=first.module, source=_joined(r.source for r in run), role=_joined(r.role for r in run),
                    rule=_joined(r.rule for r in run))
    return args


def stream_slices(rows: list[KernelRow], moe: set[tuple[str, int, int]]) -> list[dict]:
    """One stream's nested slices (name, ts, dur, args), parents before children, in time order."""
    levels = _levels(moe)
    out: list[dict] = []

    def emit(level: int, kernels: list[KernelRow], parent_end: float) -> None:
        key, name = levels[level]
        runs: list[list[KernelRow]] = []
        for row in kernels:
            if runs and key(runs[-1][-1]) == key(row):
                runs[-1].append(row)
            else:
                runs.append([row])
        for i, run in enumerate(runs):
            start = run[0].start_us
            end = max(r.start_us + r.busy_us for r in run)
            if i + 1 < len(runs):
                end = min(end, runs[i + 1][0].start_us)
            end = max(start, min(end, parent_end))
            out.append({"name": name(run[0]), "ts": start, "dur": end - start, "args": _slice_args(level, run)})
            if level + 1 < len(levels):
                emit(level + 1, run, end)

    emit(0, sorted(rows, key=lambda r: r.start_us), float("inf"))
    return out


def _read(path: Path) -> dict:
    """The whole trace document, read through the input door within ANNOTATED_TRACE_LIMIT_BYTES (as
    stored and as inflated: a few MB of .gz can inflate to gigabytes)."""
    try:
        limit_bytes = ANNOTATED_TRACE_LIMIT_BYTES
        raw = read_input_gzip(path, limit_bytes, limit_bytes, "the trace to annotate") if path.name.endswith(".gz") \
            else read_input(path, limit_bytes, "the trace to annotate")
        doc = msgspec.json.decode(raw)
    except InputFileError as exc:
        raise AnalysisError(f"{exc}; --no-annotated-trace leaves the annotated trace out") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise AnalysisError(f"{path}: cannot read the trace: {exc}") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise AnalysisError(f"{path}: not a chrome trace (no traceEvents list)")
    return doc


def _where_streams_run(events: list) -> tuple[dict[int, int], dict[int, set], dict[tuple[int, int], float]]:
    """(stream -> pid of its kernels, pid -> tids in use, (pid, tid) -> sort index) from the trace."""
    stream_pid: dict[int, int] = {}
    cpu_pid: dict[int, int] = {}
    tids: dict[int, set] = defaultdict(set)
    sort_index: dict[tuple[int, int], float] = {}
    for ev in events:
        if not isinstance(ev, dict):
            continue
        pid, tid = ev.get("pid"), ev.get("tid")
        tids[pid].add(tid)
        cat = ev.get("cat")
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        if cat in _DEVICE_CATS:
            stream = args.get("stream", tid)
            if isinstance(stream, int):
                stream_pid.setdefault(stream, pid)
        elif cat == "cpu_op" and isinstance(tid, int):
            cpu_pid.setdefault(tid, pid)  # a CPU-only trace: the loader's "streams" are threads
        elif ev.get("ph") == "M" and ev.get("name") == "thread_sort_index" and isinstance(args.get("sort_index"), (int, float)):
            sort_index[(pid, tid)] = args["sort_index"]
    return (stream_pid or cpu_pid), tids, sort_index


def annotate_trace(trace_path: str | Path, rows: list[KernelRow], out_path: str | Path) -> AnnotatedTrace:
    """Write `trace_path` with the attribution tracks of `rows` (one rank's kernel rows, from this
    trace) to `out_path` (.json.gz is compressed). A row whose stream runs no kernel in the trace is
    an error: the rows are not this trace's."""
    trace_path, out_path = Path(trace_path), Path(out_path)
    doc = _read(trace_path)
    events = doc["traceEvents"]
    stream_pid, tids, sort_index = _where_streams_run(events)
    moe = moe_layers(rows)
    by_stream: dict[int, list[KernelRow]] = defaultdict(list)
    for row in rows:
        by_stream[row.stream].append(row)
    missing = sorted(s for s in by_stream if s not in stream_pid)
    if missing:
        raise AnalysisError(f"{trace_path}: the kernel rows name stream(s) {', '.join(map(str, missing))}, on which "
                            "this trace runs no kernel: they are another trace's rows")
    added: list[dict] = []
    tracks: dict[int, int] = {}
    for stream in sorted(by_stream):
        pid = stream_pid[stream]
        used = [t for t in tids[pid] if isinstance(t, int)] + [stream]
        offset = 10 ** len(str(max(abs(t) for t in used)))
        tid = tracks[stream] = stream + offset
        added.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                      "args": {"name": f"stream {stream}{TRACK_SUFFIX}"}})
        added.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                      "args": {"sort_index": sort_index.get((pid, stream), stream)}})
        for piece in stream_slices(by_stream[stream], moe):
            added.append({"ph": "X", "cat": SLICE_CAT, "pid": pid, "tid": tid, **piece})
    doc["traceEvents"] = events + added
    body = msgspec.json.encode(doc)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if out_path.name.endswith(".gz"):
        with gzip.open(out_path, "wb", compresslevel=6) as fh:
            fh.write(body)
    else:
        out_path.write_bytes(body)
    slices = sum(1 for e in added if e["ph"] == "X")
    return AnnotatedTrace(path=out_path, tracks=tracks, slices=slices, kernels=len(rows))


def annotated_name(trace_path: str | Path) -> str:
    """`annotated-<name>`: the rank part of the name (-TP-0-DECODE.trace.json.gz) stays at its end."""
    return f"annotated-{Path(trace_path).name}"
