"""Every fault of the mutation audit (benchmarks/mutations/mutations.yaml) still applies to the code.

Why: the audit breaks the analysis one fault at a time and says which test catches each; it refuses to
run when a fault's `find` text is no longer in its file exactly once. Two faults went stale when the code
they broke was rewritten (the pinned communication rows and the per-layer units of a --tbo template),
and no test saw it, so the audit could not have run since. Checked here on every run.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
MUTATIONS = yaml.safe_load((ROOT / "benchmarks" / "mutations" / "mutations.yaml").read_text())["mutations"]


def test_the_fault_ids_are_distinct():
    ids = [m["id"] for m in MUTATIONS]
    assert len(ids) == len(set(ids)) and len(ids) > 20


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m["id"])
def test_each_fault_applies_once_and_changes_the_code(mutation):
    text = (ROOT / mutation["file"]).read_text()
    assert text.count(mutation["find"]) == 1, f"{mutation['id']}: `find` is not in {mutation['file']} exactly once"
    assert mutation["replace"] != mutation["find"]
