"""--out of analyze, compare, report and calibrate: a user's files are never replaced, earlier output
only with --overwrite, an unusable destination is refused before any work, and files are 0644."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from harness.cli import main
from harness.output_dir import OutputError, prepare_output

DATA = Path(__file__).parent / "data"
CPU_DEMO = str(DATA / "embedded-cpu-demo-TP-0-DECODE.trace.json.gz")
H200_DEMO = str(DATA / "embedded-h200-demo_gpu-TP-0-DECODE.trace.json.gz")


@pytest.fixture(scope="module")
def analysis_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("saved") / "analysis"
    assert main(["analyze", CPU_DEMO, "--out", str(out)]) == 0
    return out


def _user_file(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("the user's own notes\n")
    return path


def test_analyze_never_replaces_a_users_file(tmp_path, capsys):
    mine = _user_file(tmp_path / "out", "d4.md")  # same name as an output file
    assert main(["analyze", CPU_DEMO, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "d4.md" in err and "`analyze` did not write" in err
    assert mine.read_text() == "the user's own notes\n"
    # --overwrite replaces only the command's own earlier output, never a user's file
    assert main(["analyze", CPU_DEMO, "--out", str(tmp_path / "out"), "--overwrite"]) == 2
    assert mine.read_text() == "the user's own notes\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["d4.md"]


def test_analyze_replaces_its_own_output_only_with_overwrite(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["analyze", CPU_DEMO, "--out", str(out)]) == 0
    first = (out / "analysis.json").stat().st_mtime_ns
    assert main(["analyze", CPU_DEMO, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "would be replaced" in err and "analysis.json" in err and "--overwrite" in err
    assert (out / "analysis.json").stat().st_mtime_ns == first
    assert main(["analyze", CPU_DEMO, "--out", str(out), "--overwrite"]) == 0
    assert (out / "analysis.json").stat().st_mtime_ns != first
    assert not [p for p in out.iterdir() if p.name.startswith(".") and "tmp" in p.name]  # no staging left


def test_output_files_follow_the_umask_like_the_rest_of_a_run(tmp_path):
    old = os.umask(0o022)
    try:
        assert main(["analyze", CPU_DEMO, "--out", str(tmp_path / "out")]) == 0
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "out").iterdir()}
    assert modes and all(mode == 0o644 for mode in modes.values()), modes
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o755


def test_an_out_that_is_a_file_is_refused_before_the_analysis(tmp_path, capsys):
    target = _user_file(tmp_path, "results")
    # the second trace does not exist: were the analysis run first, its error would come first
    assert main(["analyze", CPU_DEMO, str(tmp_path / "missing-TP-1.trace.json.gz"), "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file" in err[0] and "Traceback" not in err[0]
    assert target.read_text() == "the user's own notes\n"


def test_an_out_that_cannot_be_written_is_refused_before_the_analysis(tmp_path, capsys):
    # /proc takes no new folders, even for root (a read-only place that chmod cannot fake for root)
    assert main(["analyze", CPU_DEMO, str(tmp_path / "missing-TP-1.trace.json.gz"), "--out", "/proc/moe-out"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot write in /proc" in err[0]


def test_compare_never_replaces_a_users_file(analysis_dir, tmp_path, capsys):
    mine = _user_file(tmp_path / "cmp", "compare.md")
    assert main(["compare", f"a={analysis_dir}", f"b={analysis_dir}", "--out", str(tmp_path / "cmp")]) == 2
    assert "compare.md" in capsys.readouterr().err
    assert mine.read_text() == "the user's own notes\n"
    assert main(["compare", f"a={analysis_dir}", "--out", str(tmp_path / "new")]) == 0
    assert main(["compare", f"a={analysis_dir}", "--out", str(tmp_path / "new")]) == 2
    assert main(["compare", f"a={analysis_dir}", "--out", str(tmp_path / "new"), "--overwrite"]) == 0


def test_report_never_replaces_a_users_file(analysis_dir, tmp_path, capsys):
    mine = _user_file(tmp_path / "rep", "kernel_report.html")
    assert main(["report", str(analysis_dir), "--out", str(tmp_path / "rep")]) == 2
    assert "kernel_report.html" in capsys.readouterr().err
    assert mine.read_text() == "the user's own notes\n"


def test_report_beside_its_analysis_replaces_only_with_overwrite(analysis_dir, capsys):
    before = {p.name: p.read_bytes() for p in analysis_dir.iterdir() if p.is_file()}
    assert main(["report", str(analysis_dir)]) == 0
    assert (analysis_dir / "kernel_report.md").exists()
    assert main(["report", str(analysis_dir)]) == 2
    assert "kernel_report.md" in capsys.readouterr().err
    assert main(["report", str(analysis_dir), "--overwrite"]) == 0
    assert all((analysis_dir / name).read_bytes() == data for name, data in before.items())  # analysis untouched


def test_calibrate_never_replaces_a_users_file(tmp_path, capsys):
    mine = _user_file(tmp_path / "cal", "calibration.json")
    assert main(["calibrate", "--signature", "generic", "--truth", H200_DEMO, "--out", str(tmp_path / "cal")]) == 2
    assert "calibration.json" in capsys.readouterr().err
    assert mine.read_text() == "the user's own notes\n"


def test_an_interrupted_write_leaves_the_earlier_output_whole(tmp_path):
    out = tmp_path / "out"
    prepare_output(out, "demo").write(
        lambda d: [(d / n).write_text("old") for n in ("a.txt", "b.txt")])

    def interrupted(folder: Path) -> None:
        (folder / "a.txt").write_text("new")
        raise KeyboardInterrupt  # Ctrl-C after the first file

    with pytest.raises(KeyboardInterrupt):
        prepare_output(out, "demo", overwrite=True).write(interrupted)
    assert [(out / n).read_text() for n in ("a.txt", "b.txt")] == ["old", "old"]
    assert sorted(p.name for p in out.iterdir()) == [".moe-harness-demo.json", "a.txt", "b.txt"]


def test_a_new_folder_appears_only_when_complete(tmp_path):
    out = tmp_path / "deep" / "out"

    def failing(folder: Path) -> None:
        (folder / "a.txt").write_text("x")
        raise RuntimeError("failed")

    with pytest.raises(RuntimeError):
        prepare_output(out, "demo").write(failing)
    assert not out.exists() and not [p for p in (tmp_path / "deep").iterdir()]


def test_earlier_output_is_known_by_its_marker(tmp_path):
    out = tmp_path / "out"
    prepare_output(out, "demo").write(lambda d: [(d / n).write_text("1") for n in ("a.txt", "extra.csv")])
    # the marker says this command wrote extra.csv: replaced with the rest, though the new output lacks it
    prepare_output(out, "demo", overwrite=True).write(lambda d: (d / "a.txt").write_text("2"))
    assert sorted(p.name for p in out.iterdir()) == [".moe-harness-demo.json", "a.txt"]  # no stale extra.csv
    with pytest.raises(OutputError, match="`other` did not write"):
        prepare_output(out, "other", overwrite=True)


def _hostile_marker(folder: Path, command: str, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f".moe-harness-{command}.json").write_text(json.dumps({"files": names}))


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_marker_never_makes_out_delete_anything_outside_it(tmp_path, overwrite):
    """A marker listing ../x or an absolute path made `analyze --out DIR` delete files and folders
    outside DIR, with or without --overwrite (a shared results folder can carry one)."""
    victim_file = _user_file(tmp_path, "victim.txt")
    victim_dir = tmp_path / "victim-dir"
    _user_file(victim_dir, "inside.txt")
    absolute = _user_file(tmp_path / "elsewhere", "absolute.txt")  # named by its absolute path (only ever in tmp)
    out = tmp_path / "shared" / "out"
    _hostile_marker(out, "analyze", ["../../victim.txt", str(victim_dir), "../../victim-dir", str(absolute)])
    assert main(["analyze", CPU_DEMO, "--out", str(out), *overwrite]) == 0
    assert victim_file.read_text() == "the user's own notes\n" and (victim_dir / "inside.txt").exists()
    assert absolute.read_text() == "the user's own notes\n"
    assert (out / "d4.md").exists()


def test_a_marker_naming_a_users_file_does_not_make_it_the_commands(tmp_path, capsys):
    """A marker that lists a name proves nothing: only a file with the content the command recorded is its own."""
    out = tmp_path / "out"
    mine = _user_file(out, "d4.md")
    _hostile_marker(out, "analyze", ["d4.md"])
    assert main(["analyze", CPU_DEMO, "--out", str(out), "--overwrite"]) == 2
    assert "`analyze` did not write: d4.md" in capsys.readouterr().err
    assert mine.read_text() == "the user's own notes\n"


def test_an_edited_output_file_is_no_longer_the_commands_to_replace(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["analyze", CPU_DEMO, "--out", str(out)]) == 0
    (out / "d4.md").write_text("my edited table\n")
    assert main(["analyze", CPU_DEMO, "--out", str(out), "--overwrite"]) == 2
    assert "changed since `analyze` wrote them: d4.md" in capsys.readouterr().err
    assert (out / "d4.md").read_text() == "my edited table\n"


def test_report_beside_an_analysis_never_replaces_a_users_report(tmp_path, capsys):
    """`report` without --out replaced a user's own kernel_report.md in the analysis folder."""
    adir = tmp_path / "adir"
    assert main(["analyze", CPU_DEMO, "--out", str(adir)]) == 0
    mine = _user_file(adir, "kernel_report.md")
    assert main(["report", str(adir)]) == 2
    assert "kernel_report.md" in capsys.readouterr().err
    assert mine.read_text() == "the user's own notes\n" and not (adir / "kernel_report.html").exists()
    assert main(["report", str(adir), "--overwrite"]) == 2
    assert mine.read_text() == "the user's own notes\n"


def test_report_overwrite_never_deletes_a_users_file_in_its_images_folder(analysis_dir, tmp_path, capsys):
    """`report --overwrite` replaced kernel_report_files/ whole, a user's file inside it too."""
    with_images = ["--ncu", str(DATA / "ncu_h100_demo_gpu_raw.csv"), "--hardware", "h100"]  # roofline PNGs
    assert main(["report", str(analysis_dir), "--out", str(tmp_path / "rep"), *with_images]) == 0
    images = tmp_path / "rep" / "kernel_report_files"
    assert images.is_dir()
    mine = _user_file(images, "my-notes.txt")
    assert main(["report", str(analysis_dir), "--out", str(tmp_path / "rep"), "--overwrite", *with_images]) == 2
    assert "kernel_report_files" in capsys.readouterr().err
    assert mine.read_text() == "the user's own notes\n"


def test_export_overwrite_never_replaces_a_users_file(tmp_path, capsys):
    import synthetic_run

    run_dir = synthetic_run.build(tmp_path)
    mine = _user_file(run_dir / "exports", "d4.csv")
    assert main(["export", str(run_dir), "--overwrite"]) == 1
    assert "d4.csv" in capsys.readouterr().err
    assert mine.read_text() == "the user's own notes\n"
    assert not (run_dir / "exports" / "steps.csv").exists()  # refused before writing anything


def test_learn_signature_never_writes_through_a_link(tmp_path, capsys):
    """--out naming a dangling link: the old check (exists()) said free, and the write followed the link."""
    target = tmp_path / "elsewhere" / "created.yaml"
    link = tmp_path / "learned.yaml"
    link.symlink_to(target)
    assert main(["learn-signature", CPU_DEMO, "--name", "x", "--out", str(link)]) == 2
    assert "exists" in capsys.readouterr().err and not target.exists()


def test_ncu_out_that_is_a_file_is_refused(tmp_path):
    mine = _user_file(tmp_path, "results")
    with pytest.raises(SystemExit, match="not an empty folder"):
        main(["ncu", "--out", str(mine), "--ncu-bin", "/bin/true"])
    assert mine.read_text() == "the user's own notes\n"
