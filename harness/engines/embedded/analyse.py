"""The embedded engine's traces analysed where they are (the run directory): analysis.api, one call.

Why here: the Ray job (ray_engine.py), the Ray-free standalone runner and `moe-harness analyze RUN_DIR`
(harness/reanalysis.py) analyse the same way.
"""
from __future__ import annotations

from pathlib import Path

from harness.table_files import WrittenAnalysis
from harness.scenario import Scenario


def analyse(trace_paths: list[Path], scenario: Scenario, run_name: str, out_dir: Path,
            device_name: str | None = None, problems_at: str | None = None, jobs: int | None = None) -> WrittenAnalysis:
    """analysis.api on the collected traces; returns the result, the D4 table (markdown, as written)
    and the files (problems_at, jobs: as write_table_files and analysis.api take them).

    device_name: the GPU the engine reported; when it names another built-in peaks file than the
    scenario's cluster.gpu_type (demo_gpu declared H100, run on an H200), SOL uses the GPU it ran on.
    """
    import msgspec

    from analysis.api import AnalysisOptions, analyze

    from harness.table_files import write_table_files
    from harness.scenario_sol import hardware_for_device, sol_settings_for

    a = scenario.analysis
    sol, no_sol_reason = sol_settings_for(scenario)  # SOL columns where the scenario says enough
    ran_on = hardware_for_device(device_name)
    sol_note = ""
    if sol is not None and ran_on and ran_on != sol.hardware:
        sol_note = f"\nSOL peaks: {ran_on} (the engine ran on {device_name}; the scenario says {sol.hardware}).\n"
        sol = msgspec.structs.replace(sol, hardware=ran_on)
    result = analyze(
        [str(p) for p in trace_paths],
        signature=a.signature,
        model=a.model,
        options=AnalysisOptions(run=run_name, rank_policy=a.rank_policy, sol=sol, jobs=jobs),
    )
    table, files = write_table_files(result, out_dir, no_sol_reason if sol is None else None, sol_note, problems_at)
    return WrittenAnalysis(result, table, files)
