"""`moe-harness validate SCENARIO`: check a scenario file without starting anything."""
from __future__ import annotations

import argparse
import re
import sys

from harness.commands import COMMANDS
from harness.scenario import ScenarioError, load_scenario


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate",
        help=COMMANDS["validate"],
        description="Check a scenario: every unknown key and impossible combination is reported with "
        "its file, key and line, one line each; for an SGLang scenario the launch plan is built too (what the "
        "run's plan phase would refuse) and its every flag checked against the release's flag table (what "
        "each node's SGLang would refuse). SCENARIO is a name under scenarios/ (demo) or a path.",
    )
    parser.add_argument("scenario", metavar="SCENARIO", help="scenario name (e.g. demo) or YAML path")
    from harness.sglang.version import add_version_argument

    add_version_argument(parser, "SGLang scenarios: the release whose launch plan is checked")
    parser.set_defaults(func=run)


LINE_BREAKS = re.compile(r"\s*\n\s*")  # a parser's multi-line message, kept on its verdict's line


def _refuse(source: str, problems: list[str]) -> int:
    """One line per problem, each naming the file: `invalid: FILE: KEY: what is wrong`."""
    for problem in problems:
        print(f"invalid: {source}: {LINE_BREAKS.sub(' ', problem.strip())}", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    try:
        scenario, path = load_scenario(args.scenario)
    except ScenarioError as exc:
        return _refuse(exc.source, exc.problems)
    from harness.deployment_check import deployment_problems
    from harness.commands.validate_flags import launch_flag_problems

    version = getattr(args, "sglang_version", None)
    note = None
    problems = deployment_problems(scenario, version)
    if not problems:
        problems, note = launch_flag_problems(scenario, version)
    if problems:
        return _refuse(str(path), problems)
    if note:
        print(f"note: {path}: {note}", file=sys.stderr)
    engine = scenario.engine
    from harness.node.secrets import without_url_credentials

    detail = f"preset {engine.preset} on {engine.device}" if engine.kind == "embedded" else engine.model_path
    print(without_url_credentials(f"ok: {path} (scenario {scenario.name}, engine {engine.kind}: {detail})"))
    return 0
