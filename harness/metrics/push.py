"""Push a finished run's metrics to a Pushgateway (batch-job convention).

Grouping key: job + run_id, so each run is its own group and a re-push of the same run replaces
it. A Pushgateway that cannot be reached is a warning: the run's files are already written and
the run's result does not depend on monitoring.
"""
from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, push_to_gateway, write_to_textfile
from prometheus_client.exposition import delete_from_gateway

from harness.metrics.definitions import RUN_INFO
from harness.metrics.results import build_registry
from harness.metrics.run_data import RunData, read_run

log = logging.getLogger(__name__)

DEFAULT_JOB = "moe_harness"
TEXTFILE_NAME = "metrics.prom"


@dataclass
class PushResult:
    ok: bool
    url: str
    message: str = ""
    deleted_groups: list[str] = field(default_factory=list)


def _gateway_url(url: str) -> str:
    return url if "://" in url else "http://" + url


def _groups_of_scenario(gateway: str, job: str, scenario: str, timeout_s: float) -> list[str]:
    """run_id of every group under `job` whose run_info says it ran `scenario`."""
    with urllib.request.urlopen(f"{gateway}/api/v1/metrics", timeout=timeout_s) as response:
        payload = json.load(response)
    run_ids = []
    for group in payload.get("data") or []:
        key = group.get("labels") or {}
        if key.get("job") != job or "run_id" not in key:
            continue
        info = group.get(RUN_INFO.name) or {}
        for sample in info.get("metrics") or []:
            if (sample.get("labels") or {}).get("scenario") == scenario:
                run_ids.append(key["run_id"])
                break
    return run_ids


def push_registry(registry: CollectorRegistry, gateway: str, *, scenario: str, run_id: str,
                  job: str = DEFAULT_JOB, delete_old_groups: bool = False, timeout_s: float = 10.0) -> PushResult:
    gateway = _gateway_url(gateway).rstrip("/")
    result = PushResult(ok=False, url=gateway)
    try:
        push_to_gateway(gateway, job=job, registry=registry, grouping_key={"run_id": run_id}, timeout=timeout_s)
        if delete_old_groups:
            for old in _groups_of_scenario(gateway, job, scenario, timeout_s):
                if old != run_id:
                    delete_from_gateway(gateway, job=job, grouping_key={"run_id": old}, timeout=timeout_s)
                    result.deleted_groups.append(old)
    except (OSError, urllib.error.URLError, ValueError) as exc:  # HTTPError is a URLError, URLError an OSError
        result.message = f"Pushgateway {gateway} not reachable or refused the push: {exc}"
        log.warning("%s; run files are kept, metrics not pushed", result.message)
        return result
    result.ok = True
    result.message = f"pushed run {run_id} to {gateway} (job={job})"
    return result


def write_textfile(run: RunData, path: Path | None = None) -> Path:
    """The same metrics as a text exposition file in the run directory (temp file + rename)."""
    path = Path(path) if path else run.run_dir / TEXTFILE_NAME
    write_to_textfile(str(path), build_registry(run))
    return path


def push_run(run_dir: str | Path, gateway: str | None, *, status: str | None = None, job: str = DEFAULT_JOB,
             delete_old_groups: bool = False, timeout_s: float = 10.0, write_file: bool = True) -> PushResult | None:
    """What the run pipeline calls at the end: write metrics.prom, push when a gateway is configured."""
    run = read_run(run_dir, status=status)
    if write_file:
        write_textfile(run)
    if not gateway:
        return None
    return push_registry(build_registry(run), gateway, scenario=run.scenario, run_id=run.run_id, job=job,
                         delete_old_groups=delete_old_groups, timeout_s=timeout_s)
