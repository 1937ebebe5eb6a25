"""Run directories as inputs of `analyze`, `report`, `compare`, `metrics` and `export`, on copies of a
real run directory (tests/data/sglang-real/ray-run: SGLang 0.5.17 on one H100, expert load recorded):
its traces analysed again with the options the run recorded; a stray file in traces/ left out with
a note; a partial run directory refused in one line naming what is missing and where, or read from
its stored analysis where that is what the command reads. (That the re-analysis equals the run's own
tables is tests/test_ray_job_real.py's and the run tests' business.)"""
from __future__ import annotations

import re
import hashlib

import json
import shutil
from pathlib import Path

import pytest
import yaml

from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "tests/data/sglang-real/ray-run/sglang_dsv3_4l_1gpu_full-20261124-214640"


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A copy of the bundled run directory that a test may break."""
    return Path(shutil.copytree(BUNDLED, tmp_path / BUNDLED.name))


def _one_line_error(capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("moe-harness "), err
    assert all(w in err for w in words), err
    return err


def test_analyze_takes_a_run_directory_and_uses_what_the_run_recorded(run_dir, tmp_path, capsys):
    assert main(["analyze", str(run_dir), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    d4 = (tmp_path / "out" / "d4.md").read_text()
    assert f"| group | module | kernel | {run_dir.name} |" in d4  # the run's name, not the trace file's
    assert "found 4 layers (1 dense + 3 MoE)" in d4  # the recorded model file: 4 layers expected
    assert "| expert load | layer 1 | busiest / mean tokens |" in d4  # expert_load/expert_load.json
    # the notes under the table too; the problems line names where problems.csv is: here --out, in the run its folder
    where = re.compile(r"(problem\(s\) reported by the analysis: see ).*problems\.csv")
    assert where.sub(r"\1problems.csv", printed).startswith(where.sub(r"\1problems.csv", (run_dir / "table.md").read_text()))
    assert "Not calibrated: SGLang 0.5.17 records its capture traces without Python stacks" in printed


def test_a_file_in_traces_that_is_not_a_trace_is_left_out_with_a_note(run_dir, tmp_path, capsys):
    (run_dir / "traces" / "README.txt").write_text("copied by hand\n")
    (run_dir / "traces" / "notes.json").write_text("{}\n")
    assert main(["analyze", str(run_dir), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert f"note: {run_dir / 'traces' / 'README.txt'}: left out, not a trace file" in err
    assert f"note: {run_dir / 'traces' / 'notes.json'}: left out, not one of the run's traces" in err
    assert (tmp_path / "out" / "d4.csv").read_text() == (BUNDLED / "analysis" / "d4.csv").read_text()


def _as_a_run_that_kept_no_traces(run_dir: Path) -> None:
    """The copy made a run with outputs.keep_traces: false: no traces/, and its scenario.yaml says so,
    as the run's manifest lists it (a scenario.yaml edited behind the manifest is refused)."""
    shutil.rmtree(run_dir / "traces")
    scenario = yaml.safe_load((run_dir / "scenario.yaml").read_text())
    scenario["outputs"]["keep_traces"] = False
    text = yaml.safe_dump(scenario, sort_keys=False).encode()
    (run_dir / "scenario.yaml").write_bytes(text)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    entry = next(e for e in manifest["files"] if e["path"] == "scenario.yaml")
    entry.update(bytes=len(text), sha256=hashlib.sha256(text).hexdigest())
    (run_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))


def test_a_run_that_kept_no_traces_is_refused_in_one_line(run_dir, tmp_path, capsys):
    _as_a_run_that_kept_no_traces(run_dir)
    assert main(["analyze", str(run_dir), "--out", str(tmp_path / "out")]) == 2
    _one_line_error(capsys, str(run_dir), "kept no traces", "outputs.keep_traces: false", "analysis")
    assert not (tmp_path / "out").exists()


def test_a_failed_run_without_traces_says_where_it_looked_and_where_it_stopped(run_dir, capsys):
    shutil.rmtree(run_dir / "traces")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for key in ("traces", "node_traces"):
        del manifest[key]
    manifest.update(status="failed", error={"phase": "load to a running batch of 16", "message": "server died"})
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    assert main(["analyze", str(run_dir)]) == 2
    _one_line_error(capsys, str(run_dir / "traces"), "no trace files", "run status failed",
                    "stopped during load to a running batch of 16")


def test_a_trace_the_run_kept_but_is_gone_is_named(run_dir, capsys):
    trace = next((run_dir / "traces").iterdir())
    trace.rename(run_dir / trace.name)
    assert main(["analyze", str(run_dir)]) == 2
    _one_line_error(capsys, str(run_dir / "traces"), "1 of the run's 1 traces are missing", trace.name)


def test_a_run_directory_without_manifest_is_refused_in_one_line(run_dir, capsys):
    (run_dir / "manifest.json").unlink()
    assert main(["analyze", str(run_dir)]) == 2
    _one_line_error(capsys, str(run_dir), "no manifest.json", "stopped before the end")


def test_options_that_would_change_the_runs_analysis_are_refused(run_dir, capsys):
    assert main(["analyze", str(run_dir), "--signature", "generic", "--model", "deepseek-v3"]) == 2
    _one_line_error(capsys, "--signature, --model", "options its run recorded", str(run_dir / "traces"))
    trace = next((run_dir / "traces").iterdir())
    assert main(["analyze", str(run_dir), str(trace)]) == 2
    _one_line_error(capsys, "give it alone")


def test_report_of_a_run_directory_without_kernels_long_analyses_its_traces_again(run_dir, tmp_path, capsys):
    """The bundled runs leave the kernel table out: the report used to find manifest.json and the
    analysis files among the 'traces' and write a report without D4 rows."""
    assert main(["report", str(run_dir), "--out", str(tmp_path / "report")]) == 0
    report = (tmp_path / "report" / "kernel_report.md").read_text()
    assert "could not be analysed" not in report
    assert "Analysed again from the run's 1 trace(s) with the options it recorded" in report
    assert "### Each row 2x faster" in report and "| moe | up_gate_gemm |" in report  # what-if over the D4 rows
    assert f"Sources: `{run_dir / 'traces'}/" in report


def test_compare_and_export_analyse_a_run_again_where_its_tables_are_missing(run_dir, tmp_path, capsys):
    (run_dir / "analysis" / "analysis.json").unlink()
    assert main(["compare", f"again={run_dir}", "--out", str(tmp_path / "compare")]) == 0
    stored = (BUNDLED / "analysis" / "d4.csv").read_text().splitlines()
    compared = (tmp_path / "compare" / "compare.csv").read_text().splitlines()
    assert compared[1:] == stored[1:] and compared[0].endswith(",again")

    capsys.readouterr()
    assert main(["export", str(run_dir), "--out", str(tmp_path / "export")]) == 0
    assert "analysis/kernels_long.parquet not found: exporting from the run's 1 trace(s) analysed again" in \
        capsys.readouterr().err
    kernels = (tmp_path / "export" / "kernels_long.csv").read_text().splitlines()
    assert len(kernels) > 1000 and kernels[1].startswith(f"1,{run_dir.name},TP0,")


def test_a_run_that_kept_no_traces_is_read_from_its_stored_tables_where_they_suffice(run_dir, tmp_path, capsys):
    _as_a_run_that_kept_no_traces(run_dir)
    capsys.readouterr()
    # compare and metrics read analysis.json and d4_detail.csv, which the run kept
    assert main(["compare", f"kept={run_dir}"]) == 0
    assert "| moe | up_gate_gemm |" in capsys.readouterr().out
    assert main(["metrics", str(run_dir)]) == 0
    assert 'moe_harness_layer_module_busy_seconds{' in capsys.readouterr().out
    # report and export need the kernel table, which this run left out: one line each, naming why
    assert main(["report", str(run_dir), "--out", str(tmp_path / "report")]) == 2
    _one_line_error(capsys, str(run_dir), "kept no traces")
    assert main(["export", str(run_dir), "--out", str(tmp_path / "export")]) == 1
    _one_line_error(capsys, str(run_dir), "kept no traces")
    assert not (tmp_path / "report").exists() and not list((tmp_path / "export").glob("*"))


def test_the_maintenance_script_rewrites_only_what_changed_and_keeps_the_nodes_table(run_dir, capsys):
    """benchmarks/reanalyse_run_dir.py on a run whose stored d4.csv and table.md an older analysis wrote."""
    from benchmarks.reanalyse_run_dir import NODE_TABLE, main as reanalyse_run_dir

    d4, table = run_dir / "analysis" / "d4.csv", run_dir / "table.md"
    (run_dir / NODE_TABLE).unlink(missing_ok=True)  # this copy's table.md stands for the node's own
    current = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    d4.write_text(d4.read_text().replace("fused_moe", "older_name"))
    table.write_text(table.read_text() + "\nA note an older node wrote.\n")
    older = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    args = [str(run_dir), "--leave-out", "kernels_long.parquet"]

    assert reanalyse_run_dir([*args, "--check"]) == 1  # says what would change, writes nothing
    assert f"{d4}: rewritten (would be)" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == older

    assert reanalyse_run_dir(args) == 0
    out = capsys.readouterr().out
    assert f"{d4}: rewritten" in out and f"{run_dir / 'analysis' / 'steps.csv'}: unchanged" in out
    assert f"{run_dir / 'analysis' / 'kernels_long.parquet'}: left out" in out
    now = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert now.pop(run_dir / NODE_TABLE) == older[table]  # the node's own table, kept for the record
    manifest = json.loads(now.pop(run_dir / "manifest.json"))
    before = json.loads(current.pop(run_dir / "manifest.json"))
    assert now == current  # the rest as today's analysis writes it; nothing else touched, nothing left behind
    # the manifest's entries of the rewritten files follow them (commands check a table against them);
    # the rest of the manifest is the run's
    assert {"analysis/d4.csv", "table.md"} <= set(manifest.pop("reanalysed")["files"])
    listed = {e["path"]: e["sha256"] for e in manifest["files"]}
    assert listed["analysis/d4.csv"] == hashlib.sha256(d4.read_bytes()).hexdigest()
    assert listed["table.md"] == hashlib.sha256(table.read_bytes()).hexdigest()
    before.pop("reanalysed", None)
    assert {k: v for k, v in manifest.items() if k != "files"} == {k: v for k, v in before.items() if k != "files"}

    assert reanalyse_run_dir(args) == 0  # once more: nothing to do, the node's table stays the first one
    assert "rewritten" not in capsys.readouterr().out and (run_dir / NODE_TABLE).read_bytes() == older[table]
