"""Every bundled real trace set analyses into exactly the tables stored in tests/reference.

Why: a change meant to move code or speed it up must not move a number; one meant to move numbers
shows its effect on every bundled trace in the diff of tests/reference (written again with
`python benchmarks/update_reference_outputs.py`). Compared byte for byte: no table holds a wall-clock
time or a host's path (traces are given relative to the repository root), so nothing is masked.
"""
from __future__ import annotations

import pytest

from tests.reference_outputs import (REFERENCE_DIR, REGENERATE, analyse_tables, first_difference, reference_inputs,
                                     stored_names, stored_tables)

INPUTS = reference_inputs()
AFTER_A_DELIBERATE_CHANGE = f"if the change is deliberate, run `{REGENERATE}` and commit tests/reference"


def test_every_input_has_reference_outputs_and_no_other_does():
    missing = sorted(INPUTS.keys() - stored_names())
    stale = sorted(stored_names() - INPUTS.keys())
    if missing or stale:
        pytest.fail(f"tests/reference is out of step with tests/data: no tables for {missing}, tables of no input "
                    f"{stale}; {AFTER_A_DELIBERATE_CHANGE}", pytrace=False)


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_analysis_writes_the_stored_tables(name, tmp_path):
    current = analyse_tables(INPUTS[name], tmp_path / "out")
    stored = stored_tables(name)
    differences = [f"{table}: {first_difference(stored[table], current[table])}"
                   for table in sorted(stored.keys() & current.keys()) if stored[table] != current[table]]
    differences += [f"{table}: stored, no longer written" for table in sorted(stored.keys() - current.keys())]
    differences += [f"{table}: written, not stored" for table in sorted(current.keys() - stored.keys())]
    if differences:
        pytest.fail(f"{name} ({', '.join(p.name for p in INPUTS[name])}) no longer analyses into "
                    f"{REFERENCE_DIR / name}:\n  " + "\n  ".join(differences) + f"\n{AFTER_A_DELIBERATE_CHANGE}",
                    pytrace=False)


def test_the_update_writes_only_tables_under_tests_reference():
    from benchmarks.update_reference_outputs import OutsideReference, inside_reference

    table = REFERENCE_DIR / "embedded-cpu-demo" / "d4.csv"
    assert inside_reference(table) == table
    outside = (REFERENCE_DIR / ".." / "data" / "d4.csv", REFERENCE_DIR / "README.md", REFERENCE_DIR.parent / "x.csv")
    for path in outside:
        with pytest.raises(OutsideReference):
            inside_reference(path)
