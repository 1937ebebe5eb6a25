"""Every step label a supported SGLang release can write is one the analysis knows.

The labels are read from each release's own source in its wheel (`pip download --no-deps`, cached
under $MOE_HARNESS_CACHE or ~/.cache/moe-harness/sglang-wheels): `build_step_span_name` (the
ForwardMode names it writes, and any literal stage it puts in their place, 0.5.23's VERIFY and
DRAFT), plus every other `step[LABEL ...]` literal of the release (the MTP draft loop's). A release
that renames a label fails here, not in a user's table (analysis/data/rules/step_labels.yaml).
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from analysis.attribution.steps import KNOWN_STAGES, stage_of
from harness.sglang.version import load_table, supported_versions

# At least these, whatever versions.yaml lists at the time
RELEASES = sorted({"0.5.13.post1", "0.5.17", "0.5.23", *supported_versions()})
FORWARD_MODES = "sglang/srt/model_executor/forward_batch_info.py"
_LABEL = re.compile(r"^[A-Z][A-Z0-9_]*$")
_STEP_LITERAL = re.compile(r"""["']step\[([A-Z][A-Z0-9_]*)[ \]]""")


def _wheel(version: str) -> Path:
    """The release's wheel, downloaded once into the cache."""
    base = Path(os.environ.get("MOE_HARNESS_CACHE") or Path.home() / ".cache" / "moe-harness") / "sglang-wheels"
    found = sorted(base.glob(f"sglang-{version}-*.whl"))
    if found:
        return found[0]
    base.mkdir(parents=True, exist_ok=True)
    wheel = load_table()["wheel_download"]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", str(wheel["python_version"]), "--platform", str(wheel["platform"]),
           f"sglang=={version}", "-d", str(base)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    found = sorted(base.glob(f"sglang-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        pytest.fail(f"could not download sglang=={version} ({' '.join(cmd)}): {proc.stderr.strip()[-500:]}")
    return found[0]


def _forward_modes(source: str) -> set[str]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "ForwardMode":
            return {t.id for stmt in node.body if isinstance(stmt, ast.Assign) for t in stmt.targets
                    if isinstance(t, ast.Name)}
    raise AssertionError("no class ForwardMode")


def release_step_labels(version: str) -> tuple[set[str], str]:
    """(the labels the release can write, the file that builds them)."""
    with zipfile.ZipFile(_wheel(version)) as zf:
        sources = {n: zf.read(n).decode("utf-8", "replace") for n in zf.namelist()
                   if n.startswith("sglang/") and n.endswith(".py")}
    # 0.5.13.post1 keeps it private in model_runner.py (_build_step_span_name)
    names = ("build_step_span_name", "_build_step_span_name")
    builders = [n for n, text in sources.items() if any(f"def {name}(" in text for name in names)]
    assert len(builders) == 1, f"sglang {version}: build_step_span_name defined in {builders or 'no file'}"
    func = next(node for node in ast.walk(ast.parse(sources[builders[0]]))
                if isinstance(node, ast.FunctionDef) and node.name in names)
    labels: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Attribute) and node.attr == "name":  # f"step[{mode.name} ...]"
            labels |= _forward_modes(sources[FORWARD_MODES])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _LABEL.match(node.value):
                labels.add(node.value)  # stage = "VERIFY"
            labels.update(_STEP_LITERAL.findall('"' + node.value))  # f"step[EXTEND bs=...]"
    for text in sources.values():
        labels.update(_STEP_LITERAL.findall(text))
    return labels, builders[0]


@pytest.mark.parametrize("version", RELEASES)
def test_every_step_label_of_the_release_names_a_known_stage(version):
    labels, where = release_step_labels(version)
    assert {"DECODE", "EXTEND"} <= labels, (where, labels)
    unknown = {label: stage_of(f"step[{label} bs=1]") for label in labels
               if stage_of(f"step[{label} bs=1]") not in KNOWN_STAGES}
    assert not unknown, f"sglang {version} ({where}) writes labels analysis/data/rules/step_labels.yaml lacks: {unknown}"


def test_the_verify_label_of_each_release():
    """0.5.17 and 0.5.13.post1 write TARGET_VERIFY, 0.5.23 VERIFY (and DRAFT for the draft model):
    every one of them gives the verify stage the MTP table describes."""
    assert "TARGET_VERIFY" in release_step_labels("0.5.17")[0]
    assert "TARGET_VERIFY" in release_step_labels("0.5.13.post1")[0]
    newest = release_step_labels("0.5.23")[0]
    assert {"VERIFY", "DRAFT"} <= newest
    assert stage_of("step[VERIFY bs=8]") == stage_of("step[TARGET_VERIFY bs=8]") == "target_verify"
    assert stage_of("step[DRAFT bs=8]") == "draft"
    assert stage_of("step[DRAFT_EXTEND_V2 bs=8]") == "draft_extend"


def test_a_label_missing_from_the_table_fails_the_check(monkeypatch):
    """The check above can fail: with VERIFY taken out of the table, 0.5.23 is reported."""
    import analysis.attribution.steps as steps

    labels, after = steps._label_table()
    monkeypatch.setattr(steps, "_label_table", lambda: ({k: v for k, v in labels.items() if k != "VERIFY"}, after))
    assert stage_of("step[VERIFY bs=8]") == "verify" and "verify" not in KNOWN_STAGES
    with pytest.raises(AssertionError, match="VERIFY"):
        test_every_step_label_of_the_release_names_a_known_stage("0.5.23")
