"""The output marker and the replace protocol (harness/output_marker.py, harness/output_replace.py):
no file the command did not write is ever removed, whatever happens between a check and a move, and
whatever a marker says."""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path

import pytest

from harness.cli import main

DATA = Path(__file__).parent / "data"
CPU_DEMO = str(DATA / "embedded-cpu-demo-TP-0-DECODE.trace.json.gz")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
USERS_TEXT = "the user's own notes\n"
STAGING_PREFIX = ".moe-harness-tmp-"  # the command's private folders inside an existing --out
RACE_TRIES = 20


def _synthetic_ncu_csv(folder: Path) -> Path:
    """SYNTHETIC Nsight Compute export (not a capture): kernel durations only, so the report draws one
    histogram into kernel_report_files/ and each report takes a fraction of a second."""
    path = folder / "synthetic-ncu-durations.csv"
    path.write_text('"ID","Kernel Name","gpu__time_duration.sum"\n"","","nsecond"\n'
                    '"0","synthetic_kernel_a","12,000"\n"1","synthetic_kernel_b","4,000"\n')
    return path


@pytest.fixture(scope="module")
def analysis_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("saved") / "analysis"
    assert main(["analyze", CPU_DEMO, "--out", str(out)]) == 0
    return out


@pytest.fixture
def report_cmd(analysis_dir, tmp_path):
    """`report ANALYSIS --out tmp/rep` with images; its first report already written."""
    out = tmp_path / "rep"
    args = ["report", str(analysis_dir), "--out", str(out), "--ncu", str(_synthetic_ncu_csv(tmp_path)),
            "--hardware", "h100"]
    assert main(args) == 0
    assert [p.name for p in (out / "kernel_report_files").iterdir()] == ["hist_duration_us.png"]
    return args, out


def _forge_marker(out: Path, command: str, entries: dict[str, str]) -> None:
    """A marker in the command's own format whose entries were written by hand, not by the command."""
    marker = out / f".moe-harness-{command}.json"
    data = json.loads(marker.read_text()) if marker.exists() else {"format": "moe-harness output 2", "files": {}}
    data["files"].update(entries)
    marker.write_text(json.dumps(data))


class _WriterAfterTheCheck(threading.Thread):
    """A user's program writing a new file into kernel_report_files/ the moment `report` has made its
    checks: once its report is drawn (kernel_report.html, written last, is in its staging folder), its
    marker appears there, and the moves begin."""

    def __init__(self, out: Path, name: str):
        super().__init__(daemon=True)
        self.out, self.name, self.stop, self.wrote = out, name, threading.Event(), False

    def run(self) -> None:
        staging = None
        while not self.stop.is_set() and (staging is None or not (staging / "kernel_report.html").exists()):
            time.sleep(0.001)  # while the report is drawn: leave the command the processor
            staging = next((Path(e.path) for e in os.scandir(self.out) if e.name.startswith(STAGING_PREFIX)), None)
        while not self.stop.is_set() and not (staging / ".moe-harness-report.json").exists():
            pass
        while not self.stop.is_set() and not self.wrote:
            try:  # a new file of its own, never over anything; the folder may be between two names
                fd = os.open(self.out / "kernel_report_files" / self.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except (FileNotFoundError, NotADirectoryError):
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(USERS_TEXT)
            self.wrote = True


def test_report_overwrite_never_removes_a_file_written_into_its_images_folder_meanwhile(report_cmd):
    """`report --overwrite` checked kernel_report_files/ held only its files, then moved the folder away
    and deleted it: a file written there in between went with it (14 of 20 tries)."""
    args, out = report_cmd
    raced = 0
    for attempt in range(RACE_TRIES):
        writer = _WriterAfterTheCheck(out, f"users-notes-{attempt}.txt")
        writer.start()
        try:
            code = main([*args, "--overwrite"])
        finally:
            writer.stop.set()
            writer.join()
        assert code in (0, 2)  # replaced, or refused because the user's file was there at a check
        if writer.wrote:
            raced += 1
            mine = out / "kernel_report_files" / writer.name
            assert mine.is_file() and mine.read_text() == USERS_TEXT, f"try {attempt}: the user's file was removed"
            mine.unlink()  # the test's own file: the next try starts from the command's own output
    assert raced, "the writer never saw the command's checks end: the race was not run"


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _named_like_the_marker(out: Path, kind: str) -> Path:
    """A user's thing at the name of report's marker, in an otherwise empty --out."""
    out.mkdir()
    marker = out / ".moe-harness-report.json"
    if kind == "folder":
        marker.mkdir()
        (marker / "inside.txt").write_text(USERS_TEXT)
    elif kind == "link":
        (out.parent / "users-file.txt").write_text(USERS_TEXT)
        marker.symlink_to(out.parent / "users-file.txt")
    elif kind == "file":
        marker.write_text(USERS_TEXT)
    else:  # a marker in the command's own format, owned by another user (a shared folder)
        marker.write_text(json.dumps({"format": "moe-harness output 2", "files": {}}))
        os.chown(marker, 65534, 65534)
    return marker


def _as_it_was(marker: Path, kind: str) -> bool:
    if kind == "folder":
        return marker.is_dir() and (marker / "inside.txt").read_text() == USERS_TEXT
    if kind == "link":
        return marker.is_symlink() and marker.read_text() == USERS_TEXT
    if kind == "file":
        return not marker.is_symlink() and marker.read_text() == USERS_TEXT
    return marker.stat().st_uid == 65534


@pytest.mark.parametrize("kind", ["folder", "link", "file", "another user's marker"])
def test_a_path_named_like_the_marker_is_refused_and_left_as_it_is(analysis_dir, tmp_path, capsys, kind):
    """A folder named like the command's marker was deleted with its contents, without --overwrite;
    a link or a user's file of that name was replaced."""
    if kind == "another user's marker" and os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    out = tmp_path / "rep"
    marker = _named_like_the_marker(out, kind)
    capsys.readouterr()
    code = main(["report", str(analysis_dir), "--out", str(out)])
    assert _as_it_was(marker, kind)
    assert sorted(p.name for p in out.iterdir()) == [marker.name]  # nothing written beside it
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and ".moe-harness-report.json" in line and "not a marker `report` wrote" in line


def test_a_forged_empty_content_entry_never_removes_a_users_empty_file(report_cmd, capsys):
    """A marker entry with the sha256 of empty content matched a user's empty file, which --overwrite
    then deleted with the command's own."""
    args, out = report_cmd
    empty = out / "kernel_report_files" / "roofline_physical.png"  # a name report writes, not this time
    empty.touch()
    _forge_marker(out, "report", {"kernel_report_files/roofline_physical.png": EMPTY_SHA256})
    capsys.readouterr()
    code = main([*args, "--overwrite"])
    assert empty.is_file() and empty.stat().st_size == 0
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and "kernel_report_files" in line and "nothing there is replaced" in line  # refused at the check


def test_a_forged_entry_for_a_name_the_command_never_writes_removes_nothing(report_cmd, capsys):
    """An entry with the right sha256 of a user's file made it the command's: --overwrite removed it as
    earlier output the new one lacks."""
    args, out = report_cmd
    notes = out / "notes.txt"
    notes.write_text(USERS_TEXT)
    _forge_marker(out, "report", {"notes.txt": hashlib.sha256(USERS_TEXT.encode()).hexdigest()})
    capsys.readouterr()
    code = main([*args, "--overwrite"])
    assert notes.read_text() == USERS_TEXT
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and "`report` did not write: notes.txt" in line


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_file_changed_after_the_check_goes_back_and_a_folder_keeps_what_is_not_ours(tmp_path):
    """The content is checked again once the file is out of reach: what changed since the check goes
    back to its name; a folder is removed only when nothing is left in it."""
    from harness.output_replace import Replacer

    out = tmp_path / "out"
    (out / "kernel_report_files").mkdir(parents=True)
    (out / "kernel_report_files" / "hist.png").write_text("as written\n")
    (out / "kernel_report_files" / "users-notes.txt").write_text(USERS_TEXT)  # written after the check
    (out / "kernel_report.md").write_text("edited after the check\n")
    with Replacer(out) as replacer:
        replacer.remove("kernel_report_files/hist.png", _sha256("as written\n"))
        replacer.remove("kernel_report.md", _sha256("as written\n"))
    assert not (out / "kernel_report_files" / "hist.png").exists()
    assert (out / "kernel_report_files" / "users-notes.txt").read_text() == USERS_TEXT
    assert (out / "kernel_report.md").read_text() == "edited after the check\n"
    assert replacer.outcome.left_alone == ["kernel_report.md"]
    assert sorted(p.name for p in out.iterdir()) == ["kernel_report.md", "kernel_report_files"]  # none aside


def test_links_are_never_followed_nor_removed(tmp_path):
    """A folder swapped for a link after the check, or a file that is a link, leads nowhere: the files
    elsewhere with the very content the marker names stay, and nothing is written there."""
    from harness.output_replace import Replacer

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "hist.png").write_text("as written\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "kernel_report_files").symlink_to(elsewhere)
    (out / "kernel_report.md").symlink_to(elsewhere / "hist.png")
    new = tmp_path / "staged.png"
    new.write_text("new\n")
    with Replacer(out) as replacer:
        replacer.remove("kernel_report_files/hist.png", _sha256("as written\n"))
        replacer.remove("kernel_report.md", _sha256("as written\n"))
        assert not replacer.place("kernel_report_files/new.png", new, None)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["hist.png"]
    assert (elsewhere / "hist.png").read_text() == "as written\n" and (out / "kernel_report.md").is_symlink()
    assert replacer.outcome.not_placed == ["kernel_report_files/new.png"] and new.exists()


def _commands_writing_an_out_folder() -> set[str]:
    """The command names harness/ passes to prepare_output."""
    import ast

    found = set()
    for path in (Path(__file__).resolve().parents[1] / "harness").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            called = getattr(node, "func", None)
            if (isinstance(node, ast.Call) and getattr(called, "id", getattr(called, "attr", "")) == "prepare_output"
                    and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)):
                found.add(node.args[1].value)
    return found


def test_every_command_lists_its_output_names_and_its_real_output_is_trusted(analysis_dir, report_cmd):
    """harness/output_names.yaml bounds what a marker entry can reach: a command missing there, or a
    name it writes missing, would make --overwrite refuse its own output."""
    from harness.output_marker import Marker, files_in, output_names, trusted

    commands = _commands_writing_an_out_folder()
    assert {"analyze", "report", "compare", "calibrate", "view", "export"} <= commands
    assert [c for c in sorted(commands) if output_names(c) is None] == []
    for command, folder in (("analyze", analysis_dir), ("report", report_cmd[1])):
        written = {n: d for n, d in files_in(folder).items() if n != f".moe-harness-{command}.json"}
        assert written and trusted(Marker("0" * 64, written), command) == written, command
