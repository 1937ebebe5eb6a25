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

from harness.commands.plan import check_plan_offline, load_deployment_spec
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
    assert VERSIONS[0] == "0.5.23" == load_version().version
    assert {"0.5.17", "0.5.13.post1"} <= set(VERSIONS)
    with pytest.raises(VersionError, match=r"SGLang 0.5.99 is not supported; supported: 0.5.23, 0.5.17"):
        load_version("0.5.99")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", SGLANG_SCENARIOS, ids=lambda p: p.stem)
def test_every_scenario_plans_with_no_unknown_or_deprecated_flag(path, version, sglang_sources):
    spec, _ = load_deployment_spec(str(path))
    plan = build_plan(spec, environ={}, version=version)
    assert check_plan_offline(plan, path.name) == []


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


def test_plan_command_checks_flags_for_the_chosen_release(capsys, sglang_sources):
    import argparse

    from harness.commands import plan as plan_command
    parser = argparse.ArgumentParser()
    plan_command.register(parser.add_subparsers())
    for version in VERSIONS:
        args = parser.parse_args(["plan", "b200_mtp", "--check-flags", "--sglang-version", version])
        assert args.func(args) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"# SGLang {version} plan") and f"exists in SGLang {version}, none deprecated" in out


@pytest.mark.parametrize("version", VERSIONS)
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
