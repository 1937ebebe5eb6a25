"""A large plain trace file's second half read by a forked child (analysis/ingest/second_half.py):
the loaded trace, or the error, is the one-process loader's own wherever the file is cut.

Real traces: every bundled one (tests/data, recorded by this project) and every public one listed in
tests/real_traces.yaml, uncompressed and as they come (.json.gz), cut at three places each. Synthetic
traces (written here, their contents known by construction): event boundaries inside strings at
every place a cut may fall, a header or a tail larger than half the file, a first half with no kernel,
and errors in the second half (a bad duration, a truncated file, a kernel longer than the trace, one
kernel given twice), whose messages must name the same event as the one-process loader's.

Each case runs in a fresh interpreter (tests/second_half_driver.py): a fork from the test process
would copy whatever threads earlier tests left running, which the loader refuses to do.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bundled_traces import bundled_traces
from conftest import ROOT, real_trace
from real_traces import load_sources
from test_trace_loader import _kernel, _launch, _write_trace

DRIVER = ROOT / "tests" / "second_half_driver.py"
SWEEP = [round(0.03 + 0.02 * i, 2) for i in range(48)]
SWEEP_MAX_BYTES = 1_000_000  # bundled traces at least this large: one of them is cut  # 0.03 .. 0.97 of the file to the child


def _drive(case: str, *args: str, timeout_s: float = 600) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    done = subprocess.run([sys.executable, str(DRIVER), case, *args], capture_output=True, text=True,
                          timeout=timeout_s, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _plain(path: Path, folder: Path) -> str:
    """The trace uncompressed into folder (the name kept, without .gz)."""
    out = folder / path.name.removesuffix(".gz")
    out.write_bytes(gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes())
    return str(out)


def _compare(shares: list[float], paths: list[str]) -> list[dict]:
    got = _drive("compare", ",".join(map(str, shares)), *paths)
    assert got["children_left"] == 0
    return got["cases"]


def _found(source) -> str | None:
    """A public trace's path; None where it is missing and not required (real_trace skips then, or
    fails under MOE_HARNESS_REQUIRE_REAL_TRACES=1 where it is)."""
    if source.path.endswith("execution_details.json"):
        return None
    try:
        return real_trace(source.path)
    except pytest.skip.Exception:
        return None


@pytest.mark.parametrize("form", ["plain", "gzip"])
def test_real_traces_load_the_same_cut_anywhere(tmp_path, form):
    """Every bundled real trace (of the large ones, one) and every public one found, cut at a tenth, half
    and nine tenths:
    uncompressed, and as they come (.json.gz: the child inflates from the start and decodes from
    the cut's place, found by the trailer's size)."""
    sources = [p for p in map(_found, load_sources()) if p is not None]
    # the 61-layer recordings (1.2-2.5 MB compressed, 25-50 MB each) repeat the event mix of the
    # 4-layer ones beside them: one of them is enough for the sweep
    bundled = [p for p in bundled_traces(ROOT) if p.stat().st_size < SWEEP_MAX_BYTES]
    bundled += [p for p in bundled_traces(ROOT) if p.stat().st_size >= SWEEP_MAX_BYTES][:1]
    originals = [*map(str, bundled), *sources]
    paths = [_plain(Path(p), tmp_path) for p in originals] if form == "plain" else \
        [p for p in originals if p.endswith(".gz")]
    cases = _compare([0.1, 0.5, 0.9], paths)
    assert len(cases) == 3 * len(paths) and len(paths) >= 60
    different = [(c["path"], c["share"]) for c in cases if not c["same"]]
    assert not different
    # the child's part was taken nearly everywhere (a tiny file's cut may fall in its header or tail)
    assert sum(c["taken"] for c in cases) >= 0.9 * len(cases)


# ---------------------------------------------------------------- synthetic traces (known contents)


def _events(count: int, tricky: bool = True) -> list[dict]:
    """Kernels, their launches, annotations and module ranges; with `tricky`, every kernel name holds
    the textual event boundary, and a nested object in args holds one too (a cut there is not proven)."""
    events: list[dict] = []
    for i in range(count):
        name = f'k{i} }}, {{ "ph": "X" }} ] }}, {{' if tricky else f"gemm_{i % 7}"
        kernel = _kernel(name, 100.0 + 10 * i, 5.0, 1000 + i, stream=7 + i % 2)
        if tricky:
            kernel["args"]["nested"] = [{"a": 1}, {"b": [2, {"c": 3}]}]
        events += [kernel, _launch(1000 + i, 95.0 + 10 * i)]
        if i % 10 == 0:
            events.append({"ph": "X", "cat": "python_function", "name": f"nn.Module: Block_{i // 10}", "pid": 1,
                           "tid": 1, "ts": 94.0 + 10 * i, "dur": 100.0})
            events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"step[DECODE bs={i}]", "pid": 0,
                           "tid": 7, "ts": 99.0 + 10 * i, "dur": 100.0})
            events.append({"ph": "X", "cat": "user_annotation", "name": "}, {" * 50, "pid": 1, "tid": 1,
                           "ts": 93.0 + 10 * i, "dur": 1.0})
    return events


def _write(path: Path, events: list[dict], pretty: bool = False, **top: object) -> str:
    """The trace written as the loader tests write theirs (compact unless `pretty`), its path."""
    return str(_write_trace(path, events, pretty=pretty, **top))


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_boundaries_inside_strings_anywhere(tmp_path, suffix):
    """48 cuts over a file whose every kernel name and args hold false boundaries: some cuts are
    proven and the child's part taken, others are not and the parent reads on; all load the same."""
    compact = _write(tmp_path / f"tricky-TP-0-DECODE.trace{suffix}", _events(400))
    pretty = _write(tmp_path / f"pretty-TP-0-DECODE.trace{suffix}", _events(400), pretty=True)
    cases = _compare(SWEEP, [compact, pretty])
    assert all(c["same"] and not c["error"] for c in cases)
    taken = sum(c["taken"] for c in cases)
    assert 0 < taken < len(cases)  # both ways were walked


def test_the_child_really_reads_the_kernels_a_plain_parse_finds(tmp_path):
    """Against the standard library's whole-document parse (no loader code): the kernels' names and
    times, in order, where the child's part was taken."""
    from analysis.ingest.trace_loader import load_trace

    path = _write(tmp_path / "plain-TP-0-DECODE.trace.json", _events(300, tricky=False))
    cases = _compare([0.5], [path])
    assert cases[0]["taken"] and cases[0]["same"]
    doc = json.loads(Path(path).read_text())
    expected = sorted(((e["name"], e["ts"], e["dur"]) for e in doc["traceEvents"] if e.get("cat") == "kernel"),
                      key=lambda r: r[1])
    assert [(k.name, k.start_us, k.dur_us) for k in load_trace(path).kernels] == expected


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_a_header_or_tail_larger_than_half_the_file(tmp_path, suffix):
    """The cut's place lies in the header (before the events) or in the tail (after them, among
    objects that look like events): never taken, the same trace."""
    filler = [{"id": i, "name": f"}}, {{ dev {i}"} for i in range(3000)]
    events = _events(100, tricky=False)
    header = _write(tmp_path / f"header-TP-0-DECODE.trace{suffix}", events, deviceExtra=filler)
    tail_path = tmp_path / f"tail-TP-0-DECODE.trace{suffix}"
    text = json.dumps({"traceEvents": events, "distributedInfo": filler}).encode()
    tail_path.write_bytes(gzip.compress(text) if suffix.endswith(".gz") else text)
    cases = _compare([0.3, 0.5, 0.7], [header, str(tail_path)])
    assert all(c["same"] and not c["error"] for c in cases)
    by_file = {c["path"]: [] for c in cases}
    for c in cases:
        by_file[c["path"]].append(c["taken"])
    assert not by_file[f"tail-TP-0-DECODE.trace{suffix}"][-1]  # 0.7 of the file to the child: its start in the tail
    assert not by_file[f"header-TP-0-DECODE.trace{suffix}"][0]  # 0.3 to the child: the cut in the header


def _cpu_ops(count: int, start: float = 0.0) -> list[dict]:
    return [{"ph": "X", "cat": "cpu_op", "name": f"aten::mm_{i % 5}", "pid": 1, "tid": 1, "ts": start + i,
             "dur": 0.5} for i in range(count)]


def test_a_first_half_without_kernels(tmp_path):
    """CPU operators first and kernels only in the second half (as a PyTorch trace writes its CPU
    events before its GPU ones): the operators are kept until the first kernel, the child's too where
    the parent's half had none; a CPU-only trace's operators stand in for its kernels."""
    late = _write(tmp_path / "late-TP-0-DECODE.trace.json", _cpu_ops(600) + _events(50, tricky=False))
    cpu_only = _write(tmp_path / "cpu-TP-0-DECODE.trace.json", _cpu_ops(600))
    cases = _compare([0.2, 0.5, 0.8], [late, cpu_only])
    assert all(c["same"] and not c["error"] and c["taken"] for c in cases)


@pytest.mark.parametrize("problem", ["bad-operator", "operator-longer-than-trace", "bad-operator-in-both"])
def test_a_cpu_only_trace_with_an_error_in_the_second_half(tmp_path, problem):
    """The first bad operator is the one named, wherever it lies (where the parent's half has one too,
    the parent's), and an operator longer than the trace is named by its place."""
    ops = _cpu_ops(600)
    ops[500]["dur"] = -1.0 if problem != "operator-longer-than-trace" else 1e9
    if problem == "bad-operator-in-both":
        ops[100]["dur"] = -2.0
    path = _write(tmp_path / f"{problem}-TP-0-DECODE.trace.json", ops)
    cases = _compare([0.2, 0.5], [path])
    assert all(c["same"] and c["error"] and c["taken"] for c in cases)
    assert all(("event 100 " if problem == "bad-operator-in-both" else "event 500 ") in c["error"] for c in cases)


def _with(events: list[dict], at: float, **change: object) -> list[dict]:
    """events with the kernel nearest the share `at` of the list changed."""
    kernels = [i for i, e in enumerate(events) if e.get("cat") == "kernel"]
    index = kernels[int(at * len(kernels))]
    events = [dict(e) for e in events]
    events[index].update(change)
    return events


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
@pytest.mark.parametrize("problem", ["bad-dur", "truncated", "longer-than-trace", "two-as-long", "given-twice"])
def test_an_error_in_the_second_half_names_the_same_event(tmp_path, problem, suffix):
    events = _events(400, tricky=False)
    path = tmp_path / f"{problem}-TP-0-DECODE.trace{suffix}"
    if problem == "bad-dur":
        _write(path, _with(events, 0.8, dur=-3.0))
    elif problem == "truncated":  # the JSON cut short (in a .json.gz, compressed whole)
        text = json.dumps({"traceEvents": events})[:-300]
        path.write_bytes(gzip.compress(text.encode()) if suffix.endswith(".gz") else text.encode())
    elif problem == "longer-than-trace":
        _write(path, _with(events, 0.8, dur=1e9))
    elif problem == "two-as-long":  # one in each half, equally long: the first is named
        _write(path, _with(_with(events, 0.2, dur=1e9), 0.8, dur=1e9))
    else:  # the same kernel twice on its stream, late in the file
        kernels = [i for i, e in enumerate(events) if e.get("cat") == "kernel"]
        index = kernels[int(0.8 * len(kernels))]
        events.insert(index + 1, dict(events[index]))
        _write(path, events)
    cases = _compare([0.5, 0.6], [str(path)])
    assert all(c["error"] for c in cases)
    if problem == "truncated":  # the same error; where it says the events stop depends on how they were sliced
        assert all(c["error_kind"] == "not valid trace JSON: Input data was truncated" for c in cases)
        assert all("not valid trace JSON: Input data was truncated" in c["error"] for c in cases)
    else:  # the same message, naming the same event
        assert all(c["same"] for c in cases)
    if problem in ("bad-dur", "longer-than-trace", "two-as-long"):
        assert all("event " in c["error"] for c in cases)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
@pytest.mark.parametrize("case", ["child-fails", "child-says-garbage", "child-killed", "child-sends-uneven-columns",
                                  "child-stops-early", "child-starts-elsewhere"])
def test_a_child_that_cannot_deliver_costs_only_its_time(tmp_path, case, suffix):
    path = _write(tmp_path / f"plain-TP-0-DECODE.trace{suffix}", _events(300, tricky=False))
    got = _drive(case, path)
    assert got == {"same": True, "taken": 0, "children_left": 0}


def test_a_gzip_file_whose_trailer_misleads(tmp_path):
    """The gzip trailer's size places the cut: in a file of several gzip members it is the last
    member's alone (the cut then falls early, or in the header), and a corrupt second half is the
    parent's error to find. The same trace or error either way."""
    text = json.dumps({"traceEvents": _events(400, tricky=False)}).encode()
    members = tmp_path / "members-TP-0-DECODE.trace.json.gz"
    third = len(text) // 3
    members.write_bytes(gzip.compress(text[:third]) + gzip.compress(text[third:2 * third])
                        + gzip.compress(text[2 * third:]))
    tiny_last = tmp_path / "tiny-last-TP-0-DECODE.trace.json.gz"
    tiny_last.write_bytes(gzip.compress(text[:-5]) + gzip.compress(text[-5:]))
    corrupt = tmp_path / "corrupt-TP-0-DECODE.trace.json.gz"
    packed = bytearray(gzip.compress(text))
    packed[int(len(packed) * 0.8)] ^= 0xFF
    corrupt.write_bytes(bytes(packed))
    cases = _compare([0.3, 0.5], [str(members), str(tiny_last), str(corrupt)])
    assert all(c["same"] for c in cases)
    assert all(not c["error"] for c in cases if not c["path"].startswith("corrupt"))
    assert any(c["taken"] for c in cases if c["path"].startswith("members"))  # a cut within the trace still works
    broken = [c for c in cases if c["path"].startswith("corrupt")]
    assert all("corrupt gzip data" in c["error"] and not c["taken"] for c in broken)


@pytest.mark.parametrize("form", ["plain", "gzip"])
def test_one_rank_analysed_with_a_child_reading_its_second_half_writes_the_files_of_one_process(tmp_path, form):
    """The command's path: a one-rank analysis loads its trace on two cores (here cut at half of a
    bundled REAL trace, SGLang 0.5.17 DeepSeek-V3 with MTP on one H200, uncompressed and as it came)
    and writes the files that --jobs 1 (one process, no child) writes."""
    original = ROOT / "tests" / "data" / "sglang-real" / "sglang-0.5.17-dsv3-4l-fp8-h200-mtp-TP-0-DECODE.trace.json.gz"
    trace = _plain(original, tmp_path) if form == "plain" else str(original)
    helped = _drive("analyze", str(tmp_path / "helped"), "0", trace)
    alone = _drive("analyze", str(tmp_path / "alone"), "1", trace)
    assert helped["taken"] == 1 and alone["taken"] == 0
    assert helped["children_left"] == alone["children_left"] == 0
    files = {p.name: p.read_bytes() for p in sorted((tmp_path / "helped").iterdir())}
    assert "kernels_long.parquet" in files
    assert files == {p.name: p.read_bytes() for p in sorted((tmp_path / "alone").iterdir())}
