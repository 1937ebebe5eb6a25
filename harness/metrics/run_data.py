"""Read what the metrics need from a run directory, offline.

Reads only files earlier stages wrote (see docs/exports.md for their columns):
manifest.json, analysis/{d4.csv, kernels_long.csv, steps.csv, analysis.json},
load/requests.jsonl and load/summary.json. Missing optional files give missing metrics, never
invented values; malformed files raise RunDataError naming the file and line.
"""
from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from harness.metrics.errors import RunDataError
from harness.metrics.load_records import LoadStats, load_stats, read_records
from harness.metrics.definitions import LATENCY_QUANTILES

ANALYSIS_DIR = "analysis"
LOAD_RECORDS = "load/requests.jsonl"
LOAD_SUMMARY = "load/summary.json"
MANIFEST = "manifest.json"
SCENARIO = "scenario.yaml"  # the resolved scenario the run wrote


@dataclass
class StageTimes:
    step_s: float
    layers_s: float
    rank_step_s: dict[str, float]  # per-rank mean step time
    mean_batch_size: float | None


@dataclass
class RunData:
    run_dir: Path
    scenario: str
    run_id: str
    status: str
    info: dict[str, str]
    started_at_s: float | None
    finished_at_s: float | None
    gpus: int | None
    module_busy_s: dict[tuple[str, str], float]  # (group, module) -> per-layer seconds (D4)
    kernel_busy_s: dict[tuple[str, str, str], float]  # (group, module, kernel) -> seconds (D4)
    module_exposed_s: dict[tuple[str, str], float]
    stages: dict[str, StageTimes]
    accept_length: float | None
    load: LoadStats | None
    problems: list[str] = field(default_factory=list)

    @property
    def decode_stage(self) -> str | None:
        for name in ("decode", "target_verify"):
            if name in self.stages:
                return name
        return next(iter(self.stages), None)


def _read_csv(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise RunDataError(path, f"missing column(s) {', '.join(missing)}; has {reader.fieldnames}")
        return list(reader)


def _float(row: dict[str, str], key: str, path: Path, line: int) -> float:
    try:
        return float(row[key])
    except (TypeError, ValueError):
        raise RunDataError(f"{path}:{line}", f"column {key!r} must be a number, got {row[key]!r}") from None


def _time_s(value) -> float | None:
    """Manifest times may be Unix seconds or ISO 8601 strings."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def read_d4(path: Path) -> tuple[dict, dict]:
    """(group, module) and (group, module, kernel) per-layer seconds from d4.csv's value_us."""
    modules: dict[tuple[str, str], float] = defaultdict(float)
    kernels: dict[tuple[str, str, str], float] = defaultdict(float)
    for line, row in enumerate(_read_csv(path, ("group", "module", "kernel", "value_us")), 2):
        value_s = _float(row, "value_us", path, line) * 1e-6
        modules[(row["group"], row["module"])] += value_s
        kernels[(row["group"], row["module"], row["kernel"])] += value_s
    return dict(modules), dict(kernels)


def module_exposed_from_long(path: Path, stage: str | None, rank_policy: str = "mean") -> dict[tuple[str, str], float]:
    """Per-layer exposed seconds per module, aggregated like the D4 busy figure.

    Per rank: sum of exposed_us over layer-section kernels of the stage, divided by the number of
    (step, layer) pairs that rank has; ranks then combined by the rank policy (mean or max).
    """
    rows = _read_csv(path, ("rank", "step", "stage", "section", "layer", "group", "module", "exposed_us"))
    per_rank: dict[str, dict[tuple[str, str], float]] = defaultdict(lambda: defaultdict(float))
    layer_slots: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for line, row in enumerate(rows, 2):
        if row["section"] != "layer" or (stage is not None and row["stage"] != stage):
            continue
        per_rank[row["rank"]][(row["group"], row["module"])] += _float(row, "exposed_us", path, line)
        layer_slots[row["rank"]].add((row["step"], row["layer"]))
    combined: dict[tuple[str, str], list[float]] = defaultdict(list)
    for rank, sums in per_rank.items():
        for key, total_us in sums.items():
            combined[key].append(total_us / len(layer_slots[rank]) * 1e-6)
    n_ranks = len(per_rank)
    pick = max if rank_policy == "max" else (lambda values: math.fsum(values) / n_ranks)
    return {key: pick(values) for key, values in combined.items()}


def read_steps(path: Path) -> dict[str, StageTimes]:
    rows = _read_csv(path, ("rank", "step", "stage", "step_us", "layers_us", "status"))
    by_stage: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for line, row in enumerate(rows, 2):
        if row["status"] == "ok":
            by_stage[row["stage"]].append((line, row))
    stages = {}
    for stage, items in by_stage.items():
        step_us = [_float(r, "step_us", path, line) for line, r in items]
        layers_us = [_float(r, "layers_us", path, line) for line, r in items]
        per_rank: dict[str, list[float]] = defaultdict(list)
        for (line, r), value in zip(items, step_us):
            per_rank[r["rank"]].append(value)
        batches = [float(r["batch_size"]) for _, r in items if r.get("batch_size") not in (None, "")]
        stages[stage] = StageTimes(
            step_s=math.fsum(step_us) / len(step_us) * 1e-6,
            layers_s=math.fsum(layers_us) / len(layers_us) * 1e-6,
            rank_step_s={rank: math.fsum(v) / len(v) * 1e-6 for rank, v in per_rank.items()},
            mean_batch_size=(math.fsum(batches) / len(batches)) if batches else None,
        )
    return stages


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RunDataError(path, f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise RunDataError(path, "must hold a JSON object")
    return data


def _read_yaml(path: Path) -> dict:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RunDataError(path, f"not valid YAML ({exc})") from None
    return data if isinstance(data, dict) else {}


def _find(run_dir: Path, name: str) -> Path | None:
    for candidate in (run_dir / ANALYSIS_DIR / name, run_dir / name):
        if candidate.is_file():
            return candidate
    return None


def read_run(run_dir: str | Path, status: str | None = None) -> RunData:
    """Everything the run metrics need. `status` overrides the manifest (not yet written mid-run)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDataError(run_dir, "run directory not found")
    manifest = _read_json(run_dir / MANIFEST) if (run_dir / MANIFEST).is_file() else {}
    analysis_json_path = _find(run_dir, "analysis.json")
    analysis_json = _read_json(analysis_json_path) if analysis_json_path else {}
    summary = _read_json(run_dir / LOAD_SUMMARY) if (run_dir / LOAD_SUMMARY).is_file() else {}
    problems: list[str] = []

    resolved = _read_yaml(run_dir / SCENARIO) if (run_dir / SCENARIO).is_file() else {}
    run_id = str(manifest.get("run_id") or run_dir.name)
    scenario = str(manifest.get("scenario") or resolved.get("name") or run_id.rsplit("-", 1)[0])
    versions = manifest.get("versions") if isinstance(manifest.get("versions"), dict) else {}
    gpus = manifest.get("gpus")
    if gpus is None and isinstance(resolved.get("cluster"), dict):
        cluster = resolved["cluster"]
        gpus = int(cluster.get("nodes", 1)) * int(cluster.get("gpus_per_node", 0))
    model = manifest.get("model") or (resolved.get("model") or {}).get("name", "")
    signature = manifest.get("signature") or (resolved.get("analysis") or {}).get("signature") \
        or analysis_json.get("signature", "")
    info = {
        "engine": str(manifest.get("engine", "")),
        "model": str(model),
        "signature": str(signature),
        "harness_version": str(versions.get("moe-harness", versions.get("harness", ""))),
        "gpus": "" if gpus is None else str(gpus),
    }

    d4_path = _find(run_dir, "d4.csv")
    module_busy, kernel_busy = read_d4(d4_path) if d4_path else ({}, {})
    if not d4_path:
        problems.append("no d4.csv: layer metrics not exported")
    steps_path = _find(run_dir, "steps.csv")
    stages = read_steps(steps_path) if steps_path else {}
    long_path = _find(run_dir, "kernels_long.csv")
    data = RunData(
        run_dir=run_dir, scenario=scenario, run_id=run_id,
        status=str(status or manifest.get("status") or "running"), info=info,
        started_at_s=_time_s(manifest.get("started_at")), finished_at_s=_time_s(manifest.get("finished_at")),
        gpus=int(gpus) if isinstance(gpus, int) else None,
        module_busy_s=module_busy, kernel_busy_s=kernel_busy, module_exposed_s={}, stages=stages,
        accept_length=None, load=None, problems=problems,
    )
    if long_path:
        rank_policy = str(analysis_json.get("rank_policy", "mean"))
        data.module_exposed_s = module_exposed_from_long(long_path, data.decode_stage, rank_policy)
    accept = summary.get("accept_length", analysis_json.get("accept_length"))
    data.accept_length = float(accept) if isinstance(accept, (int, float)) else None
    records_path = run_dir / LOAD_RECORDS
    if records_path.is_file():
        data.load = load_stats(read_records(records_path), LATENCY_QUANTILES)
    return data
