"""Trace loader: chunked decoding gives the same tables as a whole-document parse, and bad input
gets an error naming the file. Real traces come from the shared folder; the small traces written
here are synthetic, with their expected contents known by construction."""
from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import msgspec
import pytest

from analysis.ingest import trace_loader
from analysis.errors import TraceLoadError
from analysis.ingest.trace_loader import load_trace
from conftest import real_trace
from real_traces import load_sources

TINY_CHUNK_BYTES = 1024  # smaller than many single events: forces cuts, retries and growth


def _inflaters() -> list[str]:
    names = ["zlib"]
    try:
        import isal.isal_zlib  # noqa: F401

        names.append("isal")
    except ImportError:
        pass
    return names


def _use_inflater(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Select the gzip inflater the loader uses (ISA-L when installed, else zlib)."""
    if name == "zlib":
        monkeypatch.setattr(trace_loader, "_inflate_lib", zlib)
        monkeypatch.setattr(trace_loader, "_INFLATE_ERRORS", (zlib.error,))
    else:
        from isal import isal_zlib

        monkeypatch.setattr(trace_loader, "_inflate_lib", isal_zlib)
        monkeypatch.setattr(trace_loader, "_INFLATE_ERRORS", (zlib.error, isal_zlib.error))


# every listed public trace (tests/real_traces.yaml), found or not: a missing one is reported, never dropped
_REAL_TRACES = [t.path for t in load_sources() if not t.path.endswith("execution_details.json")]


def _read_json(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        return json.loads(fh.read())


def _reference_kernels(doc: dict) -> list[tuple[str, float, float]]:
    """Kernels as a whole-document stdlib parse sees them (independent of the loader's code)."""
    rows = [
        (ev["name"], float(ev["ts"]), float(ev.get("dur") or 0.0))
        for ev in doc["traceEvents"]
        if ev.get("ph") == "X" and ev.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    return sorted(rows, key=lambda r: (r[1], r[0]))


@pytest.mark.parametrize("rel", _REAL_TRACES, ids=[Path(p).name for p in _REAL_TRACES])
def test_real_trace_same_result_with_tiny_chunks(rel: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = Path(real_trace(rel))
    default = load_trace(str(path))
    monkeypatch.setattr(trace_loader, "CHUNK_BYTES", TINY_CHUNK_BYTES)
    tiny = load_trace(str(path))
    assert msgspec.json.encode(tiny) == msgspec.json.encode(default)

    doc = _read_json(path)
    if any(ev.get("cat") == "kernel" for ev in doc["traceEvents"]):
        loaded = sorted(((k.name, k.start_us, k.dur_us) for k in default.kernels), key=lambda r: (r[1], r[0]))
        assert loaded == _reference_kernels(doc)
    modules = [ev for ev in doc["traceEvents"] if ev.get("cat") == "python_function" and ev.get("ph") == "X"
               and ev["name"].startswith("nn.Module: ")]
    assert len(default.module_ranges) == len(modules)

    if path.name.endswith(".gz"):  # either inflater, and the same bytes uncompressed, give the same tables
        for inflater in _inflaters():
            _use_inflater(monkeypatch, inflater)
            assert msgspec.json.encode(load_trace(str(path))) == msgspec.json.encode(default)
        plain = tmp_path / path.name[: -len(".gz")]
        plain.write_bytes(gzip.decompress(path.read_bytes()))
        unpacked = load_trace(str(plain))
        assert msgspec.json.encode(msgspec.structs.replace(unpacked, path=default.path)) == msgspec.json.encode(default)


# ---------------------------------------------------------------- synthetic traces (known contents)


def _kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"stream": stream, "correlation": corr, "grid": [1, 1, 1]}}


def _launch(corr: int, ts: float) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 2.0,
            "args": {"correlation": corr, "cbid": 211}}


def _write_trace(path: Path, events: list[dict], pretty: bool = True, **top: object) -> Path:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Synthetic GPU"}], **top, "traceEvents": events,
           "traceName": "synthetic"}
    text = json.dumps(doc, indent=2 if pretty else None)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def _tricky_events(count: int) -> list[dict]:
    """Kernels whose names contain the textual event boundary and array end inside strings."""
    events = []
    for i in range(count):
        name = f'k{i} }}, {{ "ph": "X" }} ] }}, {{'
        events.append(_kernel(name, 100.0 + 10 * i, 5.0, 1000 + i, stream=7 + i % 2))
        events.append(_launch(1000 + i, 95.0 + 10 * i))
        events.append({"ph": "f", "id": 1000 + i, "pid": 0, "tid": 7, "ts": 100.0 + 10 * i, "cat": "ac2g", "name": "ac2g"})
    # One event longer than a tiny slice, full of false boundaries: forces the buffer to grow.
    events.append({"ph": "X", "cat": "user_annotation", "name": "}, {" * 600, "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0})
    events.append({"ph": "X", "cat": "gpu_user_annotation", "name": "step[DECODE bs=1]", "pid": 0, "tid": 7,
                   "ts": 99.0, "dur": 10.0 * count + 10})
    events.append({"ph": "X", "cat": "python_function", "name": "nn.Module: Block_0", "pid": 1, "tid": 1,
                   "ts": 90.0, "dur": 10.0 * count})
    return events


@pytest.mark.parametrize("pretty", [True, False], ids=["pretty", "compact"])
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_synthetic_boundaries_inside_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pretty: bool, suffix: str) -> None:
    path = _write_trace(tmp_path / f"tricky-TP-0-DECODE.trace{suffix}", _tricky_events(300), pretty=pretty)
    monkeypatch.setattr(trace_loader, "CHUNK_BYTES", TINY_CHUNK_BYTES)
    trace = load_trace(str(path))
    assert [k.name for k in trace.kernels] == [f'k{i} }}, {{ "ph": "X" }} ] }}, {{' for i in range(300)]
    assert [k.stream for k in trace.kernels[:3]] == [7, 8, 7]
    assert {k.launcher for k in trace.kernels} == {"cudaLaunchKernel"}
    assert [r.name for r in trace.gpu_annotations] == ["step[DECODE bs=1]"]
    assert [r.name for r in trace.cpu_annotations] == ["}, {" * 600]
    assert [(r.name, r.dur_us) for r in trace.module_ranges] == [("Block_0", 3000.0)]
    assert trace.device_name == "Synthetic GPU"
    assert trace.json_bytes == len(gzip.decompress(path.read_bytes()) if suffix.endswith(".gz") else path.read_bytes())
    monkeypatch.setattr(trace_loader, "CHUNK_BYTES", 4 * 1024 * 1024)
    assert msgspec.json.encode(load_trace(str(path))) == msgspec.json.encode(trace)


@pytest.mark.parametrize("inflater", _inflaters())
def test_concatenated_gzip_members(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inflater: str) -> None:
    _use_inflater(monkeypatch, inflater)
    text = json.dumps({"traceEvents": [_kernel("a", 1.0, 2.0, 1), _kernel("b", 5.0, 1.0, 2)]}).encode()
    path = tmp_path / "two-members.json.gz"
    path.write_bytes(gzip.compress(text[:40]) + gzip.compress(text[40:]))
    assert [k.name for k in load_trace(str(path)).kernels] == ["a", "b"]


def test_cpu_only_trace_yields_operators_by_self_time(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 3, "ts": 0.0, "dur": 10.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 3, "ts": 1.0, "dur": 8.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::resolve_conj", "pid": 1, "tid": 3, "ts": 2.0, "dur": 0.5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 3, "ts": 12.0, "dur": 3.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 4, "ts": 2.0, "dur": 1.0},
    ]
    trace = load_trace(str(_write_trace(tmp_path / "cpu.json", events)))
    # Each operator keeps its duration less its direct children's: no time counted twice or lost.
    assert [(k.name, k.stream, k.start_us, k.dur_us, k.launcher, k.kind) for k in trace.kernels] == [
        ("aten::linear", 3, 0.0, 2.0, "cpu", "cpu_op"),
        ("aten::addmm", 3, 1.0, 7.5, "cpu", "cpu_op"),
        ("aten::resolve_conj", 3, 2.0, 0.5, "cpu", "cpu_op"),
        ("aten::mul", 4, 2.0, 1.0, "cpu", "cpu_op"),
        ("aten::relu", 3, 12.0, 3.0, "cpu", "cpu_op"),
    ]
    assert sum(k.dur_us for k in trace.kernels if k.stream == 3) == 10.0 + 3.0


def _assert_load_error(path: Path, *words: str) -> None:
    with pytest.raises(TraceLoadError) as info:
        load_trace(str(path))
    message = str(info.value)
    assert str(path) in message
    for word in words:
        assert word in message


def test_error_no_kernels_and_no_cpu_ops(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "python_function", "name": "foo", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0}]
    _assert_load_error(_write_trace(tmp_path / "nothing.json", events), "no kernel events", "1 events")


def test_error_not_json(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    path.write_text("this is not a trace\n")
    _assert_load_error(path, "not JSON")


@pytest.mark.parametrize("inflater", _inflaters())
def test_error_truncated_gzip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inflater: str) -> None:
    _use_inflater(monkeypatch, inflater)
    full = _write_trace(tmp_path / "full.json.gz", _tricky_events(200)).read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(full[: len(full) // 2])
    _assert_load_error(path, "truncated gzip")


@pytest.mark.parametrize("inflater", _inflaters())
def test_error_corrupt_gzip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inflater: str) -> None:
    _use_inflater(monkeypatch, inflater)
    full = bytearray(_write_trace(tmp_path / "full.json.gz", _tricky_events(200)).read_bytes())
    full[200:260] = b"\xff" * 60
    path = tmp_path / "corrupt.json.gz"
    path.write_bytes(bytes(full))
    _assert_load_error(path, "gzip")


def test_error_truncated_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full = _write_trace(tmp_path / "full.json", _tricky_events(200)).read_bytes()
    path = tmp_path / "cut.json"
    path.write_bytes(full[: len(full) * 2 // 3])
    monkeypatch.setattr(trace_loader, "CHUNK_BYTES", TINY_CHUNK_BYTES)
    _assert_load_error(path, "truncated")


def test_error_json_without_trace_events(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"schemaVersion": 1, "events": []}))
    _assert_load_error(path, "traceEvents")


def test_error_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    _assert_load_error(path, "empty file")


def test_error_missing_file(tmp_path: Path) -> None:
    _assert_load_error(tmp_path / "absent.json.gz", "no such file")


def test_rank_identity_from_sglang_file_names_classic_and_profile_v2():
    from analysis.ingest.rank_id import parse_rank_id

    classic = parse_rank_id("run-1782799835.6-TP-3-DP-3-PP-1-EP-3-DECODE.trace.json.gz")
    assert (classic.tp, classic.dp, classic.pp, classic.ep, classic.stage, classic.label) == \
        (3, 3, 1, 3, "DECODE", "TP3-DP3-PP1-EP3")
    v2 = parse_rank_id("run-1782799835.6-TP-0-EP-0-decode.trace.json.gz")  # SGLang's profile V2: lower case
    assert (v2.tp, v2.ep, v2.stage, v2.label) == (0, 0, "DECODE", "TP0-EP0")
    assert parse_rank_id("trace.json.gz") is None
