"""Launch flags per supported SGLang release, read from the release's own source.

Each release's wheel is downloaded once (pip download --no-deps) and only the files the checks read
are cached (harness/sglang/wheel_source.py). The extractor is held against SGLang's own parser:
tests/data/sglang_cli/<version>.json was dumped by `node_check_script.py dump` with each real
release installed (see the README there).
"""
import json
from pathlib import Path

import pytest
import yaml

from harness.commands.plan import check_plan_offline, load_deployment_spec, load_deployment_specs
from harness.sglang.cli_source import parse_cli_sources
from harness.sglang.flags import FlagError
from harness.sglang.plan import build_plan
from harness.sglang.version import VersionError, load_version, supported_versions
from harness.sglang.wheel_source import flag_table

REPO = Path(__file__).resolve().parent.parent
SGLANG_SCENARIOS = sorted(p for p in (REPO / "scenarios").glob("*.yaml")
                          if (yaml.safe_load(p.read_text()).get("engine") or {}).get("kind") == "sglang")
VERSIONS = supported_versions()


@pytest.fixture(scope="session")
def tables(sglang_sources):
    return {v: flag_table(v) for v in VERSIONS}


def test_the_five_deployment_scenarios_exist():
    names = {p.stem for p in SGLANG_SCENARIOS}
    assert {"h800_deepep", "h200_deepep", "b200_mtp", "b200_no_mtp", "sglang_single_gpu"} <= names


def test_the_supported_releases_and_the_default():
    assert VERSIONS[0] == "0.5.23" == load_version().version and VERSIONS[-1] == "0.5.13.post1"
    # every release PyPI had from 0.5.13.post1 to 0.5.23 when the table was written
    assert VERSIONS[::-1] == ["0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18",
                              "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]
    for older in ("0.5.13", "0.5.12.post1", "0.4.10"):
        with pytest.raises(VersionError, match=rf"SGLang {older} is not supported; supported: every release "
                                               r"from 0.5.13.post1 to 0.5.23"):
            load_version(older)
    with pytest.raises(VersionError, match="SGLang 0.5.15.post2 is not supported"):  # inside the range, not a release
        load_version("0.5.15.post2")
    with pytest.raises(VersionError, match="'latest' is not a release name"):
        load_version("latest")


def test_a_release_newer_than_the_table_is_planned_as_the_newest_with_a_warning():
    newer = load_version("0.5.24")
    assert (newer.version, newer.assumed_from, newer.docker_image) == ("0.5.24", "0.5.23", "lmsysorg/sglang:v0.5.24")
    assert newer.flags == load_version("0.5.23").flags
    assert "0.5.24 is newer than the newest release" in newer.assumption and "planned as 0.5.23" in newer.assumption
    assert load_version("0.5.23").assumption is None and load_version("0.6.0").assumed_from == "0.5.23"


def test_each_release_row_is_the_changes_up_to_it():
    """What changed at which release (docs/sglang.md): each change holds from its release on."""
    def at(version):
        row = load_version(version)
        return (row.flags["dp_attention"][0], row.flags["cuda_graph_bs"][0],
                row.capture_trace.pattern if row.capture_trace else None, row.profile["decode_min_bs_env"],
                row.step_labels["verify"], row.generate_contract)
    assert at("0.5.13.post1") == ("--dp-size", "--cuda-graph-bs", None, None, "TARGET_VERIFY", False)
    assert at("0.5.17") == ("--dp-size", "--cuda-graph-bs-decode", "cuda_graph_capture-*-TP-{tp}.json.gz", None,
                            "TARGET_VERIFY", False)
    assert at("0.5.18")[2] == "*_bs_*_rank{tp}.json.gz"
    assert at("0.5.20") == ("--dp-size", "--cuda-graph-bs-decode", "*_bs_*_rank{tp}.json.gz",
                            "SGLANG_PROFILE_BY_STAGE_DECODE_MIN_BS", "VERIFY", False)
    assert at("0.5.22") == at("0.5.23") == ("--attn-dp-size", "--cuda-graph-bs-decode", "*_bs_*_rank{tp}.json.gz",
                                            "SGLANG_PROFILE_BY_STAGE_DECODE_MIN_BS", "VERIFY", True)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", SGLANG_SCENARIOS, ids=lambda p: p.stem)
def test_every_scenario_plans_with_no_unknown_or_deprecated_flag(path, version, sglang_sources):
    specs, _, _ = load_deployment_specs(str(path))  # a PD scenario: each role's plan
    for role, spec in specs.items():
        plan = build_plan(spec, environ={}, version=version)
        assert check_plan_offline(plan, f"{path.name} {role}") == []


def test_each_release_gets_its_own_spelling():
    spec, _ = load_deployment_spec("h800_deepep")
    argv = {v: " ".join(build_plan(spec, environ={}, version=v).nodes[0].argv) for v in VERSIONS}
    assert "--attn-dp-size 16" in argv["0.5.23"] and "--dp-size" not in argv["0.5.23"]
    assert "--cuda-graph-bs-decode 128" in argv["0.5.23"] and "--cuda-graph-bs-decode 128" in argv["0.5.17"]
    assert "--dp-size 16 --enable-dp-attention" in argv["0.5.17"]
    assert "--dp-size 16 --enable-dp-attention" in argv["0.5.13.post1"] and "--cuda-graph-bs 128" in argv["0.5.13.post1"]


def test_the_old_spelling_is_refused_by_0523_with_the_scenario_key(tables):
    spec, _ = load_deployment_spec("b200_mtp")
    old = build_plan(spec, environ={}, version="0.5.13.post1").nodes[0]
    problems = tables["0.5.23"].problems(old.server_args(len(spec.launcher)), old.flag_keys)
    assert problems == [
        "deprecated flag --enable-dp-attention (from engine.dp_attention): use --attn-dp-size <dp-size>",
        "unknown flag --cuda-graph-max-bs (from engine.cuda_graph_max_bs); did you mean --cuda-graph-max-bs-decode, "
        "--cuda-graph-max-bs-prefill, --cuda-graph-bs-decode?"]


@pytest.mark.parametrize("path", SGLANG_SCENARIOS, ids=lambda p: p.stem)
def test_plan_command_checks_flags_for_the_chosen_release(path, capsys, sglang_sources):
    """`moe-harness plan SCENARIO --check-flags --sglang-version V` passes for every release in the range."""
    import argparse

    from harness.commands import plan as plan_command
    parser = argparse.ArgumentParser()
    plan_command.register(parser.add_subparsers())
    for version in VERSIONS:
        args = parser.parse_args(["plan", path.stem, "--check-flags", "--sglang-version", version])
        assert args.func(args) == 0, capsys.readouterr().err
        captured = capsys.readouterr()
        assert any(line.startswith(f"# SGLang {version} plan") for line in captured.out.splitlines()[:2]) and \
            f"exists in SGLang {version}, none deprecated" in captured.out and "warning" not in captured.err


DUMPED = sorted(p.stem for p in (REPO / "tests" / "data" / "sglang_cli").glob("*.json"))


def test_sglangs_own_parser_was_dumped_for_the_first_middle_and_last_release():
    assert {"0.5.13.post1", "0.5.17", "0.5.23"} <= set(DUMPED) <= set(VERSIONS)


@pytest.mark.parametrize("version", DUMPED)
def test_the_source_reading_agrees_with_sglangs_own_parser(version, tables):
    """Same flag names, value arity, deprecations; choices equal wherever the source names them."""
    dumped = json.loads((REPO / "tests" / "data" / "sglang_cli" / f"{version}.json").read_text())
    assert dumped["sglang_version"] == version
    real, ours = dumped["flags"], tables[version].flags
    assert set(ours) == set(real)
    for name, spec in ours.items():
        want = real[name]
        assert (spec.takes_value, spec.multiple, spec.deprecated) == \
            (want["takes_value"], want["multiple"], want["deprecated"]), name
        if spec.choices is not None:
            assert sorted(spec.choices) == want["choices"], name
    unresolved = sorted(n for n, s in ours.items() if s.choices is None and real[n]["choices"])
    assert len(unresolved) <= 8, unresolved  # runtime-built choice lists stay open (never a false refusal)
    for flag in ("--moe-a2a-backend", "--deepep-mode", "--moe-runner-backend", "--attention-backend", "--load-format"):
        assert ours[flag].choices is not None, flag


def test_renamed_flag_and_bad_values_are_rejected(tables):
    table = tables["0.5.23"]
    with pytest.raises(FlagError, match=r"unknown flag --attn-dp-szie; did you mean --attn-dp-size"):
        table.validate(["--tp-size", "8", "--attn-dp-szie", "8"])
    with pytest.raises(FlagError, match="'deep_ep' is not one of"):
        table.validate(["--moe-a2a-backend", "deep_ep"])
    with pytest.raises(FlagError, match=r"--tp-size \(from engine.tp\) needs a value"):
        table.validate(["--tp-size", "--enable-metrics"], keys={"--tp-size": "engine.tp"})
    with pytest.raises(FlagError, match="takes no value"):
        table.validate(["--enable-metrics=1"])


def test_extractor_on_synthetic_source():
    fields = '''
from typing import Literal, Optional, List
CHOICES = ["a", "b"]
MORE = CHOICES + ["c"]
class Group(msgspec.Struct):
    long_name: A[int, Arg(help="x", aliases=["--ln"])] = 1
    switch: A[bool, "a switch"] = False
    hidden: A[bool, Arg(no_cli=True)] = False
    derived: A[int, Derived(doc="not a flag")] = 0
    pick: A[Optional[Literal["x", "y"]], "one of two"] = None
    many: A[Optional[List[int]], "several"] = None
    toggle: A[Optional[bool], Arg(help="t", action=argparse.BooleanOptionalAction)] = None
    named: A[str, Arg(help="n", cli_name="--other-name", choices=MORE)] = "a"
    old: A[bool, "(Deprecated, use --switch) the old switch"] = False
'''
    server_args = '''
def add(parser):
    parser.add_argument("--plain", type=int)
    parser.add_argument("--gone", action=DeprecatedStoreTrueAction, new_flag="--switch", help="Deprecated.")
    parser.add_argument("--renamed", action=DeprecatedAliasStoreAction, new_flag="--plain", type=int)
'''
    table = parse_cli_sources({"fields.py": fields, "server_args.py": server_args}, "synthetic")
    assert set(table.flags) == {"--long-name", "--ln", "--switch", "--pick", "--many", "--toggle", "--no-toggle",
                                "--other-name", "--old", "--plain", "--gone", "--renamed"}
    table.validate(["--ln=3", "--switch", "--no-toggle", "--pick", "y", "--many", "1", "2", "--other-name", "c",
                    "--plain", "4"])
    assert table.problems(["--pick", "z", "--other-name", "d"]) == [
        "--pick 'z' is not one of ['x', 'y']", "--other-name 'd' is not one of ['a', 'b', 'c']"]
    assert table.problems(["--gone", "--renamed", "3", "--old"]) == [
        "deprecated flag --gone: use --switch", "deprecated flag --renamed: use --plain",
        "deprecated flag --old: (Deprecated, use --switch) the old switch"]


def test_source_without_flags_fails_loudly():
    with pytest.raises(FlagError, match="CLI layout\\s+changed|its CLI layout changed"):
        parse_cli_sources({"server_args.py": "x = 1\n"}, "0.0.0")


def test_unparsable_source_is_a_flag_error_naming_the_file():
    # a choices-only file is parsed too (for its constant lists): its syntax error names it, no traceback
    with pytest.raises(FlagError, match=r"SGLang 0\.0\.0: cannot parse choices\.py"):
        parse_cli_sources({"server_args.py": "x = 1\n"}, "0.0.0", {"choices.py": "def (\n"})
    with pytest.raises(FlagError, match=r"cannot parse server_args\.py"):
        parse_cli_sources({"server_args.py": "def (\n"}, "0.0.0")


def test_dockerfile_base_image_follows_the_default_release():
    dockerfile = (REPO / "Dockerfile").read_text()
    from_lines = [l for l in dockerfile.splitlines() if l.startswith(("FROM", "ARG SGLANG_IMAGE"))]
    assert f"ARG SGLANG_IMAGE={load_version().docker_image}" in from_lines, from_lines
    assert load_version().docker_image == "lmsysorg/sglang:v0.5.23"


def test_docs_named_by_the_sglang_data_files_exist():
    import re
    for data in (REPO / "harness" / "sglang").glob("*.yaml"):
        for doc in re.findall(r"docs/[\w./-]+\.md", data.read_text()):
            assert (REPO / doc).exists(), f"{data.name} cites {doc}, which does not exist"


def test_run_and_plan_accept_every_release_in_the_range_and_refuse_others(capsys):
    import argparse

    from harness import run as run_module
    from harness.commands import plan as plan_command
    run_parser = argparse.ArgumentParser()
    run_module.add_arguments(run_parser)
    plan_parser = argparse.ArgumentParser()
    plan_command.register(plan_parser.add_subparsers())
    for version in [*VERSIONS, "0.5.24"]:
        assert plan_parser.parse_args(["plan", "b200_mtp", "--sglang-version", version]).sglang_version == version
        assert run_parser.parse_args(["--scenario", "b200_mtp", "--sglang-version", version]).sglang_version == version
    for argv in (["plan", "b200_mtp", "--sglang-version", "0.5.13"], ["--scenario", "x", "--sglang-version", "0.5.13"]):
        with pytest.raises(SystemExit) as exit_info:
            (plan_parser if argv[0] == "plan" else run_parser).parse_args(argv)
        assert exit_info.value.code == 2
        assert "SGLang 0.5.13 is not supported; supported: every release from 0.5.13.post1" in capsys.readouterr().err


def test_plan_for_a_newer_release_warns_and_checks_its_own_wheel(capsys, tmp_path, monkeypatch):
    """9.9.9 stands for a release newer than the table that PyPI does not have (yet): the plan is
    printed with the warning, and --check-flags fails because that wheel cannot be read."""
    import argparse

    from harness.commands import plan as plan_command
    monkeypatch.setenv("MOE_HARNESS_WHEELS", str(tmp_path / "wheels"))
    monkeypatch.setenv("MOE_HARNESS_CACHE", str(tmp_path / "cache"))
    parser = argparse.ArgumentParser()
    plan_command.register(parser.add_subparsers())
    args = parser.parse_args(["plan", "b200_mtp", "--sglang-version", "9.9.9"])
    assert args.func(args) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("# SGLang 9.9.9 plan") and "--attn-dp-size 16" in captured.out
    assert "warning: SGLang 9.9.9 is newer than the newest release in harness/sglang/versions.yaml (0.5.23)" \
        in captured.err
    args = parser.parse_args(["plan", "b200_mtp", "--check-flags", "--sglang-version", "9.9.9"])
    assert args.func(args) == 1
    assert "could not download sglang==9.9.9 to read its source" in capsys.readouterr().err
