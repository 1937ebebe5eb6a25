"""`moe-harness validate SCENARIO`: check a scenario file without starting anything."""
from __future__ import annotations

import argparse
import sys

from harness.commands import COMMANDS
from harness.scenario import ScenarioError, load_scenario


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate",
        help=COMMANDS["validate"],
        description="Check a scenario: every unknown key and impossible combination is reported with "
        "its file, key and line; for an SGLang scenario the launch plan is built too (what the run's plan "
        "phase would refuse). SCENARIO is a name under scenarios/ (demo) or a path.",
    )
    parser.add_argument("scenario", metavar="SCENARIO", help="scenario name (e.g. demo) or YAML path")
    from harness.sglang.version import add_version_argument

    add_version_argument(parser, "SGLang scenarios: the release whose launch plan is checked")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        scenario, path = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return 1
    from harness.deployment_check import deployment_problems

    problems = deployment_problems(scenario, getattr(args, "sglang_version", None))
    if problems:
        print(f"invalid: {ScenarioError(str(path), problems)}", file=sys.stderr)
        return 1
    engine = scenario.engine
    from harness.node.secrets import without_url_credentials

    detail = f"preset {engine.preset} on {engine.device}" if engine.kind == "embedded" else engine.model_path
    print(without_url_credentials(f"ok: {path} (scenario {scenario.name}, engine {engine.kind}: {detail})"))
    return 0
