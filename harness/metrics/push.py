"""Push a finished run's metrics to a Pushgateway (batch-job convention).

Grouping key: job + run_id, so each run is its own group and a re-push of the same run replaces
it. A Pushgateway that cannot be reached, refuses, or does not answer within PUSH_DEADLINE_S in all
(the push and, when asked, listing and deleting old groups) is a warning: the run's files are already
written and the run's result does not depend on monitoring. Credentials in the URL
(`http://user:password@host:9091`) are sent as Basic authorization and never printed or stored; nor
is the value of a secret-looking query parameter (`?token=`): both show as `***`
(harness/node/url_secrets.py).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, push_to_gateway, write_to_textfile
from prometheus_client.exposition import delete_from_gateway

from harness.http_deadline import Deadline, request, split_credentials
from harness.metrics.definitions import RUN_INFO
from harness.metrics.results import build_registry
from harness.metrics.run_data import RunData, read_run
from harness.node.url_secrets import without_url_credentials

log = logging.getLogger(__name__)

DEFAULT_JOB = "moe_harness"
TEXTFILE_NAME = "metrics.prom"
PUSH_DEADLINE_S = 30.0  # every Pushgateway call of one push together


@dataclass
class PushResult:
    ok: bool
    url: str  # without credentials
    message: str = ""
    deleted_groups: list[str] = field(default_factory=list)


def _gateway_url(url: str) -> str:
    return url if "://" in url else "http://" + url


def _handler(deadline: Deadline, auth: dict[str, str]):
    """prometheus_client's handler: each call one request within what is left of the deadline."""
    def handle(url, method, timeout, headers, data):
        def send() -> None:
            status, answer = request(url, deadline, method=method, body=data, headers={**dict(headers), **auth})
            if status >= 400:
                raise OSError(f"HTTP {status}: {answer[:200].decode('utf-8', 'replace').strip()}")
        return send
    return handle


def _groups_of_scenario(gateway: str, job: str, scenario: str, deadline: Deadline, auth: dict[str, str]) -> list[str]:
    """run_id of every group under `job` whose run_info says it ran `scenario`."""
    from analysis.api import InputFileError, parsed_json

    status, answer = request(f"{gateway}/api/v1/metrics", deadline, headers=auth)
    if status >= 400:
        raise OSError(f"HTTP {status} listing the groups")
    try:
        payload = parsed_json(answer, f"{gateway}/api/v1/metrics")
    except InputFileError as exc:
        raise ValueError(str(exc)) from None
    run_ids = []
    for group in (payload.get("data") if isinstance(payload, dict) else None) or []:
        key = group.get("labels") or {} if isinstance(group, dict) else {}
        if key.get("job") != job or "run_id" not in key:
            continue
        info = group.get(RUN_INFO.name) or {}
        for sample in info.get("metrics") or []:
            if (sample.get("labels") or {}).get("scenario") == scenario:
                run_ids.append(key["run_id"])
                break
    return run_ids


def push_registry(registry: CollectorRegistry, gateway: str, *, scenario: str, run_id: str,
                  job: str = DEFAULT_JOB, delete_old_groups: bool = False,
                  deadline_s: float | None = None) -> PushResult:
    """deadline_s: every call of the push together (default PUSH_DEADLINE_S)."""
    gateway, auth = split_credentials(_gateway_url(gateway).rstrip("/"))
    result = PushResult(ok=False, url=without_url_credentials(gateway))
    deadline = Deadline(PUSH_DEADLINE_S if deadline_s is None else deadline_s)
    handler = _handler(deadline, auth)
    try:
        push_to_gateway(gateway, job=job, registry=registry, grouping_key={"run_id": run_id}, handler=handler)
        if delete_old_groups:
            for old in _groups_of_scenario(gateway, job, scenario, deadline, auth):
                if old != run_id:
                    delete_from_gateway(gateway, job=job, grouping_key={"run_id": old}, handler=handler)
                    result.deleted_groups.append(old)
    except (OSError, ValueError, AttributeError, TypeError) as exc:  # DeadlineExceeded and HTTP errors are OSErrors
        result.message = without_url_credentials(f"Pushgateway {result.url} not reachable, refused the push or "
                                                 f"did not answer in time: {exc}")
        log.warning("%s; run files are kept, metrics not pushed", result.message)
        return result
    result.ok = True
    result.message = f"pushed run {run_id} to {result.url} (job={job})"
    return result


def write_textfile(run: RunData, path: Path | None = None) -> Path:
    """The same metrics as a text exposition file in the run directory (temp file + rename)."""
    path = Path(path) if path else run.run_dir / TEXTFILE_NAME
    write_to_textfile(str(path), build_registry(run))
    return path


def push_run(run_dir: str | Path, gateway: str | None, *, status: str | None = None, job: str = DEFAULT_JOB,
             delete_old_groups: bool = False, deadline_s: float | None = None,
             write_file: bool = True) -> PushResult | None:
    """What the run pipeline calls at the end: write metrics.prom, push when a gateway is configured."""
    run = read_run(run_dir, status=status)
    if write_file:
        write_textfile(run)
    if not gateway:
        return None
    return push_registry(build_registry(run), gateway, scenario=run.scenario, run_id=run.run_id, job=job,
                         delete_old_groups=delete_old_groups, deadline_s=deadline_s)
