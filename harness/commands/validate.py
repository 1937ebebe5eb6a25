"""`moe-harness validate SCENARIO`: check a scenario file without starting anything."""
from __future__ import annotations

import argparse
import sys

from harness.scenario import ScenarioError, load_scenario


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check a scenario file (unknown keys, impossible combinations) without running it",
        description="Check a scenario: every unknown key and impossible combination is reported with "
        "its file, key and line. SCENARIO is a name under scenarios/ (demo) or a path.",
    )
    parser.add_argument("scenario", metavar="SCENARIO", help="scenario name (e.g. demo) or YAML path")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        scenario, path = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"invalid: {exc}", file=sys.stderr)
        return 1
    engine = scenario.engine
    detail = f"preset {engine.preset} on {engine.device}" if engine.kind == "embedded" else engine.model_path
    print(f"ok: {path} (scenario {scenario.name}, engine {engine.kind}: {detail})")
    return 0
