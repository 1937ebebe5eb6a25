"""Read what the metrics need from a run directory, offline.

Reads only files earlier stages wrote (see docs/exports.md for their columns):
manifest.json, scenario.yaml, analysis/{d4_detail.csv, analysis.json, steps.csv},
load/requests.jsonl and load/summary.json. Missing optional files give missing metrics, never
invented values; malformed files raise RunDataError naming the file and line.
"""
from __future__ import annotations

import csv
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
    """Step figures of the D4 column (its step statistic and rank policy applied)."""

    step_s: float
    layers_s: float
    rank_step_s: dict[str, float]  # per-rank step time
    rank_spread_ratio: float  # (slowest - fastest) / median rank
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
    stages: dict[str, StageTimes]  # the D4 column's stage only
    accept_length: float | None
    load: LoadStats | None
    problems: list[str] = field(default_factory=list)

    @property
    def decode_stage(self) -> str | None:
        return next(iter(self.stages), None)


def _read_csv(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    """Every row of a table the run wrote, bounded (TABLE_LIMIT_BYTES); a row with more or fewer
    fields than the header (a cut file) is an error naming its line."""
    from analysis.api import InputFileError, TABLE_LIMIT_BYTES, open_input_text

    try:
        with open_input_text(path, TABLE_LIMIT_BYTES, "a table") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise RunDataError(path, f"missing column(s) {', '.join(missing)}; has {reader.fieldnames}")
            rows = []
            for line, row in enumerate(reader, 2):
                if None in row or None in row.values():
                    raise RunDataError(f"{path}:{line}", f"not the {len(reader.fieldnames)} fields of the header "
                                                         "(a cut or edited file)")
                rows.append(row)
            return rows
    except InputFileError as exc:
        raise RunDataError(exc.path, exc.problem) from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise RunDataError(path, f"unreadable: {exc}") from None


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


def read_d4_detail(path: Path) -> tuple[dict, dict, dict]:
    """Module busy, module exposed and kernel busy per-layer seconds from d4_detail.csv.

    A module's figure is the sum of its kernels' rows, as the D4 table sums them.
    """
    busy: dict[tuple[str, str], float] = defaultdict(float)
    exposed: dict[tuple[str, str], float] = defaultdict(float)
    kernels: dict[tuple[str, str, str], float] = defaultdict(float)
    for line, row in enumerate(_read_csv(path, ("group", "module", "kernel", "value_us", "exposed_us")), 2):
        value_s = _float(row, "value_us", path, line) * 1e-6
        busy[(row["group"], row["module"])] += value_s
        exposed[(row["group"], row["module"])] += _float(row, "exposed_us", path, line) * 1e-6
        kernels[(row["group"], row["module"], row["kernel"])] += value_s
    return dict(busy), dict(exposed), dict(kernels)


def _mean_batch_size(path: Path, stage: str) -> float | None:
    rows = _read_csv(path, ("stage", "status", "batch_size"))
    sizes = [float(r["batch_size"]) for r in rows
             if r["stage"] == stage and r["status"] == "ok" and r["batch_size"] not in ("", None)]
    return math.fsum(sizes) / len(sizes) if sizes else None


def stage_times(d4: dict, where: Path, steps_path: Path | None) -> dict[str, StageTimes]:
    """The D4 column's step, all-layers and per-rank step times (analysis.json "d4")."""
    try:
        stage = str(d4["stage"])
        rank_ms = {str(k): float(v) for k, v in (d4.get("rank_step_ms") or {}).items()}
        times = StageTimes(
            step_s=float(d4["step_ms"]) * 1e-3, layers_s=float(d4["layers_ms"]) * 1e-3,
            rank_step_s={k: v * 1e-3 for k, v in rank_ms.items()},
            rank_spread_ratio=float(d4.get("rank_spread_pct") or 0.0) / 100,
            mean_batch_size=_mean_batch_size(steps_path, stage) if steps_path else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RunDataError(where, f"'d4' lacks a usable step figure ({exc!r})") from None
    return {stage: times}


def _read_json(path: Path, manifest: bool = False) -> dict:
    """A JSON object the run wrote: a document (DOCUMENT_LIMIT_BYTES), or its manifest, which lists
    files and is never big (CONFIG_LIMIT_BYTES, as every reader of a manifest bounds it)."""
    from analysis.api import CONFIG_LIMIT_BYTES, DOCUMENT_LIMIT_BYTES, InputFileError, read_json

    try:
        data = read_json(path, CONFIG_LIMIT_BYTES if manifest else DOCUMENT_LIMIT_BYTES,
                         "a run manifest" if manifest else "a JSON file")
    except InputFileError as exc:
        raise RunDataError(exc.path, exc.problem) from None
    if not isinstance(data, dict):
        raise RunDataError(path, "must hold a JSON object")
    return data


def _read_yaml(path: Path) -> dict:
    import yaml

    from analysis.api import CONFIG_LIMIT_BYTES, InputFileError, load_yaml, read_input_text

    try:
        data = load_yaml(read_input_text(path, CONFIG_LIMIT_BYTES, "a scenario"))
    except InputFileError as exc:
        raise RunDataError(exc.path, exc.problem) from None
    except yaml.YAMLError as exc:
        raise RunDataError(path, f"not valid YAML ({exc})") from None
    return data if isinstance(data, dict) else {}


def _find(run_dir: Path, name: str) -> Path | None:
    for candidate in (run_dir / ANALYSIS_DIR / name, run_dir / name):
        if candidate.is_file():
            return candidate
    return None


def _as_written(path: Path | None) -> Path | None:
    """The path, once its content is shown to be what the run (or analyze --out) recorded."""
    from harness.recorded_files import RecordError, check_as_written

    if path is not None:
        try:
            check_as_written(path)
        except RecordError as exc:
            raise RunDataError(path, str(exc).removeprefix(f"{path}: ")) from None
    return path


def read_run(run_dir: str | Path, status: str | None = None) -> RunData:
    """Everything the run metrics need. `status` overrides the manifest (not yet written mid-run).
    Each file read is first checked against the run's manifest (or its analysis folder's marker)
    where there is one: a cut or edited table is an error, never metrics from part of it."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDataError(run_dir, "run directory not found")
    if not (run_dir / MANIFEST).is_file() and not (run_dir / SCENARIO).is_file():
        raise RunDataError(run_dir, f"not a run directory (neither {MANIFEST} nor {SCENARIO}, which a run writes "
                                    "first); give runs/<scenario>-<timestamp>")
    manifest = _read_json(run_dir / MANIFEST, manifest=True) if (run_dir / MANIFEST).is_file() else {}
    if status is None and not manifest:  # no manifest: a live run's, or one that died before writing it
        from harness.run_owner import live_owner

        status = "running" if live_owner(run_dir) else "incomplete"
    analysis_json_path = _as_written(_find(run_dir, "analysis.json"))
    analysis_json = _read_json(analysis_json_path) if analysis_json_path else {}
    summary = _read_json(_as_written(run_dir / LOAD_SUMMARY)) if (run_dir / LOAD_SUMMARY).is_file() else {}
    problems: list[str] = []

    resolved = _read_yaml(run_dir / SCENARIO) if (run_dir / SCENARIO).is_file() else {}
    run_id = str(manifest.get("run_id") or run_dir.name)
    scenario = str(manifest.get("scenario") or resolved.get("name") or run_id.rsplit("-", 1)[0])
    versions = manifest.get("versions") if isinstance(manifest.get("versions"), dict) else {}
    gpus = manifest.get("gpus")
    if gpus is None and isinstance(resolved.get("cluster"), dict):
        cluster = resolved["cluster"]
        nodes, per_node = cluster.get("nodes", 1), cluster.get("gpus_per_node", 0)
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (nodes, per_node)):
            raise RunDataError(run_dir / SCENARIO, f"cluster.nodes {nodes!r} and cluster.gpus_per_node {per_node!r} "
                                                   "must be whole numbers")
        gpus = nodes * per_node
    model = manifest.get("model") or (resolved.get("model") or {}).get("name", "")
    signature = manifest.get("signature") or (resolved.get("analysis") or {}).get("signature") \
        or analysis_json.get("signature", "")
    info = {
        "engine": str(manifest.get("engine", "")),
        "model": str(model),
        "signature": str(signature),
        "harness_version": str(versions.get("moe-harness", versions.get("harness", ""))),
        "engine_version": str(manifest.get("sglang_version") or versions.get("torch (engine)") or ""),
        "gpus": "" if gpus is None else str(gpus),
    }

    detail_path = _as_written(_find(run_dir, "d4_detail.csv"))
    module_busy, module_exposed, kernel_busy = read_d4_detail(detail_path) if detail_path else ({}, {}, {})
    if not detail_path:
        problems.append("no d4_detail.csv: layer metrics not exported")
    d4 = analysis_json.get("d4") if isinstance(analysis_json.get("d4"), dict) else None
    stages = stage_times(d4, analysis_json_path, _as_written(_find(run_dir, "steps.csv"))) if d4 else {}
    if not d4:
        problems.append("no analysis.json with a D4 column: step metrics not exported")
    data = RunData(
        run_dir=run_dir, scenario=scenario, run_id=run_id,
        status=str(status or manifest.get("status") or "incomplete"), info=info,
        started_at_s=_time_s(manifest.get("started_at")), finished_at_s=_time_s(manifest.get("finished_at")),
        gpus=int(gpus) if isinstance(gpus, int) else None,
        module_busy_s=module_busy, kernel_busy_s=kernel_busy, module_exposed_s=module_exposed, stages=stages,
        accept_length=None, load=None, problems=problems,
    )
    accept = summary.get("accept_length", (d4 or {}).get("accept_length"))
    data.accept_length = float(accept) if isinstance(accept, (int, float)) else None
    records_path = run_dir / LOAD_RECORDS
    if records_path.is_file():
        data.load = load_stats(read_records(_as_written(records_path)), LATENCY_QUANTILES)
    return data
