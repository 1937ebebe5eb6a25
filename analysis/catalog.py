"""What the harness may ask of analysis's data before any trace is read: the built-in names of a
kind (signatures, models, hardware peaks, step statistics, Nsight Compute metrics), and whether a reference (a built-in name or a file) loads
as its kind. One verb each, so a scenario check or an option's check is not a loader per kind."""
from __future__ import annotations

KINDS = ("signature", "model", "hardware", "sol_shapes", "expert_load", "load_records")


def list_builtins(kind: str) -> dict[str, str]:
    """The built-in names of a kind (signature, model, hardware, statistic, or ncu_metric: the
    Nsight Compute metrics the report's roofline counts FLOPs from), each with a line about it (a
    signature's evidence; a step statistic's column meaning, empty for one without a column; a
    metric's FLOPs per count; empty for the others): in name order, statistics and metrics in their
    file's order."""
    if kind == "signature":
        from analysis.attribution.signature import builtin_signatures, load_signature

        return {name: load_signature(name).evidence or "evidence not stated" for name in builtin_signatures()}
    if kind == "model":
        from analysis.ingest.model_spec import builtin_models

        return dict.fromkeys(builtin_models(), "")
    if kind == "hardware":
        from analysis.sol.hardware import list_hardware

        return dict.fromkeys(list_hardware(), "")
    if kind == "ncu_metric":
        from analysis.report.ncu import load_metric_config

        return {name: f"flops x {weight:g}" for name, weight in load_metric_config().flop_metrics.items()}
    if kind == "statistic":
        from analysis.tables.d4_cells import step_statistics

        return {name: s.column or "" for name, s in step_statistics().items()}
    raise ValueError(f"no built-ins of kind {kind!r}: signature, model, hardware, statistic or ncu_metric")


def check_input(kind: str, ref: str) -> None:
    """The reference loads as its kind, else an AnalysisError saying why: a signature, a model or a
    hardware peaks file (a built-in name or a YAML path), a model with SOL shapes (`sol_shapes`), an
    expert_load.json (`expert_load`) or a load's requests.jsonl (`load_records`)."""
    if kind == "signature":
        from analysis.attribution.signature import load_signature as load
    elif kind == "model":
        from analysis.ingest.model_spec import load_model_spec as load
    elif kind == "hardware":
        from analysis.sol.hardware import load_hardware as load
    elif kind == "sol_shapes":
        from analysis.sol.model_shapes import load_model_shapes as load
    elif kind == "expert_load":
        from analysis.ingest.expert_load import load_expert_load as load
    elif kind == "load_records":
        from analysis.ingest.load_records import load_request_chunks as load
    else:
        raise ValueError(f"unknown input kind {kind!r}: one of {', '.join(KINDS)}")
    load(ref)

