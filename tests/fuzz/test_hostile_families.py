"""The fuzz suite: hostile inputs of each family (tests/fuzz/families.py: sizes, depths, encodings,
duplicates, races, secrets; tests/fuzz/parquet_cases.py: kernel tables), each command run in a child bounded in
memory (1.5 GiB beyond its start) and time (tests/fuzz/bounded_run.py).

Every case ends in a refusal (exit 1 or 2, one error line saying what and where) or in the table the
untouched input gives; never a traceback, a hang, a memory blow-up, or a file it did not write changed.
Seeded: MOE_HARNESS_FUZZ_SEED replays another draw (the failure message names the seed).
"""
from __future__ import annotations

import hashlib
import os
import random
import threading
from pathlib import Path

import pytest

from fuzz.bounded_run import run_bounded
from fuzz.families import FAMILIES, TRACE
from fuzz.parquet_cases import TABLE_LIMIT_BYTES, hostile_cases

SEED = int(os.environ.get("MOE_HARNESS_FUZZ_SEED", "20261128"))
KERNEL_TABLE = "kernels_long.parquet"


@pytest.fixture(scope="module")
def untouched_table(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("untouched") / "out"
    outcome = run_bounded(["analyze", str(TRACE), "--jobs", "1", "--out", str(out)])
    assert outcome.exit_code == 0, str(outcome)
    return (out / "d4.csv").read_text()


def _digests(paths) -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


def _judge(case, outcome, untouched: str, seed: int) -> None:
    where = f"case {case.name!r} (seed {seed}): {outcome}"
    assert not outcome.hung, f"hung past {case.wall_limit_s:.0f} s: {where}"
    assert not outcome.traceback, f"a traceback: {where}"
    said = outcome.out + outcome.err
    assert not [secret for secret in case.hidden if secret in said], f"a secret shown: {where}"
    assert not [value for value in case.shown if value not in said], f"what is not secret not shown: {where}"
    if case.expect == "ok":
        assert outcome.exit_code == 0, where
        return
    if case.expect == "same":
        assert outcome.exit_code == 0, where
        out = Path(case.argv[case.argv.index("--out") + 1])
        rows = (out / "d4.csv").read_text().split("\n", 1)[1]  # the header names the rank by its file
        assert rows == untouched.split("\n", 1)[1], f"a table other than the untouched input's: {where}"
        return
    assert outcome.exit_code in (1, 2), f"not refused: {where}"
    lines = [line for line in outcome.err.splitlines() if line.strip() and not line.startswith("note:")]
    assert len(lines) == 1, f"not one error line: {where}"
    assert case.says in lines[0], f"the refusal does not say {case.says!r}: {where}"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_hostile_inputs_of_a_family_are_refused_in_one_line_or_read_right(family, tmp_path, untouched_table):
    seed = SEED + sorted(FAMILIES).index(family)
    cases = FAMILIES[family](random.Random(seed), tmp_path)
    assert cases
    for case in cases:
        kept = _digests(case.keep)
        helper = threading.Thread(target=case.during, daemon=True) if case.during else None
        if helper:
            helper.start()
        outcome = run_bounded(case.argv, wall_limit_s=case.wall_limit_s, in_child=case.in_child)
        if helper:
            helper.join(timeout=30)
        _judge(case, outcome, untouched_table, seed)
        assert _digests(case.keep) == kept, f"case {case.name!r}: a file it did not write changed"


def test_hostile_kernel_tables_are_refused_in_one_line(tmp_path):
    """Every kind of hostile Parquet file (declared counts, footer depths, list lengths, dictionary pages)
    as a folder's kernels_long.parquet: `report` refuses it in one line naming the file."""
    cases = [c for c in hostile_cases(SEED) if c.refusal and c.limit_bytes == TABLE_LIMIT_BYTES]
    assert len(cases) >= 20
    for n, case in enumerate(cases):
        folder = tmp_path / f"c{n}"
        folder.mkdir()
        (folder / KERNEL_TABLE).write_bytes(case.data)
        outcome = run_bounded(["report", str(folder), "--out", str(tmp_path / f"report{n}")])
        assert not outcome.hung and not outcome.traceback, f"{case}: {outcome}"
        lines = outcome.err.strip().splitlines()
        assert outcome.exit_code == 2 and len(lines) == 1 and str(folder / KERNEL_TABLE) in lines[0], f"{case}: {outcome}"
