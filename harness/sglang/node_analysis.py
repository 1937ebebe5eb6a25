"""One D4 column from the row tables each node's actor computed on its own ranks.

Why it is exact: analysis.api attributes every rank on its own, and the D4 column is built from the
rows of all ranks together; so concatenating the nodes' rows and building the column here gives
what analysing every trace file on one machine gives, without moving the traces. SOL columns are
added here too (analysis.d4_sol), from the settings the driver reads off the scenario.
"""
from __future__ import annotations

from analysis.api import Analysis
from analysis.d4 import build_column
from analysis.d4_sol import with_sol
from analysis.model_spec import load_model_spec
from analysis.signature import load_signature
from analysis.sol import SolSettings


def analysis_options(scenario, run_name: str, jobs: int | None = None) -> dict:
    """What every node's actor passes to analysis.api.analyze (plain data: it crosses Ray)."""
    a = scenario.analysis
    return {"run": run_name, "signature": a.signature, "model": a.model, "rank_policy": a.rank_policy,
            "tbo": bool(getattr(scenario.engine, "two_batch_overlap", False)), "jobs": jobs}


def combine(node_results: list[dict], options: dict, accept_length: float | None = None,
            sol: SolSettings | None = None) -> Analysis:
    """The D4 column over every node's rows; with `sol`, its SOL columns as analysis.api adds them."""
    sig = load_signature(options["signature"])
    model = load_model_spec(options["model"]) if options.get("model") else None
    kernel_rows = [r for part in node_results for r in part["kernel_rows"]]
    step_rows = [r for part in node_results for r in part["step_rows"]]
    problems = [p for part in node_results for p in part["problems"]]
    d4 = build_column(kernel_rows, step_rows, name=options["run"], rank_policy=options["rank_policy"],
                      accept_length=accept_length, row_order=sig.template_order(), signature=sig.name,
                      model=model.name if model else None)
    if sol is not None:
        d4 = with_sol(d4, sol)
    return Analysis(options["run"], sig.name, model.name if model else None, kernel_rows, step_rows, problems, d4)
