"""Every supported SGLang release's table (tests/data/sglang_releases/<version>.json) against its wheel,
and versions.yaml's facts against the tables.

The tables are what harness/sglang/extract_release.py reads out of each wheel: flags, SGLANG_*
variables and the files that read the harness's ones, HTTP routes, step labels, capture trace
names. The wheels come from PyPI once and are cached ($MOE_HARNESS_WHEELS).
"""
import copy
import fnmatch
import json
import re
from pathlib import Path

import pytest
import yaml

from harness.commands.plan import load_deployment_spec, load_deployment_specs
from harness.sglang.extract_release import (TABLES_DIR, changes, dumps, newer_than_table, release_table,
                                            table_path)
from harness.sglang.flags import FlagSpec, FlagTable
from harness.sglang.plan import build_plan
from harness.sglang.version import known_releases, load_version

REPO = Path(__file__).resolve().parent.parent
RELEASES = known_releases()
SCENARIOS = sorted(p.stem for p in (REPO / "scenarios").glob("*.yaml")
                   if (yaml.safe_load(p.read_text()).get("engine") or {}).get("kind") == "sglang")


def kept(version: str) -> dict:
    return json.loads(table_path(version).read_text())


def kept_flag_table(version: str) -> FlagTable:
    table = FlagTable(version)
    for name, f in kept(version)["flags"].items():
        table.flags[name] = FlagSpec((name,), f["takes_value"], f["multiple"],
                                     tuple(f["choices"]) if f["choices"] is not None else None,
                                     deprecated=f["deprecated"])
    return table


def test_there_is_one_table_per_release_and_no_other():
    assert sorted(p.stem for p in TABLES_DIR.glob("*.json")) == sorted(RELEASES)


def test_the_scenario_loop_covers_every_sglang_scenario():
    assert {"h800_deepep", "h200_deepep", "b200_mtp", "b200_no_mtp", "sglang_single_gpu"} <= set(SCENARIOS)


@pytest.mark.parametrize("version", RELEASES)
def test_the_kept_table_is_what_the_wheel_it_names_holds(version):
    from harness.sglang.wheel_source import release_wheel
    row = load_version(version)
    wheel = release_wheel(row)
    table = release_table(wheel, row)
    assert kept(version) == table, "\n".join(changes(kept(version), table)[:20]) or "wheel or sha256 differ"
    assert table_path(version).read_text() == dumps(table)  # written by the script, not edited by hand


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_scenario_plan_uses_only_flags_and_variables_the_release_has(scenario, version):
    """Offline, from the kept tables (the wheel-based check is tests/test_sglang_flags.py)."""
    specs, _, _ = load_deployment_specs(scenario)  # a PD scenario: each role's plan
    flags, environ = kept_flag_table(version), set(kept(version)["environ"])
    for spec in specs.values():
        plan = build_plan(spec, environ={}, version=version)
        for node in plan.nodes:
            assert flags.problems(node.server_args(plan.launcher_len), node.flag_keys) == []
            assert {k for k in node.env if k.startswith("SGLANG_")} <= environ


@pytest.mark.parametrize("version", RELEASES)
def test_versions_yaml_says_what_the_tables_say(version):
    row, table = load_version(version), kept(version)
    environ, readers = set(table["environ"]), table["readers_of_harness_variables"]
    # every variable the row sets is declared, and some file of SGLang reads it
    for name in [*row.profile["v2_env"], *(row.capture_trace.env if row.capture_trace else {}),
                 *([row.profile["decode_min_bs_env"]] if row.profile["decode_min_bs_env"] else [])]:
        assert name in environ and readers.get(name), name
    # the decode minimum batch is set exactly where the release has it, and only its classic profiler reads it
    has_min_bs = "SGLANG_PROFILE_BY_STAGE_DECODE_MIN_BS" in environ
    assert (row.profile["decode_min_bs_env"] is not None) == has_min_bs
    if has_min_bs:
        assert readers["SGLANG_PROFILE_BY_STAGE_DECODE_MIN_BS"] == [
            "sglang/srt/managers/scheduler_components/profiler_manager.py"]
    # step labels: the verify and draft stage names the row expects are the ones the label builder writes
    labels = table["step_labels"]
    assert any(" bs={bs}" in t for t in labels["templates"]), labels
    literal = set(labels["stage_names"])
    assert row.step_labels["verify"] in literal | {m for m in labels["forward_modes"]}
    assert (row.step_labels["verify"] == "VERIFY") == ("VERIFY" in literal)
    assert (row.step_labels["draft"] == "DRAFT") == ("DRAFT" in literal)
    # every endpoint the harness calls is a route of the release (/metrics is mounted, also a route)
    assert set(row.endpoints.values()) <= set(table["routes"]), set(row.endpoints.values()) - set(table["routes"])
    # the capture trace pattern matches a file name the release writes, and no release without one has a row
    names = [n for files in table["capture_trace_names"].values() for n in files]
    if row.capture_trace is None:
        assert names == [], names
    else:
        samples = [re.sub(r"\{tag\}", "bs_8", re.sub(r"\{(tp_rank|rank)\}", "0", re.sub(r"\{(runner_name|bs)\}", "8", n)))
                   for n in names]
        pattern = row.capture_trace.pattern.format(tp=0)
        assert [s for s in samples if fnmatch.fnmatch(s, pattern)], (pattern, names)
    # the old cuda-graph names go at 0.5.20; --enable-dp-attention is deprecated from 0.5.22
    flags = table["flags"]
    # the row spells a flag the new way exactly from the release that has the new name
    assert ("--cuda-graph-bs-decode" in flags) == (row.flags["cuda_graph_bs"][0] == "--cuda-graph-bs-decode")
    assert ("--attn-dp-size" in flags) == (row.flags["dp_attention"][0] == "--attn-dp-size")


def test_a_changed_wheel_is_named_line_by_line():
    """The comparison the check prints is what a reviewer reads; it must see each kind of change."""
    old = kept("0.5.23")
    new = copy.deepcopy(old)
    new["flags"].pop("--attn-dp-size")
    new["flags"]["--tp-size"]["deprecated"] = True
    new["environ"].append("SGLANG_NEW_THING")
    new["step_labels"]["stage_names"] = ["DRAFT", "VERIFY_V2"]
    new["flags"]["--moe-a2a-backend"]["choices"] = [*old["flags"]["--moe-a2a-backend"]["choices"][1:], "new_backend"]
    new["flags"]["--host"]["choices"] = ["0.0.0.0"]
    lines = changes(old, new)
    removed = old["flags"]["--moe-a2a-backend"]["choices"][0]
    assert f"flag choices changed: --moe-a2a-backend: added ['new_backend'], removed [{removed!r}]" in lines
    assert "flag choices changed: --host: None -> ['0.0.0.0']" in lines
    assert "flag removed: --attn-dp-size" in lines and "flag now deprecated: --tp-size" in lines
    assert "environ added: SGLANG_NEW_THING" in lines and any(l.startswith("step_labels:") for l in lines)
    assert changes(old, old) == []


def test_the_script_names_pypi_releases_newer_than_the_table():
    available = ["0.5.25", "0.5.24", "0.5.23", "0.5.22", "0.5.24.post1", "0.5.25rc0", "0.5.26.dev1", "0.4.9"]
    assert newer_than_table(available, RELEASES) == ["0.5.24", "0.5.24.post1", "0.5.25rc0", "0.5.25"]
    assert newer_than_table(RELEASES, RELEASES) == []


def test_check_mode_fails_on_a_table_that_differs(tmp_path, capsys):
    """`extract_release --check` (what CI can run) exits 1 and names the difference."""
    from harness.sglang.extract_release import main
    mutated = kept("0.5.13.post1")
    mutated["flags"]["--tp-size"]["takes_value"] = False
    (tmp_path / "0.5.13.post1.json").write_text(dumps(mutated))
    assert main(["0.5.13.post1", "--check", "--offline", "--tables-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "0.5.13.post1.json: differs from sglang-0.5.13.post1-" in out and "flag changed: --tp-size" in out
    (tmp_path / "0.5.13.post1.json").write_text(table_path("0.5.13.post1").read_text())
    assert main(["0.5.13.post1", "--check", "--offline", "--tables-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "1 kept table(s) match their wheels\n"


def test_the_script_always_says_what_pypi_has(capsys):
    """Never silent about newer releases: one is named, none is said, or PyPI could not be asked."""
    from harness.sglang.extract_release import main
    assert main(["0.5.23", "--check"]) == 0
    captured = capsys.readouterr()
    said = [line for line in (captured.out + captured.err).splitlines() if "PyPI" in line]
    assert said and all(re.match(r"PyPI has (no SGLang release newer than 0\.5\.23|SGLang \S+, newer than)"
                                 r"|could not ask PyPI", line) for line in said), said


@pytest.mark.parametrize("version", RELEASES)
def test_the_analysis_reads_stage_and_batch_from_each_releases_verify_label(version):
    """The verify step's label as the release's label builder writes it (its templates, every optional
    suffix applied) is read as a verify step with its bs: what the profiled-batch check compares."""
    from analysis.attribution.steps import _batch_of, stage_of
    from analysis.tables.profiled_batch import BATCH_STAGES
    templates = kept(version)["step_labels"]["templates"]
    head = next(t for t in templates if " bs={bs}" in t and "toks" not in t)
    label = head.replace("{mode.name}", "{stage}").format(stage=load_version(version).step_labels["verify"], bs=7)
    for suffix in (t for t in templates if t.startswith("{base}")):
        label = suffix.format(base=label, forward_id=3, suffix="x=1")
    assert label.startswith("step[") and label.endswith("]"), (templates, label)
    assert stage_of(label) in BATCH_STAGES and _batch_of(label) == 7, label


def test_add_appends_an_empty_entry_for_a_newer_release_and_refuses_an_older_one(tmp_path, capsys):
    """The one command of a new release: its entry (empty until the review fills it) goes last."""
    from harness.sglang.extract_release import VERSIONS_PATH, add_release_entry, main
    from harness.sglang.version import load_table
    copy_path = tmp_path / "versions.yaml"
    copy_path.write_text(VERSIONS_PATH.read_text())
    add_release_entry("0.5.24", copy_path)
    data = yaml.safe_load(copy_path.read_text())
    assert list(data["releases"])[-2:] == ["0.5.23", "0.5.24"] and data["releases"]["0.5.24"] == {}
    assert list(load_table(str(copy_path))["releases"])[-1] == "0.5.24"  # still a valid table, oldest first
    load_table.cache_clear()
    assert main(["--add", "0.5.22", "--offline"]) == 2
    assert "0.5.22 is not newer than the newest release in versions.yaml (0.5.23)" in capsys.readouterr().err
    assert VERSIONS_PATH.read_text().rstrip().endswith('"0.5.23": {}')
