"""`moe-harness plan SCENARIO`: print each node's SGLang launch command and environment."""
from __future__ import annotations

import sys
from pathlib import Path

import yaml


def load_deployment_spec(name_or_path: str):
    """The DeploymentSpec of an sglang scenario file (path or name under scenarios/)."""
    from harness.sglang.plan import PlanError
    from harness.sglang.spec import deployment_spec
    try:
        from harness.scenario import load_scenario
    except ImportError:  # schema not present: read the YAML directly
        load_scenario = None
    if load_scenario is not None:
        scenario, path = load_scenario(name_or_path)
        data = scenario.model_dump(mode="json")
    else:
        path = Path(name_or_path)
        if not path.exists():
            path = Path(__file__).resolve().parents[2] / "scenarios" / f"{name_or_path}.yaml"
        data = yaml.safe_load(path.read_text())
    engine = data.get("engine") or {}
    if engine.get("kind") != "sglang":
        raise PlanError(f"{path}: engine.kind is {engine.get('kind')!r}; `plan` is for sglang scenarios")
    return deployment_spec(engine, data.get("cluster") or {}, where=f"{path}: engine"), path


def run(args) -> int:
    from harness.sglang.plan import PlanError, build_plan
    try:
        spec, path = load_deployment_spec(args.scenario)
        plan = build_plan(spec)
    except (PlanError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(plan.render())
    if args.check_flags:
        from harness.sglang.flags import FlagError, pinned_flag_table
        from harness.sglang.version import load_pin
        try:
            table = pinned_flag_table()
            for node in plan.nodes:
                table.validate(node.server_args(len(spec.launcher)), where=f"{path} node {node.node_rank}")
        except FlagError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"# every flag exists in SGLang {load_pin().version}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="print the per-node SGLang launch commands of a scenario",
                              description="Print each node's SGLang launch command and environment "
                                          "(secrets masked). Node 0's IP is filled in at launch.")
    p.add_argument("scenario", help="scenario name (scenarios/NAME.yaml) or path")
    p.add_argument("--check-flags", action="store_true",
                   help="also check every flag against the pinned SGLang's server_args.py (downloads its wheel once)")
    p.set_defaults(func=run)
