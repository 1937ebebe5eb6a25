"""What used to end in a traceback is a one-line error naming what and where, or a result: a file name
that is not UTF-8 (the traceback came after the whole analysis), JSON nested deeper than the decoder's
stack inside a trace, a --label that is not UTF-8."""
from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from harness.cli import main

DATA = Path(__file__).parent / "data"
CPU_DEMO = DATA / "embedded-cpu-demo-TP-0-DECODE.trace.json.gz"
SGLANG = DATA / "sglang-real" / "sglang-0.5.17-dsv3-4l-fp8-h200-fused-moe-TP-0-DECODE.trace.json.gz"


def test_a_file_name_that_is_not_utf8_is_shown_escaped_in_every_output(tmp_path, capsys):
    folder = os.fsencode(tmp_path)
    trace = folder + b"/\xff\xfe-TP-0-DECODE.trace.json.gz"
    shutil.copy(CPU_DEMO, os.fsdecode(trace))
    out = os.fsdecode(folder + b"/out\xff")
    assert main(["analyze", os.fsdecode(trace), "--out", out]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "\\xff\\xfe-TP-0-DECODE" in captured.out
    saved = json.loads((Path(out) / "analysis.json").read_text())
    assert saved["run"] == "\\xff\\xfe-TP-0-DECODE"
    assert main(["report", out, "--out", str(tmp_path / "rep")]) == 0


def test_a_missing_file_whose_name_is_not_utf8_is_one_error_line(tmp_path, capsys):
    missing = os.fsdecode(os.fsencode(tmp_path) + b"/\xff-TP-1-DECODE.trace.json.gz")
    assert main(["analyze", missing]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such file" in err[0] and "\\xff-TP-1-DECODE" in err[0]


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_a_trace_with_json_nested_deeper_than_the_decoder_is_one_error_line(tmp_path, capsys, depth):
    doc = json.loads(gzip.decompress(SGLANG.read_bytes()))
    doc["traceEvents"][3]["args"] = {"deep": "NEST"}
    path = tmp_path / "nested-TP-0-DECODE.trace.json"
    path.write_text(json.dumps(doc).replace('"NEST"', "[" * depth + "]" * depth))
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "an event nested too deeply to read" in err[0]
