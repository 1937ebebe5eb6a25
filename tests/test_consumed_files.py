"""Files a command consumes are the ones that were written: a run's tables and an analysis folder are
checked against the manifest or marker their writer left, so a table cut at a row boundary (which
reads as fewer rows) is an error naming the file, and a run without its manifest cannot be exported
or reported."""
from __future__ import annotations

from pathlib import Path

import pytest

import synthetic_run
from harness.cli import main

DATA = Path(__file__).parent / "data"
CPU_DEMO = str(DATA / "embedded-cpu-demo-TP-0-DECODE.trace.json.gz")


def _cut_last_row(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # whole rows only: every row left still parses


def _error(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def _cut(path: Path) -> None:
    """A table cut short: its last row (CSV), or its last 100 bytes (the Parquet kernel table)."""
    if path.suffix == ".parquet":
        path.write_bytes(path.read_bytes()[:-100])
    else:
        _cut_last_row(path)


@pytest.mark.parametrize("table", ["kernels_long.parquet", "kernels_long.csv", "steps.csv", "d4_detail.csv"])
def test_export_of_a_run_whose_table_was_cut_is_an_error(tmp_path, capsys, table):
    run_dir = synthetic_run.build(tmp_path, kernel_table="csv" if table == "kernels_long.csv" else "parquet")
    _cut(run_dir / "analysis" / table)
    assert main(["export", str(run_dir)]) == 1
    assert f"{table}: not the file that was written" in _error(capsys)
    assert not (run_dir / "exports").exists() or not any((run_dir / "exports").iterdir())


def test_export_of_a_run_without_its_manifest_is_an_error(tmp_path, capsys):
    run_dir = synthetic_run.build(tmp_path)
    (run_dir / "manifest.json").unlink()
    assert main(["export", str(run_dir)]) == 1
    assert "no manifest.json" in _error(capsys)


def test_report_of_a_run_whose_tables_were_cut_is_an_error(tmp_path, capsys):
    run_dir = synthetic_run.build(tmp_path)
    _cut_last_row(run_dir / "analysis" / "d4_detail.csv")
    assert main(["report", str(run_dir), "--out", str(tmp_path / "rep")]) == 2
    assert "d4_detail.csv: not the file that was written" in _error(capsys)
    (run_dir / "manifest.json").unlink()
    assert main(["report", str(run_dir), "--out", str(tmp_path / "rep")]) == 2
    assert "no manifest.json" in _error(capsys)


def test_report_of_an_analysis_folder_whose_table_was_cut_is_an_error(tmp_path, capsys):
    saved = tmp_path / "saved"
    assert main(["analyze", CPU_DEMO, "--out", str(saved)]) == 0
    capsys.readouterr()
    _cut(saved / "kernels_long.parquet")
    assert main(["report", str(saved), "--out", str(tmp_path / "rep")]) == 2
    assert "kernels_long.parquet: not the file that was written" in _error(capsys)


def test_metrics_of_a_run_whose_table_was_cut_is_an_error(tmp_path, capsys):
    run_dir = synthetic_run.build(tmp_path)
    _cut_last_row(run_dir / "load" / "requests.jsonl")
    assert main(["metrics", str(run_dir), "--quiet"]) == 1
    assert "requests.jsonl: not the file that was written" in _error(capsys)


def test_compare_of_an_edited_saved_column_is_an_error(tmp_path, capsys):
    saved = tmp_path / "saved"
    assert main(["analyze", CPU_DEMO, "--out", str(saved)]) == 0
    capsys.readouterr()
    path = saved / "analysis.json"
    path.write_text(path.read_text().replace('"step_ms": ', '"step_ms": 1', 1))
    assert main(["compare", f"a={saved}"]) == 2
    assert "analysis.json: not the file that was written" in _error(capsys)
