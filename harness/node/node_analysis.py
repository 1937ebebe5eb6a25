"""What each node's ranks go through (analyze_node, calibrate_node: plain functions that the node
actors and `moe-harness analyze RUN_DIR` both call, in analyse_nodes' order), and one D4 column from
what the nodes computed.

Why the column is exact: analysis.api attributes every rank on its own, and the D4 column is built from the
rows of all ranks together; each node digests its own ranks' rows for the tables (what `analyze`
does per rank: analysis/pipeline/rank_digest.py), so merging the nodes' digests in node order and
building the column here gives what analysing every trace file on one machine gives, without moving
the traces, and without the head walking every rank's rows again (a node's rows cross to it as
their encoded kernel table, made into rows only where read). SOL columns are added here too
(analysis.tables.d4_sol), from the settings the driver reads off the scenario.
"""
from __future__ import annotations

from pathlib import Path

import msgspec

from analysis.api import AnalysisOptions, attribute, combine_nodes


def analysis_options(scenario, run_name: str, jobs: int | None = None) -> dict:
    """What every node's ranks are analysed with (plain data: it crosses Ray); analyse_nodes adds each
    node's own capture traces."""
    a = scenario.analysis
    return {"run": run_name, "signature": a.signature, "model": a.model, "rank_policy": a.rank_policy,
            "tbo": bool(getattr(scenario.engine, "two_batch_overlap", False)), "jobs": jobs, "capture_traces": [],
            "stage": "extend" if "EXTEND" in getattr(scenario.profile, "stages", ()) else None}


def own_capture_files(kept: list[str], node: int, folder: str | Path) -> list[str]:
    """The node's own CUDA-graph capture traces in `folder`, by the names the run kept of that node
    (the manifest's capture_traces: capture_traces/node<N>/NAME): on a host that runs several nodes
    their servers share one folder, and a node calibrates against its own ranks only."""
    prefix = f"capture_traces/node{node}/"
    return sorted(str(Path(folder) / p[len(prefix):]) for p in kept if p.startswith(prefix))


def analyse_nodes(node_traces: dict[int, list[str]], options: dict, node_captures: dict[int, list[str]] | None,
                  calibrate_all, analyze_all) -> tuple[list[dict], list[dict] | None]:
    """Each node's ranks: calibrated against its capture traces where given (the signature then chosen
    for all), then analysed; returns (analyze_node's parts, calibrate_node's results or None), in node order.

    calibrate_all / analyze_all take {node: (paths, options)} and return one result per node in that
    order: the engine runs them on every node's actor at once, `moe-harness analyze RUN_DIR` here.
    Changes options["signature"] to the one chosen."""
    nodes = sorted(node_traces)
    per_node = {n: options | {"node": n, "capture_traces": list(node_captures[n]) if node_captures is not None else []}
                for n in nodes}
    calibrations = None
    if node_captures is not None:
        calibrations = calibrate_all({n: (node_traces[n], per_node[n]) for n in nodes})
        options["signature"] = signature_after_calibration(options["signature"], calibrations)
        for node_options in per_node.values():
            node_options["signature"] = options["signature"]
    return analyze_all({n: (node_traces[n], per_node[n]) for n in nodes}), calibrations


def analyze_node(paths: list[str], options: dict) -> dict:
    """One node's ranks attributed and digested (analysis.api.attribute): what `combine` joins.

    Called by each node's actor on its own traces and by `moe-harness analyze RUN_DIR` on the run
    directory's copies, so both get the same rows; the problems name each trace as the run directory
    keeps it (traces/NAME), not by the node-local path. options["capture_traces"]: CUDA-graph capture
    traces (files, or folders) naming replayed kernels; a folder without files is left out (a release
    may write none). No table is built here: `combine` builds one over every node's ranks (from
    their digests, key "digest"), with the run's rank policy. Raises AnalysisError when no rank of the
    node could be analysed."""
    captures = captures_with_files(options.get("capture_traces") or [])
    rows = attribute(paths, signature=options.get("signature", "generic"), model=options.get("model"),
                     options=AnalysisOptions(run=options.get("run", "run"), tbo=bool(options.get("tbo", False)),
                                             stage=options.get("stage"),
                                             jobs=options.get("jobs"), capture_traces=captures), digests=True)
    kept = _as_kept(paths, captures, options.get("node"))
    problems = [msgspec.structs.replace(p, path=kept(p.path), message=kept(p.message)) for p in rows.problems]
    return {"kernel_rows": rows.kernel_rows, "step_rows": rows.step_rows, "problems": problems,
            "failed_files": [kept(f) for f in rows.failed_files],
            "chains": [[rank, step, chain] for (rank, step), chain in rows.chains.items()], "digest": rows.digest}


def calibrate_node(node_rank: int, paths: list[str], options: dict) -> dict:
    """The run's signature checked against the node's first decode trace named by its capture traces
    (analysis.api.calibrate), or why it could not be; `signature_after_calibration` picks from these.
    Shared by the actor and `moe-harness analyze RUN_DIR`, like analyze_node (traces named alike)."""
    from analysis.api import AnalysisError, calibrate

    asked = options.get("capture_traces") or []
    captures = captures_with_files(asked)
    decode_path = sorted(paths)[0]
    where = {"node": node_rank, "decode_trace": Path(decode_path).name}
    if not captures:
        return {**where, "error": f"no capture trace in {', '.join(asked)}"}
    kept = _as_kept(paths, captures, node_rank)
    try:
        cal = calibrate(options.get("signature", "generic"), decode_trace=decode_path, capture_refs=captures)
    except AnalysisError as exc:
        return {**where, "error": kept(str(exc))}
    return {**where, "result": _kept_strings(cal.to_dict(), kept), "markdown": kept(cal.markdown())}


def captures_with_files(refs: list[str]) -> list[str]:
    """The capture traces given that exist: files, and folders holding files (a release may write none)."""
    return [r for r in refs if Path(r).is_file() or (Path(r).is_dir() and any(Path(r).iterdir()))]


def _as_kept(paths: list[str], captures: list[str], node: int | None):
    """A text with the folders of `paths` and `captures` written as the run directory keeps them
    (traces/, capture_traces/node<N>/), so the node and a re-analysis of its copies say the same."""
    folders = {str(Path(p).parent): "traces" for p in paths}
    if node is not None:
        folders |= {str(Path(c).parent if Path(c).is_file() else Path(c)): f"capture_traces/node{node}" for c in captures}

    def kept(text: str) -> str:
        for folder in sorted(folders, key=len, reverse=True):  # a capture folder may lie inside the traces'
            text = text.replace(folder + "/", folders[folder] + "/")
        return text
    return kept


def _kept_strings(value, kept):
    """Every string in a JSON-like value through kept()."""
    if isinstance(value, str):
        return kept(value)
    if isinstance(value, list):
        return [_kept_strings(v, kept) for v in value]
    if isinstance(value, dict):
        return {k: _kept_strings(v, kept) for k, v in value.items()}
    return value


def signature_after_calibration(shipped: str, calibrations: list[dict]) -> str:
    """The signature every node analyses with: the shipped one unless a node's calibration chose
    another (it disagreed there; one signature for the whole column keeps the rows comparable)."""
    chosen = {e["result"]["chosen"] for e in calibrations if "result" in e} - {shipped}
    return sorted(chosen)[0] if chosen else shipped


def calibration_report(calibrations: list[dict], used: str) -> tuple[str, list[dict], str]:
    """(calibration.md, calibration.json entries, one line for the table) from the nodes' calibrations.

    A node whose captures could not be used says why, both in the report and in the line under the table."""
    md = ["# Calibration against the CUDA-graph capture traces", "", f"The table was analysed with **{used}**.", ""]
    lines = []
    for e in calibrations:
        md += [f"## Node {e['node']} ({e['decode_trace']})", ""]
        if "error" in e:
            md += [f"Not calibrated: {e['error']}.", ""]
            lines.append(f"node {e['node']} not calibrated: {e['error']}")
        else:
            md += [e["markdown"].split("\n", 2)[2] if e["markdown"].startswith("# ") else e["markdown"], ""]
            lines.append(f"node {e['node']}: {e['result']['reason']}")
    entries = [{k: v for k, v in e.items() if k != "markdown"} | {"used": used} for e in calibrations]
    return "\n".join(md), entries, "; ".join(lines) + f"; the table uses {used}"


def combine(node_results: list[dict], options: dict, accept_length: float | None = None, sol=None,
            expert_load: str | None = None, load_records: str | None = None, window_start_s: float | None = None):
    """Every node's rows into one analysis (analysis.api.Analysis), through the same tail as `analyze`
    (analysis.api.combine_nodes): the D4 column, with `sol` (SolSettings) its SOL columns, the
    collectives split into wait and transfer over every node's ranks with the expert load (the run's
    expert_load.json), and with `load_records` (the run's load/requests.jsonl) the profiled steps
    against the load."""
    run_options = AnalysisOptions(run=options["run"], rank_policy=options["rank_policy"], accept_length=accept_length,
                                  stage=options.get("stage"),
                                  sol=sol, window_start_s=window_start_s, load_records=load_records,
                                  expert_load=expert_load)
    return combine_nodes(node_results, run_options, options["signature"], options.get("model"))
