"""Every attributed kernel row says what it is (role) and which rule decided (rule), and the rule
is a real entry: the test resolves each `file:entry` by reading the YAML itself, not through the
analysis' loaders, so a rule string that names a missing entry fails here. And the entry explains
the row ("why did this kernel get this module?" takes the row and that one file): random rows of
every bundled trace are checked against what the entry they name says."""
from __future__ import annotations

import functools
import gzip
import json
import random
import re
from pathlib import Path

import pytest
import yaml

from analysis.pipeline import AnalysisOptions, analyze

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
    if file in ("structure_rules.yaml", "module_rules.yaml"):
        return entry in _yaml(RULES / file)["rules"]
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


def test_a_router_gemm_found_by_structure_names_its_positional_rule():
    trace, signature, mode = CASES["structure"]
    rows = analyze([str(trace)], signature=signature, options=AnalysisOptions(attribution=mode)).kernel_rows
    routers = [r for r in rows if r.role == "router"]
    assert routers and {r.module for r in routers} == {"router"}
    assert {r.rule for r in routers} <= {"structure_rules.yaml:moe.router", "structure_rules.yaml:side.routing"}
    assert not [r for r in rows if r.source == "structure" and not r.rule.startswith("structure_rules.yaml:")]


def test_the_resolver_refuses_rules_that_name_nothing():
    assert not resolve_rule("kernel_classes.yaml:no_such_class")
    assert not resolve_rule("module_map.yaml:no_such_key")
    assert not resolve_rule("signatures/generic.yaml:families[9999]")
    assert not resolve_rule("structure")
    assert not resolve_rule("structure_rules.yaml:post.no_such_rule")
    assert resolve_rule("structure_rules.yaml:post.o_proj")
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


# ---------------------------------------------------------------- the "why" test

ROWS_PER_INPUT = 40


def _map_key_explains(key: str, row) -> bool:
    """Does module_map.yaml's `key` explain a module-range row? Its regex is found in a module class on
    the row's module path (the calls around the launch, outermost first); `functions`: one of the
    functions' regexes in the path's last element; `layer`: launched by the decoder layer itself, or
    outside every layer."""
    data = _yaml(RULES / "module_map.yaml")
    names = [n for n in row.module_path.split(" > ") if n]
    if key == "functions":
        return bool(names) and any(re.search(f["match"], names[-1]) for f in data["functions"])
    if key == "layer":
        return row.section != "layer" or (len(names) == 1 and bool(re.search(data["layer"], names[0])))
    return any(re.search(data[key], name) for name in names)


def _first_class(name: str) -> str | None:
    """kernel_classes.yaml's first entry whose regex is found in the name (read here, not through the
    analysis), or None."""
    for item in _yaml(RULES / "kernel_classes.yaml")["classes"]:
        if re.search(item["match"], name.strip()):
            return item["class"]
    return None


def why_not_explained(row) -> str:
    """"" when the file and entry the row's rule names explain its role; else what does not fit."""
    rule = row.rule
    if rule == "annotation":
        return "" if row.role == f"{row.group}.{row.module}" else "an annotation names its own row"
    if rule == "none":
        return "" if row.source == "unattributed" else "`none` on a named row"
    file, _, entry = rule.partition(":")
    if file in ("structure_rules.yaml", "module_rules.yaml"):
        spec = _yaml(RULES / file)["rules"].get(entry)
        if spec is None:
            return "no such rule"
        if row.section != spec["section"]:
            return f"section {row.section}, the rule names kernels in {spec['section']}"
        return "" if row.role in spec["roles"] else f"role {row.role} is not among the rule's {spec['roles']}"
    if file == "kernel_classes.yaml":
        found = _first_class(row.kernel_name)
        mangled = row.kernel_name.startswith("_Z")  # classed after demangling, which this test does not do
        return "" if found == entry or (found is None and (entry == "none" or mangled)) else f"the name is class {found}"
    if file == "module_map.yaml":
        if entry not in _yaml(RULES / file):
            return "no such key"
        return "" if _map_key_explains(entry, row) else f"key {entry} matches nothing on the path {row.module_path!r}"
    if file.startswith("signatures/"):
        if not resolve_rule(rule):
            return "no such entry"
        match = _INDEXED.match(entry)
        node = _yaml(SIGNATURES / file.removeprefix("signatures/"))
        for key in match.group("section").split("."):
            node = node[key]
        spec = node[int(match.group("index"))]
        patterns = [spec.get("match") or spec.get("kernel") or ""] if spec.get("match") or not spec.get("classes") else []
        patterns += [c["match"] for c in _yaml(RULES / "kernel_classes.yaml")["classes"] if c["class"] in spec.get("classes", [])]
        found = any(re.search(pattern, row.kernel_name) for pattern in patterns)
        return "" if found else f"the entry's regexes {patterns!r} are not in the kernel's name"
    return "a rule of no known file"


def _bundled_inputs():
    from tests.bundled_traces import bundled_inputs

    return bundled_inputs(ROOT)


@pytest.mark.parametrize("name", sorted(_bundled_inputs()))
def test_random_rows_are_explained_by_the_entry_their_rule_names(name):
    paths = _bundled_inputs()[name]
    rows = analyze([str(p) for p in paths], options=AnalysisOptions(jobs=1)).kernel_rows
    named = [r for r in rows if r.source != "unattributed"]
    assert not [r for r in named if r.rule.endswith(":none")], "a named row says :none"
    picked = random.Random(name).sample(named, min(ROWS_PER_INPUT, len(named)))
    unexplained = [(r.kernel_name[:50], r.section, r.role, r.rule, why) for r in picked if (why := why_not_explained(r))]
    assert not unexplained, unexplained[:5]


def test_the_why_check_finds_a_row_its_rule_does_not_explain():
    trace, signature, mode = CASES["structure"]
    rows = analyze([str(trace)], signature=signature, options=AnalysisOptions(attribution=mode)).kernel_rows
    o_proj = next(r for r in rows if r.rule == "structure_rules.yaml:post.o_proj")
    assert why_not_explained(o_proj) == ""
    import msgspec

    assert why_not_explained(msgspec.structs.replace(o_proj, rule="structure_rules.yaml:moe.router"))
    assert why_not_explained(msgspec.structs.replace(o_proj, section="post"))
    assert why_not_explained(msgspec.structs.replace(o_proj, rule="kernel_classes.yaml:attn_core"))
