"""A run directory's files are checked against its manifest.json before `analyze`, `report` and `export`
analyse them again (harness/manifest_check.py): a file the manifest lists that is missing, of another
size or another sha256 is a one-line error naming it; a file the manifest does not list is read as before.

On copies of the bundled real run directory (tests/data/sglang-real/ray-run: SGLang 0.5.17 on one
H100), changed so that the old code analysed them without a word (exit 0)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests/data/sglang-real/ray-run/sglang_dsv3_4l_1gpu_full-20261124-214640"
OTHER_TRACE = ROOT / "tests/data/sglang-real/sglang-0.5.17-dsv3-4l-fp8-h200-mtp-TP-0-DECODE.trace.json.gz"


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A copy of the bundled run directory that a test may change."""
    return Path(shutil.copytree(RUN, tmp_path / RUN.name))


def _trace(run_dir: Path) -> Path:
    (trace,) = (run_dir / "traces").iterdir()
    return trace


def _one_error_line(capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), err
    return err


def _commands(run_dir: Path, out: Path) -> dict[str, list[str]]:
    return {"analyze": ["analyze", str(run_dir), "--out", str(out / "analyze")],
            "report": ["report", str(run_dir), "--out", str(out / "report")],
            "export": ["export", str(run_dir), "--out", str(out / "export")],
            "view": ["view", str(run_dir), "--out", str(out / "view")]}  # the page annotates the traces


@pytest.mark.parametrize("command", ["analyze", "report", "export", "view"])
def test_a_trace_replaced_by_another_runs_is_refused(command, run_dir, tmp_path, capsys):
    """The issue's case: the trace swapped for another run's under the same name was analysed as this
    run's. Of another size: refused by the size the manifest lists, before it is hashed."""
    trace = _trace(run_dir)
    shutil.copyfile(OTHER_TRACE, trace)
    assert main(_commands(run_dir, tmp_path)[command]) != 0
    _one_error_line(capsys, f"{trace}: {OTHER_TRACE.stat().st_size} bytes, {run_dir / 'manifest.json'} lists",
                    "it does not match the manifest")
    assert not (tmp_path / command).exists() or not any((tmp_path / command).iterdir())


def _same_size_other_bytes(path: Path) -> None:
    """The gzip header's modification time changed: the same size and the same trace inflated, other bytes."""
    data = bytearray(path.read_bytes())
    data[4] ^= 0xFF
    path.write_bytes(bytes(data))


def _reformatted_json(path: Path) -> None:
    """The same JSON document, indented otherwise (of another size)."""
    path.write_text(json.dumps(json.loads(path.read_text()), indent=1))


@pytest.mark.parametrize("changed, change", [
    ("trace", _same_size_other_bytes),
    ("expert_load/expert_load.json", _reformatted_json),
    ("scenario.yaml", lambda path: path.write_text(path.read_text() + "# edited after the run\n")),
    ("load/requests.jsonl", Path.unlink),
])
def test_each_file_the_analysis_reads_again_is_checked(changed, change, run_dir, tmp_path, capsys):
    """Each file `analyze RUN_DIR` reads (the trace, the expert load, the scenario, the load records):
    edited, reformatted or gone since the run, it is named in one line and nothing is written."""
    path = _trace(run_dir) if changed == "trace" else run_dir / changed
    change(path)
    assert main(["analyze", str(run_dir), "--out", str(tmp_path / "out")]) == 2
    said = {"trace": "its sha256 differs from the one", "load/requests.jsonl": "missing, though the run's"}
    _one_error_line(capsys, f"{path}: ", said.get(changed, "bytes, "), "does not match", str(run_dir / "manifest.json"))
    assert not (tmp_path / "out").exists()


def test_a_file_the_manifest_does_not_list_is_read_as_before(run_dir, tmp_path, capsys):
    """Left out of the manifest's list (a run from before manifests listed files), the replaced trace is
    analysed as it always was; listed, the same directory is refused."""
    trace = _trace(run_dir)
    _same_size_other_bytes(trace)
    assert main(["analyze", str(run_dir), "--out", str(tmp_path / "listed")]) == 2
    _one_error_line(capsys, f"{trace}: its sha256 differs")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["files"] = [e for e in manifest["files"] if e["path"] != f"traces/{trace.name}"]
    (run_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    assert main(["analyze", str(run_dir), "--out", str(tmp_path / "unlisted")]) == 0
    assert (tmp_path / "unlisted" / "d4.csv").read_bytes() == (RUN / "analysis" / "d4.csv").read_bytes()
