"""The annotated trace: the bundled real run's trace with its attribution as slices beside each
stream, loaded back with the project's own loader and held to the chrome trace format's rules."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest

from analysis.pipeline import AnalysisOptions, analyze, load_trace
from analysis.errors import AnalysisError
from analysis.report.annotated_trace import SLICE_CAT, TRACK_SUFFIX, annotate_trace, annotated_name
from chrome_trace_rules import problems

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests/data/sglang-real/ray-run/sglang_dsv3_4l_1gpu_full-20261124-214640"
TRACE = next((RUN / "traces").glob("*.trace.json.gz"))
MODULE_LEVEL = 3  # step, layer, group, module


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    analysis = analyze([str(TRACE)], options=AnalysisOptions(run="full", jobs=1))
    out = tmp_path_factory.mktemp("annotated") / annotated_name(TRACE)
    result = annotate_trace(TRACE, analysis.kernel_rows, out)
    with gzip.open(out, "rt") as fh:
        doc = json.load(fh)
    return analysis, result, doc


def _tracks(doc) -> dict[tuple, str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == "thread_name" and e["args"]["name"].endswith(TRACK_SUFFIX)}


def test_the_loader_reads_the_same_kernels_and_the_new_slices(annotated):
    analysis, result, _ = annotated
    before, after = load_trace(str(TRACE)), load_trace(str(result.path))
    assert after.kernels == before.kernels and len(after.kernels) == 1074
    assert after.rank.label == before.rank.label == "TP0"
    new = [r for r in after.gpu_annotations if r not in before.gpu_annotations]
    assert len(new) == result.slices == len(after.gpu_annotations) - len(before.gpu_annotations) > 0
    assert {r.tid for r in new} == set(result.tracks.values()) and set(result.tracks) == {13, 29, 33, 142}


def test_every_kernel_sits_under_a_slice_naming_its_layer_group_and_module(annotated):
    analysis, result, doc = annotated
    by_track = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == SLICE_CAT and "module" in e.get("args", {}):
            by_track[e["tid"]].append(e)
    for row in analysis.kernel_rows:
        around = [e for e in by_track[result.tracks[row.stream]]  # half-open: a slice may end where the next starts
                  if e["ts"] <= row.start_us < e["ts"] + max(e["dur"], 1e-9)]
        assert len(around) == 1, row
        args = around[0]["args"]
        assert (args["layer"], args["group"], args["module"]) == (row.layer, row.group, row.module), row
        assert around[0]["name"] == row.module and row.rule in args["rule"].split(", ")


def test_the_shared_experts_track_runs_beside_the_routed_experts(annotated):
    """Stream 142 runs the shared experts while stream 13 runs the MoE layer's routing and experts."""
    _, result, doc = annotated
    slices = [e for e in doc["traceEvents"] if e.get("cat") == SLICE_CAT and e.get("ph") == "X"]
    shared = [e for e in slices if e["tid"] == result.tracks[142] and e["name"] == "combine/share overlap"]
    main = [e for e in slices if e["tid"] == result.tracks[13] and e["name"] in ("gate", "moe")]
    assert len(shared) == 18  # 3 MoE layers x 6 steps
    assert all(any(m["ts"] < s["ts"] + s["dur"] and s["ts"] < m["ts"] + m["dur"] for m in main) for s in shared)
    layers = [e["name"] for e in slices if e["tid"] == result.tracks[13] and e["name"].startswith("layer ")]
    assert layers[:4] == ["layer 0 · dense", "layer 1 · MoE", "layer 2 · MoE", "layer 3 · MoE"]


def test_the_annotated_trace_keeps_the_chrome_trace_format(annotated):
    _, result, doc = annotated
    tracks = _tracks(doc)
    assert len(tracks) == 4 and all(name.startswith("stream ") for name in tracks.values())
    assert problems(doc, nested_tids=set(tracks)) == []
    original = json.load(gzip.open(TRACE, "rt"))
    kept = doc["traceEvents"][: len(original["traceEvents"])]
    assert kept == original["traceEvents"]  # nothing of the input changed
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == {k: v for k, v in original.items() if k != "traceEvents"}


def test_the_rules_checker_catches_what_it_checks():
    """The checker is not a rubber stamp: each broken rule is named."""
    good = {"ph": "X", "name": "a", "pid": 0, "tid": 1, "ts": 10.0, "dur": 5.0}
    assert problems({"traceEvents": [good]}, {(0, 1)}) == []
    broken = [
        {**good, "dur": -1.0},
        {**good, "ts": None},
        {**good, "ph": "?"},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {}},
        {"ph": "M", "name": "made_up", "pid": 0, "tid": 1, "args": {"name": "x"}},
        {**good, "args": []},
    ]
    for ev in broken:
        assert problems({"traceEvents": [ev]}), ev
    overlapping = [good, {**good, "ts": 12.0, "dur": 5.0}]  # starts inside, ends after
    assert problems({"traceEvents": overlapping}, {(0, 1)}) and not problems({"traceEvents": overlapping})
    assert problems({"traceEvents": [{"ph": "B", "name": "a", "pid": 0, "tid": 1, "ts": 1.0}]})
    assert problems({"events": []}) and problems({"traceEvents": [], "displayTimeUnit": "s"})


def test_analysing_the_annotated_trace_again_gives_the_same_table(annotated):
    """The slices are neither step labels nor group.module annotations: they change no attribution."""
    analysis, result, _ = annotated
    again = analyze([str(result.path)], options=AnalysisOptions(run="full", jobs=1))
    assert again.d4.rows == analysis.d4.rows and again.d4.step_ms == analysis.d4.step_ms
    assert [(r.group, r.module, r.layer) for r in again.kernel_rows] == \
        [(r.group, r.module, r.layer) for r in analysis.kernel_rows]


def test_rows_of_another_trace_are_refused(annotated, tmp_path):
    analysis, _, _ = annotated
    other = [r.__copy__() for r in analysis.kernel_rows[:3]]
    for r in other:
        r.stream = 77
    with pytest.raises(AnalysisError, match=r"stream\(s\) 77, on which this trace runs no kernel"):
        annotate_trace(TRACE, other, tmp_path / "x.trace.json.gz")
    assert not (tmp_path / "x.trace.json.gz").exists()
