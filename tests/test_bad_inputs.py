"""Bad input is a one-line error naming what and where (exit 2), never a sum that quietly includes it.

Fixtures are the real SGLang 0.5.17 trace of tests/data with one field mutated (named per test), so
the expected event index is known: event 450 is that trace's first kernel.
"""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from analysis.pipeline import AnalysisOptions, analyze
from analysis.errors import AnalysisError, SignatureError, TraceLoadError
from analysis.ingest.trace_loader import load_trace
from harness.cli import main

DATA = Path(__file__).parent / "data"
SGLANG = DATA / "sglang-real" / "sglang-0.5.17-dsv3-4l-fp8-h200-fused-moe-TP-0-DECODE.trace.json.gz"
CPU_DEMO = DATA / "embedded-cpu-demo-TP-0-DECODE.trace.json.gz"
FIRST_KERNEL = 450


def _doc(path: Path = SGLANG) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _mutated(tmp_path: Path, name: str, change, source: Path = SGLANG) -> Path:
    doc = _doc(source)
    change(doc["traceEvents"])
    out = tmp_path / name
    out.write_text(json.dumps(doc))
    return out


def _set(index: int, key: str, value):
    def change(events):
        events[index][key] = value
    return change


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


@pytest.mark.parametrize("value, shown", [(-3.5, "dur -3.5"), (None, "dur missing")])
def test_a_bad_kernel_duration_names_file_event_and_value(tmp_path, value, shown):
    def change(events):
        if value is None:
            del events[FIRST_KERNEL]["dur"]
        else:
            events[FIRST_KERNEL]["dur"] = value

    bad = _mutated(tmp_path, "bad-TP-0-DECODE.trace.json", change)
    with pytest.raises(TraceLoadError, match=rf"bad-TP-0-DECODE\.trace\.json: event {FIRST_KERNEL} \(kernel .*\): {shown}"):
        load_trace(str(bad))


def test_an_absurd_kernel_duration_is_an_error_not_a_200000_second_step(tmp_path, capsys):
    bad = _mutated(tmp_path, "huge-TP-0-DECODE.trace.json", _set(FIRST_KERNEL + 4, "dur", 1e12))
    assert main(["analyze", str(bad)]) == 2
    line = _one_error_line(capsys)
    assert f"event {FIRST_KERNEL + 4}" in line and "dur 1000000000000.0 us is longer than the whole trace" in line


def test_a_cpu_only_trace_checks_its_operators_durations(tmp_path):
    doc = _doc(CPU_DEMO)
    index = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "cpu_op")
    doc["traceEvents"][index]["dur"] = -1
    bad = tmp_path / "cpu-TP-0-DECODE.trace.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(TraceLoadError, match=rf"event {index} \(cpu_op .*\): dur -1"):
        load_trace(str(bad))


def test_the_loader_keeps_the_decoders_location_and_message(tmp_path):
    bad = _mutated(tmp_path, "str-TP-0-DECODE.trace.json", _set(FIRST_KERNEL, "dur", "12"))
    with pytest.raises(TraceLoadError) as err:
        load_trace(str(bad))
    assert "Expected `float | null`, got `str` - at `$.traceEvents[450].dur`" in str(err.value)


def test_the_same_file_twice_is_an_error(capsys):
    assert main(["analyze", str(SGLANG), str(SGLANG)]) == 2
    assert "given twice" in _one_error_line(capsys)


def test_two_files_claiming_one_rank_are_an_error_that_names_the_fix(tmp_path, capsys):
    other = tmp_path / "other-run-TP-0-DECODE.trace.json.gz"
    shutil.copy(SGLANG.with_name(SGLANG.name.replace("fused-moe", "deepgemm-moe")), other)
    assert main(["analyze", str(SGLANG), str(other)]) == 2
    line = _one_error_line(capsys)
    assert "both claim rank TP0" in line and "--label FILE=LABEL" in line
    # told apart by --label, they are two ranks
    assert main(["analyze", str(SGLANG), str(other), "--label", f"{other}=TP1"]) == 0
    assert "ranks 2 (mean)" in capsys.readouterr().out


def test_a_file_without_rank_identity_among_ranked_ones_is_an_error(tmp_path, capsys):
    unnamed = tmp_path / "profile.trace.json.gz"
    shutil.copy(SGLANG, unnamed)
    assert main(["analyze", str(SGLANG), str(unnamed)]) == 2
    line = _one_error_line(capsys)
    assert "profile.trace.json.gz: no rank in the file name" in line and "--label" in line


def test_failed_files_are_named_under_the_table_and_in_analysis_json(tmp_path, capsys):
    broken = _mutated(tmp_path, SGLANG.name.replace("TP-0", "TP-1").removesuffix(".gz"), _set(FIRST_KERNEL, "dur", -1))
    assert main(["analyze", str(SGLANG), str(broken), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "ranks 1 of 2 (mean)" in out
    assert f"NOT ANALYSED, left out of the table: {broken}: event {FIRST_KERNEL}" in out
    saved = json.loads((tmp_path / "out" / "analysis.json").read_text())
    assert saved["d4"]["failed_files"] and str(broken) in saved["d4"]["failed_files"][0]


def test_a_negative_accept_length_is_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["analyze", str(SGLANG), "--accept-length", "-2"])
    assert stop.value.code == 2 and "--accept-length" in _one_error_line(capsys)
    with pytest.raises(AnalysisError, match="accept length must be a positive number"):
        analyze([str(SGLANG)], options=AnalysisOptions(accept_length=-2.0))


@pytest.mark.parametrize("argv, option", [
    (["analyze", "x", "--rank-policy", "bogus"], "--rank-policy"),
    (["analyze", "x", "--layers", "0"], "--layers"),
    (["analyze", "x", "--step-gap-us", "nan"], "--step-gap-us"),
    (["analyze", "x", "--jobs", "-1"], "--jobs"),
    (["analyze", "x", "--batch-per-rank", "0", "--hardware", "h200", "--kv-len", "10"], "--batch-per-rank"),
    (["report", "x", "--top", "0"], "--top"),
    (["metrics", "x", "--pushgateway", "not a url"], "--pushgateway"),
    (["run", "--scenario", "demo", "--metrics-port", "70000"], "--metrics-port"),
    (["run", "--scenario", "demo", "--pushgateway", "http://"], "--pushgateway"),
])
def test_options_are_checked_at_parse_time(argv, option, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert f"argument {option}" in _one_error_line(capsys)


def test_a_rank_policy_naming_no_analysed_rank_is_an_error(capsys):
    assert main(["analyze", str(SGLANG), "--rank-policy", "rank:TP7"]) == 2
    assert "rank:TP7" in _one_error_line(capsys)


def test_compare_says_when_layer_counts_differ(tmp_path, capsys):
    assert main(["analyze", str(SGLANG), "--out", str(tmp_path / "four")]) == 0
    twelve = tmp_path / "twelve"  # the same analysis, its layer count changed to 12 (a mutated fixture)
    shutil.copytree(tmp_path / "four", twelve)
    saved = json.loads((twelve / "analysis.json").read_text())
    saved["d4"]["num_layers"] = 12.0
    (twelve / "analysis.json").write_text(json.dumps(saved))
    (twelve / ".moe-harness-analyze.json").unlink()  # hand-made: no record vouches for it (nor refutes it)
    capsys.readouterr()
    assert main(["compare", f"a={tmp_path / 'four'}", f"b={twelve}"]) == 0
    captured = capsys.readouterr()
    assert "LAYER COUNTS DIFFER: a 4, b 12" in captured.out and "LAYER COUNTS DIFFER" in captured.err


@pytest.mark.parametrize("where, bad", [
    ("families", '[{family: gemm, group: moe, match: "gemm(("}]'),
    ("module_ranges", '{layer: "x", map: [{match: "a", group: g, module: m, within: "[z"}]}'),
    ("layer_weights", None),
])
def test_every_signature_regex_compiles_at_load_naming_its_key(tmp_path, where, bad):
    from analysis.attribution.signature import load_signature

    if where == "layer_weights":
        text = ("name: s\ndescription: d\nlayer:\n  - {group: a, module: b, kernel: c, match: x, anchor: true, "
                "weights: {'(bad': 1.0}}\n")
        key = "layer.0.weights"
    else:
        families = "" if where == "families" else "families: [{family: f, group: g, match: f}]\n"  # a key once
        text = f"name: s\ndescription: d\ngeneric: true\n{families}{where}: {bad}\n"
        key = "families.0.match" if where == "families" else "module_ranges.map.0.within"
    path = tmp_path / "sig.yaml"
    path.write_text(text)
    with pytest.raises(SignatureError, match=rf"{key}: .*not a valid regex"):
        load_signature(str(path))


def test_plan_on_an_invalid_scenario_is_one_error(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nengine: {kind: sglang, model_path: m}\nworkload: {batch_size: -1}\n")
    assert main(["plan", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "workload.batch_size (line 3)" in err and "Traceback" not in err


@pytest.mark.parametrize("runs_dir, says", [("file", "is a file, not a folder"), ("/proc/moe-runs", "cannot write in /proc")])
def test_a_runs_dir_that_cannot_hold_runs_is_refused_before_anything_starts(tmp_path, capsys, runs_dir, says):
    if runs_dir == "file":
        runs_dir = str(tmp_path / "file")
        Path(runs_dir).write_text("mine\n")
    assert main(["run", "--scenario", "demo", "--runs-dir", runs_dir]) == 2
    assert says in _one_error_line(capsys)


def test_a_kernel_without_a_start_is_an_error_not_dropped_from_the_sums(tmp_path):
    def change(events):
        del events[FIRST_KERNEL]["ts"]

    bad = _mutated(tmp_path, "nots-TP-0-DECODE.trace.json", change)
    with pytest.raises(TraceLoadError, match=rf"event {FIRST_KERNEL} \(kernel .*\): ts missing"):
        load_trace(str(bad))


def test_invalid_utf8_is_one_error_line_not_a_traceback(tmp_path, capsys):
    """Bytes that are not UTF-8 where the loader decodes a string (a kernel's name): msgspec raised
    UnicodeDecodeError, which escaped the loader's error handling."""
    doc = _doc()
    doc["traceEvents"][FIRST_KERNEL]["name"] = "KERNEL_NAME_MARK"
    raw = json.dumps(doc).encode().replace(b"KERNEL_NAME_MARK", b"kernel\x94\xff")
    bad = tmp_path / "utf8-TP-0-DECODE.trace.json"
    bad.write_bytes(raw)
    assert main(["analyze", str(bad)]) == 2
    assert str(bad) in _one_error_line(capsys)


def test_run_refuses_a_scenario_one_line_per_problem_each_naming_the_file(tmp_path, capsys):
    """As `validate` does: a header line and indented bullets were lines a log search could not tie
    to the file."""
    path = tmp_path / "bad.yaml"
    path.write_text('name: x\nengine:\n  kind: sglang\n  bogus: 1\n  model_path: "a\\0b"\n')
    assert main(["run", "--scenario", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith(f"moe-harness run: {path}: ") for line in lines), lines
    assert any("engine.bogus (line 4): unknown key" in line for line in lines), lines
