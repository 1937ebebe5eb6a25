"""Every attributed kernel row says what it is (role) and which rule decided (rule), and the rule
is a real entry: the test resolves each `file:entry` by reading the YAML itself, not through the
analysis' loaders, so a rule string that names a missing entry fails here."""
from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path

import pytest
import yaml

from analysis.api import AnalysisOptions, analyze

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
RULES = ROOT / "analysis" / "data" / "rules"
SIGNATURES = ROOT / "analysis" / "data" / "signatures"
_INDEXED = re.compile(r"^(?P<section>[\w.]+)\[(?P<index>\d+)\]$")

CASES = {  # trace, signature, attribution mode -> the source its rows come from
    "structure": (DATA / "accuracy/h100/dsv3ep-h100x1-e64k8-sidestream-bs8-graph-TP-0-EP-0-DECODE.trace.json.gz",
                  "generic", "auto"),
    "module_range": (DATA / "accuracy/h100/dsv3ep-h100x1-e64k8-sidestream-bs8-eager-TP-0-EP-0-DECODE.trace.json.gz",
                     "generic", "auto"),
    "signature": (DATA / "embedded-h100-demo_gpu-TP-0-DECODE.trace.json.gz", "embedded-hf-deepseek-v3-cuda",
                  "template"),
}


@functools.lru_cache(maxsize=None)
def _yaml(path: Path):
    return yaml.safe_load(path.read_text())


def resolve_rule(rule: str) -> bool:
    """Does `file:entry` name an entry that exists? (`annotation` and an unattributed row's `none`
    name no file.)"""
    if rule in ("annotation", "none"):
        return True
    file, _, entry = rule.partition(":")
    if file == "kernel_classes.yaml":
        classes = {item["class"] for item in _yaml(RULES / file)["classes"]}
        return entry in classes or entry == "none"
    if file == "module_map.yaml":
        return entry in _yaml(RULES / file)
    if file.startswith("signatures/"):
        data = _yaml(SIGNATURES / file.removeprefix("signatures/"))
        if entry == "module_ranges.layer":
            return "layer" in (data.get("module_ranges") or {})
        match = _INDEXED.match(entry)
        if not match:
            return False
        node = data
        for key in match.group("section").split("."):
            node = (node or {}).get(key)
        return isinstance(node, list) and int(match.group("index")) < len(node)
    return False


@pytest.mark.parametrize("source", sorted(CASES))
def test_every_row_carries_a_role_and_a_rule_that_resolves(source):
    trace, signature, mode = CASES[source]
    rows = analyze([str(trace)], signature=signature, options=AnalysisOptions(attribution=mode)).kernel_rows
    named = [r for r in rows if r.source != "unattributed"]
    assert named and any(r.source == source for r in named), {r.source for r in rows}
    missing = [(r.kernel_name[:60], r.source) for r in rows if not r.role or not r.rule]
    assert not missing, missing[:5]
    unresolved = sorted(rule for rule in {r.rule for r in named} if not resolve_rule(rule) or rule == "none")
    assert not unresolved, unresolved
    assert {(r.role, r.rule) for r in rows if r.source == "unattributed"} <= {("unattributed", "none")}


def test_a_router_gemm_found_by_structure_names_its_class_entry():
    trace, signature, mode = CASES["structure"]
    rows = analyze([str(trace)], signature=signature, options=AnalysisOptions(attribution=mode)).kernel_rows
    routers = [r for r in rows if r.role == "router"]
    assert routers and {r.module for r in routers} == {"router"}
    assert {r.rule for r in routers} <= {"kernel_classes.yaml:gemm", "kernel_classes.yaml:router_gemm",
                                         "kernel_classes.yaml:gemm_aux"}


def test_the_resolver_refuses_rules_that_name_nothing():
    assert not resolve_rule("kernel_classes.yaml:no_such_class")
    assert not resolve_rule("module_map.yaml:no_such_key")
    assert not resolve_rule("signatures/generic.yaml:families[9999]")
    assert not resolve_rule("structure")
    assert resolve_rule("signatures/generic.yaml:families[0]")


def test_an_annotation_renames_its_kernel_and_says_so(tmp_path):
    """A `group.module` GPU annotation around one kernel: its row's source is annotation (not the
    structure that named it first), its role the annotation's row, its rule `annotation`."""
    trace, signature, mode = CASES["structure"]
    data = json.loads(gzip.decompress(trace.read_bytes()))
    kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    target = max(kernels, key=lambda e: e["dur"])  # the longest kernel, wherever it sits
    data["traceEvents"].append({"ph": "X", "cat": "gpu_user_annotation", "name": "other.marked_by_user",
                                "pid": target["pid"], "tid": target["tid"], "ts": target["ts"] - 0.001,
                                "dur": 0.002})
    path = tmp_path / trace.name.replace(".gz", "")
    path.write_text(json.dumps(data))
    rows = analyze([str(path)], signature=signature, options=AnalysisOptions(attribution=mode)).kernel_rows
    marked = [r for r in rows if r.source == "annotation"]
    assert [r.kernel_name for r in marked] == [target["name"]] * len(marked) and marked
    assert {(r.group, r.module, r.role, r.rule) for r in marked} == {("other", "marked_by_user", "other.marked_by_user",
                                                                      "annotation")}
