"""The stage vocabulary (analysis/attribution/stages.py) is the one place the stage names are written:
every stage a step label names is one of them, and no other analysis module spells a stage name out."""
from __future__ import annotations

import ast
from pathlib import Path

import yaml

from analysis.attribution import stages

ROOT = Path(__file__).resolve().parents[1]
LABELS = ROOT / "analysis" / "data" / "rules" / "step_labels.yaml"
SPELLED_ONLY_THERE = {stages.VERIFY, stages.DRAFT_EXTEND, stages.DRAFT}  # names no other word of the code shares


def test_every_stage_a_label_names_is_in_the_vocabulary():
    data = yaml.safe_load(LABELS.read_text())
    named = set(data["labels"].values()) | set(data.get("after_verify", {}).values())
    assert named <= stages.STAGES, sorted(named - stages.STAGES)
    assert set(stages.TABLE_STAGES) | set(stages.DRAFT_STAGES) | set(stages.BATCH_STAGES) <= stages.STAGES | {
        stages.OLDER_VERIFY}


def test_no_other_analysis_module_spells_a_stage_name():
    spelled = []
    for path in sorted((ROOT / "analysis").rglob("*.py")):
        if path == Path(stages.__file__):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in SPELLED_ONLY_THERE:
                spelled.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not spelled, "use analysis/attribution/stages.py:\n" + "\n".join(spelled)
