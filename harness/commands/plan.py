"""`moe-harness plan SCENARIO`: print each node's SGLang launch command and environment."""
from __future__ import annotations

import sys

from harness.commands import COMMANDS


def load_deployment_specs(name_or_path: str):
    """({role: DeploymentSpec}, router settings or None, path) of an sglang scenario file: one spec under
    "" for a one-server scenario, one per role for a prefill/decode (PD) scenario."""
    from harness.scenario import load_scenario
    from harness.pd_roles import role_scenarios
    from harness.sglang.plan import PlanError
    from harness.sglang.spec import scenario_deployment

    scenario, path = load_scenario(name_or_path)
    if scenario.engine.kind != "sglang":
        raise PlanError(f"{path}: engine.kind is {scenario.engine.kind!r}; `plan` is for sglang scenarios")
    pd = scenario.engine.disaggregation
    if pd is None:
        return {"": scenario_deployment(scenario)}, None, path
    return {role: scenario_deployment(s) for role, s in role_scenarios(scenario).items()}, pd, path


def router_line(pd, plans: dict) -> str:
    """The router's command as the run starts it, the servers' addresses as placeholders."""
    from harness.sglang.router import router_argv

    argv = router_argv(pd.router.launcher, pd.router.port, [f"http://{{prefill_node0_ip}}:{plans['prefill'].spec.port}"],
                       pd.bootstrap_port, [f"http://{{decode_node0_ip}}:{plans['decode'].spec.port}"],
                       pd.router.extra_args, pd.router.prometheus_port)
    return "\n# router (on a node Ray picks; {prefill_node0_ip} and {decode_node0_ip}: each role's node 0)\n" + \
        " ".join(argv) + "\n"


def load_deployment_spec(name_or_path: str):
    """The DeploymentSpec of an sglang scenario file (path or name under scenarios/)."""
    from harness.sglang.plan import PlanError
    from harness.sglang.spec import deployment_spec
    from harness.scenario import load_scenario

    scenario, path = load_scenario(name_or_path)
    data = scenario.model_dump(mode="json")
    engine = data.get("engine") or {}
    if engine.get("kind") != "sglang":
        raise PlanError(f"{path}: engine.kind is {engine.get('kind')!r}; `plan` is for sglang scenarios")
    return deployment_spec(engine, data.get("cluster") or {}, where=f"{path}: engine",
                           profile=data.get("profile") or {}, workload=data.get("workload") or {}), path


def check_plan_offline(plan, where: str) -> list[str]:
    """Every flag against the release's own declarations, every SGLANG_* variable against its environ.py."""
    from harness.sglang.wheel_source import environ_names, flag_table

    version = plan.sglang.version
    table = flag_table(version)
    declared = environ_names(version)
    problems = []
    for node in plan.nodes:
        here = f"{where} node {node.node_rank}"
        problems += [f"{here}: {p}" for p in table.problems(node.server_args(plan.launcher_len), node.flag_keys)]
        unknown = sorted(k for k in node.env if k.startswith("SGLANG_") and k not in declared)
        problems += [f"{here}: environment variable {k} is not declared by SGLang {version} (srt/environ.py)"
                     for k in unknown]
    return problems


def run(args) -> int:
    from harness.sglang.flags import FlagError
    from harness.sglang.plan import PlanError, build_plan
    from harness.sglang.version import VersionError
    from harness.scenario import ScenarioError
    try:
        specs, pd, path = load_deployment_specs(args.scenario)
        plans = {role: build_plan(spec, version=args.sglang_version) for role, spec in specs.items()}
    except (PlanError, VersionError, ValueError, ScenarioError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    plan = next(iter(plans.values()))
    if plan.sglang.assumption:
        print(f"warning: {plan.sglang.assumption}", file=sys.stderr)
    for role, role_plan in plans.items():
        if role:
            sys.stdout.write(f"# ===== {role} role ({role_plan.spec.nodes} node(s)) =====\n")
        sys.stdout.write(role_plan.render())
    if pd is not None:
        sys.stdout.write(router_line(pd, plans))
    if args.check_flags:
        try:
            problems = [p for role, role_plan in plans.items()
                        for p in check_plan_offline(role_plan, f"{path}{f' {role} role' if role else ''}")]
        except FlagError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if problems:
            print(f"error: not accepted by SGLang {plan.sglang.version}:\n  " + "\n  ".join(problems), file=sys.stderr)
            return 1
        print(f"# every flag and SGLANG_* variable exists in SGLang {plan.sglang.version}, none deprecated")
    return 0


def register(subparsers) -> None:
    from harness.sglang.version import add_version_argument
    p = subparsers.add_parser("plan", help=COMMANDS["plan"],
                              description="Print each node's SGLang launch command and environment "
                                          "(secrets masked), spelled for one SGLang release. Node 0's IP is "
                                          "filled in at launch.")
    p.add_argument("scenario", help="scenario name (scenarios/NAME.yaml) or path")
    add_version_argument(p, "the SGLang release to plan for (default: versions.yaml's default)")
    p.add_argument("--check-flags", action="store_true",
                   help="also check every flag (unknown or deprecated) and SGLANG_* variable against that "
                        "release's own source, read from its wheel (downloaded once, cached)")
    p.set_defaults(func=run)
