"""A rank's later steps named by a forked child while the parent names the earlier ones
(analysis/attribution/rank/forked_naming.py): the files are those of one process, on bundled REAL
traces whose steps the structure and generic namers name (SGLang 0.5.17, DeepSeek-V3 4 layers on
one H200: plain decode, and MTP with its draft steps); a trace named by its module ranges is not
split (that namer reads the whole rank); a child that fails costs only its time.

Each case runs in a fresh interpreter (tests/forked_encoding_driver.py: a fork from the test
process would copy threads earlier tests left running).
"""
from __future__ import annotations

import pytest

from analysis.attribution.rank.forked_naming import CHILD_SHARE, first_child_step
from conftest import ROOT
from test_forked_encoding import _drive, _files

REAL = ROOT / "tests" / "data" / "sglang-real"
DECODE = REAL / "sglang-0.5.17-dsv3-4l-fp8-h200-deepgemm-moe-TP-0-DECODE.trace.json.gz"
MTP = REAL / "sglang-0.5.17-dsv3-4l-fp8-h200-mtp-TP-0-DECODE.trace.json.gz"
MODULE_RANGES = REAL / "ep" / "sglang-0.5.17-dsv3-4l-fp8-h100x4-deepep-ll-eager-TP-0-EP-0-decode.trace.json.gz"


def _same_files(a, b) -> None:
    files_a, files_b = _files(a), _files(b)
    assert set(files_a) == set(files_b) and "kernels_long.parquet" in files_a
    for name in files_b:
        assert files_a[name] == files_b[name], name


@pytest.mark.parametrize("trace", [DECODE, MTP], ids=["decode", "mtp"])
def test_steps_named_partly_by_a_child_give_the_files_of_one_process(trace, tmp_path):
    helped = _drive("name", str(tmp_path / "helped"), "0", trace=trace)
    alone = _drive("name", str(tmp_path / "alone"), "1", trace=trace)
    assert helped == {"naming_helpers": 1, "child_exits": [0], "children_left": 0}
    assert alone == {"naming_helpers": 0, "child_exits": [], "children_left": 0}  # --jobs 1: one process
    _same_files(tmp_path / "helped", tmp_path / "alone")


def test_the_progress_bar_leaves_the_steps_to_two_processes():
    """analyze's progress bar (on a terminal) runs no thread that would forbid the fork."""
    assert _drive("progress", trace=MTP) == {"naming_helpers": 1, "children_left": 0}


def test_a_rank_named_by_its_module_ranges_is_not_split(tmp_path):
    got = _drive("name", str(tmp_path / "out"), "0", trace=MODULE_RANGES)
    assert got == {"naming_helpers": 0, "child_exits": [], "children_left": 0}


def test_a_naming_child_that_fails_costs_only_its_time(tmp_path):
    failed = _drive("name-child-fails", str(tmp_path / "failed"), "0", trace=MTP)
    assert failed["naming_helpers"] == 1 and failed["child_exits"] == [1] and failed["children_left"] == 0
    _drive("name", str(tmp_path / "alone"), "1", trace=MTP)
    _same_files(tmp_path / "failed", tmp_path / "alone")


class _Step:
    def __init__(self, kernels: int):
        self.kernels = [None] * kernels


# (kernels per step, the first step the child names): the parent keeps the first steps until they hold
# half the kernels; where that takes every step (one step, or the last one holding most), no child
@pytest.mark.parametrize("sizes, first", [([10, 10, 10, 10], 2), ([1, 1, 1, 97], 4), ([97, 1, 1, 1], 1), ([5], 1),
                                          ([30, 20, 50], 2)])
def test_the_child_takes_the_later_steps_holding_its_share_of_the_kernels(sizes, first):
    assert CHILD_SHARE == 0.5  # the answers are for this share
    assert first_child_step([_Step(n) for n in sizes]) == first
