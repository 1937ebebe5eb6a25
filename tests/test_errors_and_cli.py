"""Bad input gets a clear error naming the file; a bad rank does not stop the others; the CLI works."""
import gzip
import json
import shutil

import pytest

from analysis.pipeline import analyze
from analysis.errors import AnalysisError, SignatureError, TraceLoadError
from analysis.attribution.signature import load_signature
from analysis.ingest.trace_loader import load_trace
from conftest import real_trace
from harness.cli import main

QWEN = "nvidia/sglang_qwen3-30b-a3b_b300/1782799835.6885648-TP-0-DECODE.trace.json.gz"


def test_not_json(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("hello")
    with pytest.raises(TraceLoadError, match=r"x\.json: not JSON"):
        load_trace(str(bad))


def test_truncated_gzip(tmp_path):
    data = open(real_trace(QWEN), "rb").read()
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceLoadError, match=r"cut\.json\.gz: truncated gzip"):
        load_trace(str(bad))


def test_no_kernel_events(tmp_path):
    bad = tmp_path / "empty.json"
    bad.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "python_function", "name": "f", "ts": 1, "dur": 2}]}))
    with pytest.raises(TraceLoadError, match=r"empty\.json: no kernel events"):
        load_trace(str(bad))


def test_layer_count_mismatch_is_flagged_and_the_table_still_shows_what_was_found():
    from analysis.pipeline import AnalysisOptions
    from analysis.tables.d4 import render_markdown

    result = analyze([real_trace(QWEN)], signature="generic", model="deepseek-v3")
    step = result.step_rows[0]
    assert step.status == "layer_count_mismatch" and "48" in step.note and "61" in step.note
    assert result.d4.steps_used == 1 and result.d4.steps_mismatched == 1 and result.d4.rows
    assert any("layer_count_mismatch" in p.message for p in result.problems)
    table = render_markdown([result.d4])
    assert "LAYER COUNT MISMATCH in 1 of 1 steps" in table and "expected 61" in table
    # --layers says the same without a model file; the right count clears the flag
    assert analyze([real_trace(QWEN)], options=AnalysisOptions(layers=61)).step_rows[0].status == "layer_count_mismatch"
    assert analyze([real_trace(QWEN)], options=AnalysisOptions(layers=48)).step_rows[0].status == "ok"


def test_strict_that_leaves_out_every_step_is_an_error_not_a_table_of_zeros():
    from analysis.pipeline import AnalysisOptions

    with pytest.raises(AnalysisError, match=r"--strict left out all 1 decode steps.*found 48, expected 61"):
        analyze([real_trace(QWEN)], signature="generic", model="deepseek-v3", options=AnalysisOptions(strict=True))


def test_bad_rank_does_not_stop_the_others(tmp_path):
    good = tmp_path / "r-TP-0-DECODE.trace.json.gz"
    shutil.copy(real_trace(QWEN), good)
    bad = tmp_path / "r-TP-1-DECODE.trace.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [')[:-4])
    result = analyze([str(good), str(bad)], signature="generic")
    assert result.d4.ranks == ["TP0"]
    assert [(p.rank, p.path) for p in result.problems] == [("TP1", str(bad))]
    with pytest.raises(AnalysisError, match="no rank could be analysed"):
        analyze([str(bad)], signature="generic")


def test_bad_signature_names_file_and_key(tmp_path):
    sig = tmp_path / "mine.yaml"
    sig.write_text("name: x\ndescription: y\nlayer:\n  - {group: a, module: b, kernel: c, match: '(', anchor: true}\n")
    with pytest.raises(SignatureError, match=r"mine\.yaml.*layer\.0\.match"):
        load_signature(str(sig))
    with pytest.raises(SignatureError, match="no built-in signature"):
        load_signature("no-such-stack")


def test_cli_analyze_and_compare_both_languages(tmp_path, capsys):
    trace = real_trace(QWEN)
    out = tmp_path / "a"
    assert main(["analyze", trace, "--model", "qwen3-30b-a3b", "--out", str(out), "--name", "b300"]) == 0
    for name in ("d4.md", "d4.csv", "kernels_long.parquet", "steps.csv", "streams.csv", "analysis.json"):
        assert (out / name).stat().st_size > 0
    capsys.readouterr()
    assert main(["compare", f"h800 ds prof={out}", f"b200 mtp on={trace}", "--lang", "zh", "--out", str(tmp_path / "c")]) == 0
    table = capsys.readouterr().out
    assert "| 层级 | 模块 | Kernel | h800 ds prof | b200 mtp on |" in table
    assert "端到端" in table and "48层执行耗时" in table
    assert main(["compare", f"left={out}", f"right={out}"]) == 0
    english = capsys.readouterr().out
    assert "| group | module | kernel | left | right |" in english and "all 48 layers (ms)" in english
    lines = [l for l in english.splitlines() if l.startswith("| attention | attn_core |")]
    assert lines and lines[0].split("|")[4].strip() == lines[0].split("|")[5].strip()
    assert (tmp_path / "c" / "compare.csv").read_text(encoding="utf-8").startswith("层级,模块,Kernel")


def test_cli_reports_missing_file(capsys):
    assert main(["analyze", "/nonexistent/x-TP-0.trace.json.gz"]) == 2
    assert "/nonexistent/x-TP-0.trace.json.gz: no such file" in capsys.readouterr().err
