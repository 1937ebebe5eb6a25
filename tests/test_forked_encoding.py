"""One rank's kernel table encoded by a forked child while the parent builds the other tables
(analysis/pipeline/forked_encoding.py): the same files as in one process; a child that fails or is
killed costs only its time; no child outlives the analysis, even when the analysis fails; no fork
where another thread runs (one the threading module started or not), where the machine lacks room for
the child's copy, or where --jobs 1 says one process.

Each case runs in a fresh interpreter (tests/forked_encoding_driver.py): a fork from the test
process would copy whatever threads earlier tests left running, which is what the module refuses
to do. The trace is a bundled REAL one (SGLang 0.5.17, DeepSeek-V3 4 layers, one H200).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

TRACE = ROOT / "tests" / "data" / "sglang-real" / "sglang-0.5.17-dsv3-4l-fp8-h200-deepgemm-moe-TP-0-DECODE.trace.json.gz"
DRIVER = ROOT / "tests" / "forked_encoding_driver.py"


def _drive(case: str, *args: str, trace=TRACE) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    done = subprocess.run([sys.executable, str(DRIVER), case, str(trace), *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_one_rank_with_a_helper_writes_the_files_one_process_writes(tmp_path):
    helped = _drive("analyze", str(tmp_path / "helped"), "0")
    alone = _drive("analyze", str(tmp_path / "alone"), "1")
    assert helped == {"helpers": 1, "reaped": True, "children_left": 0}
    assert alone == {"helpers": 0, "reaped": True, "children_left": 0}  # --jobs 1: one process
    helped_files, alone_files = _files(tmp_path / "helped"), _files(tmp_path / "alone")
    assert set(helped_files) == set(alone_files) and "kernels_long.parquet" in helped_files
    for name in alone_files:
        assert helped_files[name] == alone_files[name], name


@pytest.mark.parametrize("case", ["child-fails", "child-killed", "child-says-garbage"])
def test_a_child_that_cannot_deliver_costs_only_its_time(case):
    got = _drive(case)
    assert got["child_exit"] != 0 or case == "child-says-garbage"
    assert got["same_as_in_process"] is True
    assert got["children_left"] == 0


def test_a_process_that_ignores_sigchld_still_gets_the_files(tmp_path):
    ignored = _drive("sigchld-ignored", str(tmp_path / "ignored"))
    assert ignored == {"helpers": 2, "exit_codes": [None, None], "children_left": 0}
    _drive("analyze", str(tmp_path / "alone"), "1")
    assert _files(tmp_path / "ignored") == _files(tmp_path / "alone")


def test_a_refused_fork_leaves_the_work_to_this_process(tmp_path):
    refused = _drive("fork-refused", str(tmp_path / "refused"))
    assert refused == {"helpers": 2, "children_left": 0}  # both helpers asked, neither got a child
    _drive("analyze", str(tmp_path / "alone"), "1")
    assert _files(tmp_path / "refused") == _files(tmp_path / "alone")


def test_a_result_never_taken_is_stopped_and_reaped_on_close():
    got = _drive("close-unread")
    assert got == {"reaped": True, "children_left": 0, "closed_within_10_s": True, "child_exit": [-9]}


def test_no_child_outlives_an_analysis_that_fails_after_the_fork():
    got = _drive("combine-fails")  # the rank policy names no analysed rank: refused after the attribution
    assert got == {"error": "rank policy 'rank:nobody' names a rank that is not among the analysed ones: TP0",
                   "helpers": 1, "reaped": True, "children_left": 0}


@pytest.mark.parametrize("case", ["thread-running", "native-thread-running"])
def test_no_fork_while_another_thread_runs(case):
    got = _drive(case)
    assert got == {"helpers": 0, "fork_is_safe": False, "children_left": 0}


def test_no_fork_without_room_for_the_childs_copy():
    got = _drive("no-room")
    assert got == {"helpers": 0, "room": False, "children_left": 0}
