"""`validate`'s check of every launch flag against the planned SGLang release's flag table.

Why in `validate` only: `run` plans for the release it is given (or the default) and then again for
the release installed on the nodes, whose own parser judges the command line before any server starts
(harness/sglang/node_check.py); a refusal there comes after placement. `validate` knows the release
it plans for (--sglang-version, else versions.yaml's default), so it refuses an unknown, deprecated or
ill-valued flag for that release at once, from the table shipped in harness/sglang/launch_flags.yaml.
A release without a table is said to be unchecked, never judged by another release's table.
"""
from __future__ import annotations


def _deployments(scenario) -> dict[str, object]:
    """{role: DeploymentSpec}: "" for a one-server scenario, each role of a prefill/decode pair."""
    from harness.pd_roles import role_scenarios
    from harness.sglang.spec import scenario_deployment

    if scenario.engine.disaggregation is None:
        return {"": scenario_deployment(scenario)}
    return {role: scenario_deployment(s) for role, s in role_scenarios(scenario).items()}


def launch_flag_problems(scenario, sglang_version: str | None) -> tuple[list[str], str | None]:
    """(one line per flag the release would refuse, naming the scenario key; a note when the release has
    no table and nothing could be checked). Call it on a scenario whose plan builds."""
    if scenario.engine.kind != "sglang":
        return [], None
    from harness.sglang.launch_flags import LAUNCH_FLAGS_PATH, release_flag_table
    from harness.sglang.plan import build_plan

    problems: list[str] = []
    for role, spec in _deployments(scenario).items():
        plan = build_plan(spec, environ={}, version=sglang_version)
        version = plan.sglang.version
        table = release_flag_table(version)
        if table is None:
            return [], (f"launch flags not checked: {LAUNCH_FLAGS_PATH.name} has no table for SGLang {version} "
                        f"(a release newer than harness/sglang/versions.yaml knows); each node's own SGLang "
                        "judges them before launch")
        node = plan.nodes[0]
        args = node.server_args(plan.launcher_len)
        planned, extra = args[:len(args) - len(spec.extra_args)], args[len(args) - len(spec.extra_args):]
        extra_key = f"engine.extra_args or engine.disaggregation.{role}.extra_args" if role else "engine.extra_args"
        plan_key = f"engine.disaggregation.{role} (its SGLang plan)" if role else "engine (the SGLang plan)"
        found = [f"{plan_key}: {p}" for p in table.problems(planned, node.flag_keys)]
        found += [f"{extra_key}: {p}" for p in table.problems(extra)]
        problems += [plan.secrets.text(f"{p} (SGLang {version}; --sglang-version picks the release)") for p in found]
    return problems, None
