"""No signature is presented as checked when no real trace confirms it.

Why: a signature checked only on synthetic traces written from itself (tests/synthetic_deepseek.py)
passes whatever its names are (topk filed under attention, up/down GEMMs swapped). Each built-in
says what confirms it (`evidence:`); those no real trace confirms say "unverified: no real trace",
and so do `moe-harness analyze --list-signatures` and the note under any table made with one.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from analysis.pipeline import analyze
from analysis.attribution.signature import UNVERIFIED, builtin_signatures, load_signature
from analysis.tables.d4 import render_markdown
from synthetic_deepseek import write_rank_trace

WITHOUT_REAL_TRACE = {"sglang-sm90-deepep-ll", "sglang-sm100-deepep-ll", "dpsk-h800"}


def test_every_builtin_states_its_evidence():
    for name in builtin_signatures():
        evidence = load_signature(name).evidence
        assert evidence.startswith((UNVERIFIED, "real trace", "learned from")), (name, evidence)


def test_the_signatures_without_a_real_trace_say_so():
    unverified = {n for n in builtin_signatures() if load_signature(n).evidence.startswith(UNVERIFIED)}
    assert unverified == WITHOUT_REAL_TRACE


def test_list_signatures_shows_the_evidence():
    out = subprocess.run([sys.executable, "-m", "harness.cli", "analyze", "--list-signatures"],
                         capture_output=True, text=True, check=True).stdout
    for name in builtin_signatures():
        line = next(line for line in out.splitlines() if line.strip().startswith(f"{name}:"))
        assert ("unverified: no real trace" in line) == (name in WITHOUT_REAL_TRACE), line


@pytest.mark.parametrize("name", ["sglang-sm90-deepep-ll", "dpsk-h800", "generic"])
def test_the_note_under_the_table_says_unverified(tmp_path, name):
    path = tmp_path / "run-TP-0-DECODE.trace.json.gz"
    # generic (checked on real traces) reads a trace written from an unverified signature: no such note
    write_rank_trace(path, load_signature("sglang-sm90-deepep-ll" if name == "generic" else name), steps=1)
    table = render_markdown([analyze([str(path)], signature=name, model="deepseek-v3").d4])
    notes = table.split("\n\n", 1)[-1]
    assert ("unverified: no real trace" in notes) == (name in WITHOUT_REAL_TRACE), notes
