"""One input, one meaning: the same rank twice under any spelling of its name or with byte-identical
content, traces of several runs, kernels twice on their stream and events far outside their step are
errors (or a failed self-check naming the file), never a silent sum."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main

DATA = Path(__file__).parent / "data" / "sglang-real"
FUSED = DATA / "sglang-0.5.17-dsv3-4l-fp8-h200-fused-moe-TP-0-DECODE.trace.json.gz"
DEEPGEMM = DATA / "sglang-0.5.17-dsv3-4l-fp8-h200-deepgemm-moe-TP-0-DECODE.trace.json.gz"


def _error(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def _copy(source: Path, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, folder / name)
    return folder / name


def test_one_rank_under_two_spellings_is_an_error(tmp_path, capsys):
    """run-TP-0 (every stage) beside run-TP-0-DECODE was one rank twice, summed (exit 0)."""
    plain = _copy(DEEPGEMM, tmp_path, "run-TP-0.trace.json.gz")
    staged = _copy(FUSED, tmp_path, "run-TP-0-DECODE.trace.json.gz")
    assert main(["analyze", str(plain), str(staged)]) == 2
    assert "both claim rank TP0 (DECODE)" in _error(capsys)


@pytest.mark.parametrize("encoding", ["gzip", "plain"])
def test_the_same_trace_under_two_rank_names_is_an_error(tmp_path, capsys, encoding):
    first = _copy(FUSED, tmp_path, "run-TP-0-DECODE.trace.json.gz")
    second = tmp_path / "run-TP-1-DECODE.trace.json"
    if encoding == "gzip":
        second = _copy(FUSED, tmp_path, "run-TP-1-DECODE.trace.json.gz")
    else:  # re-encoded: other bytes, the same kernels
        second.write_bytes(gzip.decompress(FUSED.read_bytes()))
    assert main(["analyze", str(first), str(second)]) == 2
    line = _error(capsys)
    assert f"{first} and {second} hold the same trace" in line


def test_traces_of_two_runs_are_an_error(tmp_path, capsys):
    first = _copy(FUSED, tmp_path, "1795553161.426364-TP-0-DECODE.trace.json.gz")
    second = _copy(DEEPGEMM, tmp_path, "1795556952.6027207-TP-1-DECODE.trace.json.gz")
    assert main(["analyze", str(first), str(second)]) == 2
    assert "come from different runs" in _error(capsys)
    # the user's word, per file, that they are one run's ranks
    assert main(["analyze", str(first), str(second), "--label", f"{first}=TP0", "--label", f"{second}=TP1"]) == 0


def _events(source: Path) -> dict:
    return json.loads(gzip.decompress(source.read_bytes()))


def test_every_kernel_twice_on_its_stream_is_an_error(tmp_path, capsys):
    """Every kernel event doubled doubled every row with all self-checks passing."""
    doc = _events(FUSED)
    doc["traceEvents"] += [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    doubled = tmp_path / "doubled-TP-0-DECODE.trace.json"
    doubled.write_text(json.dumps(doc))
    assert main(["analyze", str(doubled)]) == 2
    line = _error(capsys)
    assert str(doubled) in line and "a stream runs its kernels in turn, so this is one event given twice" in line


def _moved(tmp_path: Path, which: str, shift_us: float) -> Path:
    doc = _events(FUSED)
    kernels = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    event = kernels[-1] if which == "last" else kernels[len(kernels) // 2]
    event["ts"] += shift_us
    path = tmp_path / f"moved-{which}-TP-0-DECODE.trace.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("which, shift_us", [("last", 1e9), ("middle", 5e5)])
def test_an_event_far_outside_its_step_fails_a_self_check_naming_the_file(tmp_path, capsys, which, shift_us):
    """The last kernel moved 1000 s later made a 6.7 ms step last 1000 s, every check passing; a
    kernel of a middle step moved past the next step's start passed too."""
    moved = _moved(tmp_path, which, shift_us)
    assert main(["analyze", str(moved), "--strict"]) == 1
    err = capsys.readouterr().err
    assert "--strict: self-check failed: kernel_durations" in err or "kernel_durations (" in err
    assert any(line.startswith(f"warning: {moved} ") and "kernel_durations failed" in line for line in err.splitlines())


def test_a_dependent_launch_inside_the_kernel_it_waits_for_is_not_a_duplicate():
    """Real: on two H100s SGLang's quantisation kernel starts (programmatic dependent launch) and waits
    inside flashinfer's fused all-reduce on the same stream, 99.9% of it over the all-reduce; two
    different kernels, one trace, which loads."""
    from analysis.ingest.trace_loader import load_trace

    ep = DATA / "ep"
    trace = load_trace(str(ep / "sglang-0.5.17-dsv3-4l-fp8-h100x2-ep-noa2a-eager-TP-0-EP-0-decode.trace.json.gz"))
    by_stream: dict[int, list] = {}
    for k in trace.kernels:
        by_stream.setdefault(k.stream, []).append(k)
    over = [(a, b) for ks in by_stream.values() for a, b in zip(ks, ks[1:]) if b.name != a.name and
            min(a.start_us + a.dur_us, b.start_us + b.dur_us) - b.start_us > 0.9 * min(a.dur_us, b.dur_us)]
    assert over  # the case is in the file: one kernel over more than 90% of the other on its stream
