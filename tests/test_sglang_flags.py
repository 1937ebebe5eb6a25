"""Every sglang scenario's launch command must be accepted by the pinned SGLang's own CLI.

The pinned wheel is downloaded once per session (pip download --no-deps, cached) and its
server_args.py is read with ast: a flag renamed or removed upstream fails here.
"""
from pathlib import Path

import pytest
import yaml

from harness.sglang.flags import (FlagError, download_pinned_dist, parse_server_args_source,
                                  read_server_args_source, read_sglang_env_names)
from harness.sglang.plan import build_plan
from harness.sglang.spec import deployment_spec
from harness.sglang.version import load_pin

REPO = Path(__file__).resolve().parent.parent
SGLANG_SCENARIOS = sorted(p for p in (REPO / "scenarios").glob("*.yaml")
                          if (yaml.safe_load(p.read_text()).get("engine") or {}).get("kind") == "sglang")


@pytest.fixture(scope="session")
def pinned_dist(tmp_path_factory):
    import os
    cache = os.environ.get("MOE_HARNESS_CACHE")
    return download_pinned_dist(cache_dir=Path(cache) / "sglang-dist" if cache else None)


@pytest.fixture(scope="session")
def flag_table(pinned_dist):
    return parse_server_args_source(read_server_args_source(pinned_dist), load_pin().version)


def test_the_five_deployment_scenarios_exist():
    names = {p.stem for p in SGLANG_SCENARIOS}
    assert {"h800_deepep", "h200_deepep", "b200_mtp", "b200_no_mtp", "sglang_single_gpu"} <= names


@pytest.mark.parametrize("path", SGLANG_SCENARIOS, ids=lambda p: p.stem)
def test_scenario_flags_exist_in_pinned_sglang(path, flag_table, pinned_dist):
    data = yaml.safe_load(path.read_text())
    spec = deployment_spec(data["engine"], data["cluster"])
    plan = build_plan(spec, environ={})
    env_names = read_sglang_env_names(pinned_dist)
    for node in plan.nodes:
        flag_table.validate(node.server_args(len(spec.launcher)), where=f"{path.name} node {node.node_rank}")
        unknown_env = {k for k in node.env if k.startswith("SGLANG_") and k not in env_names}
        assert not unknown_env, f"{path.name}: env not declared by SGLang {load_pin().version}: {unknown_env}"


def test_pinned_table_has_the_deployment_flags(flag_table):
    for flag in ["--tp-size", "--dp-size", "--ep-size", "--enable-dp-attention", "--moe-a2a-backend",
                 "--deepep-mode", "--enable-two-batch-overlap", "--speculative-algorithm",
                 "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                 "--nnodes", "--node-rank", "--dist-init-addr", "--enable-metrics", "--load-format",
                 "--attention-backend", "--cuda-graph-bs", "--cuda-graph-max-bs"]:
        assert flag in flag_table, flag
    assert "deepep" in flag_table.flags["--moe-a2a-backend"].choices


def test_renamed_flag_and_bad_choice_are_rejected(flag_table):
    with pytest.raises(FlagError, match=r"unknown flag --enable-dp-attn .*did you mean --enable-dp-attention"):
        flag_table.validate(["--tp-size", "8", "--enable-dp-attn"])
    with pytest.raises(FlagError, match="'deep_ep' is not one of"):
        flag_table.validate(["--moe-a2a-backend", "deep_ep"])
    with pytest.raises(FlagError, match="--tp-size needs a value"):
        flag_table.validate(["--tp-size", "--enable-metrics"])
    with pytest.raises(FlagError, match="takes no value"):
        flag_table.validate(["--enable-metrics=1"])


def test_extractor_on_synthetic_source():
    source = '''
CHOICES = ["a", "b"]
def add(parser):
    parser.add_argument("--long-name", "--ln", type=int)
    parser.add_argument("--switch", action="store_true")
    parser.add_argument("--toggle", action=argparse.BooleanOptionalAction)
    parser.add_argument("--pick", choices=CHOICES)
    parser.add_argument("--many", nargs="+", type=int)
    other.add_argument("positional")
'''
    table = parse_server_args_source(source, "synthetic")
    assert set(table.flags) == {"--long-name", "--ln", "--switch", "--toggle", "--no-toggle", "--pick", "--many"}
    table.validate(["--ln=3", "--switch", "--no-toggle", "--pick", "b", "--many", "1", "2", "3"])
    with pytest.raises(FlagError, match="'c' is not one of"):
        table.validate(["--pick", "c"])


def test_source_without_add_argument_fails_loudly():
    with pytest.raises(FlagError, match="CLI layout changed"):
        parse_server_args_source("x = 1\n", "0.0.0")


def test_dockerfile_base_image_follows_the_pin():
    dockerfile = (REPO / "Dockerfile").read_text()
    pin = load_pin()
    from_lines = [l for l in dockerfile.splitlines() if l.startswith(("FROM", "ARG SGLANG_IMAGE"))]
    assert f"ARG SGLANG_IMAGE={pin.docker_image}" in from_lines, from_lines
