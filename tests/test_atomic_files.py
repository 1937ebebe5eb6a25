"""Files written aside and moved in (analysis/io/atomic_files.py): what every table, report, export and
run-directory file is written through."""
from __future__ import annotations

import os
import stat

import pytest

from analysis.io.atomic_files import write_atomically, written_aside


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_bytes_text_and_a_writer_land_whole_with_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomically(tmp_path / "a.bin", b"\x00\x01")
        write_atomically(tmp_path / "sub" / "b.txt", "é\n")
        write_atomically(tmp_path / "c.csv", lambda fh: fh.write("x,y\r\n"), binary=False)
    finally:
        os.umask(old)
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "sub" / "b.txt").read_bytes() == "é\n".encode()
    assert (tmp_path / "c.csv").read_bytes() == b"x,y\r\n"  # text written as given: no newline translation
    # the mode a new file gets under the process's umask at import (022 here): never mkstemp's owner-only 0600
    assert {_mode(tmp_path / n) for n in ("a.bin", "c.csv")} == {0o666 & ~_import_umask()}
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.bin", "b.txt", "c.csv", "sub"]


def _import_umask() -> int:
    from analysis.io import atomic_files

    return atomic_files._UMASK


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "table.csv"
    target.write_text("old\n")

    def half(fh):
        fh.write("new, half")
        raise RuntimeError("disk gone")

    with pytest.raises(RuntimeError, match="disk gone"):
        write_atomically(target, half, binary=False)
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["table.csv"]
    with pytest.raises(ValueError):
        with written_aside(target, durable=True) as temp:
            temp.write_text("also half")
            raise ValueError("writer failed")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["table.csv"]


def test_written_aside_moves_in_only_at_the_end(tmp_path):
    target = tmp_path / "out.parquet"
    with written_aside(target, durable=True) as temp:
        temp.write_bytes(b"PAR1")
        assert not target.exists() and temp.parent == tmp_path and temp.name.startswith(".out.parquet.")
    assert target.read_bytes() == b"PAR1" and not temp.exists()
