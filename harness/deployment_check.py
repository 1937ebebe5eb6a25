"""What the run's plan phase would refuse, found before anything starts (`validate`, `run`).

Why: an SGLang scenario passes the schema but its deployment (tp x pp against the GPUs, dp with
dp_attention, deepep_mode without DeepEP, a profiler or capture-trace mode the release lacks) was
checked only by build_plan, after Ray was connected and a run directory made: a late `failed` run
for a mistake in the file. Building the plan needs no node and no network.
"""
from __future__ import annotations

from harness.scenario import Scenario


def deployment_problems(scenario: Scenario, sglang_version: str | None = None) -> list[str]:
    """The plan's refusals as '<key>: message' lines; none for the embedded engine (its checks are the schema's)."""
    if scenario.engine.kind != "sglang":
        return []
    from harness.sglang.plan import PlanError, build_plan
    from harness.sglang.spec import deployment_spec
    from harness.sglang.version import VersionError

    if scenario.engine.disaggregation is not None:  # each role is a deployment of its own
        from harness.pd_roles import role_scenarios
        return [f"engine.disaggregation.{role} (the SGLang plan of the {role} role): {problem.split(': ', 1)[1]}"
                for role, role_scenario in role_scenarios(scenario).items()
                for problem in deployment_problems(role_scenario, sglang_version)]
    try:
        spec = deployment_spec(scenario.engine.model_dump(mode="json"), scenario.cluster.model_dump(mode="json"),
                               profile=scenario.profile.model_dump(mode="json"))
        build_plan(spec, environ={}, version=sglang_version)
    except (PlanError, VersionError) as exc:
        return [f"engine (the SGLang plan): {exc}"]
    return []
