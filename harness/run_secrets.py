"""A run's secrets, collected once before anything is written: what harness/node/secrets.py masks by
value in the run's files and on its console.

From the scenario: the values of `engine.passthrough_env` in the driver's environment, `engine.env`
values under secret-looking names, the values of secret-looking flags and assignments in
`engine.extra_args` (and the test launcher), and the credentials of any URL anywhere in it; from the
driver's environment: the values of secret-looking variables, which every process the run starts
inherits (and may print) whether or not the scenario passes them on, and the credentials of URLs in
it; from the run's options: the credentials of the Pushgateway URL (a token in its query too).
"""
from __future__ import annotations

from collections.abc import Mapping

from harness.node.secrets import Secrets, is_secret_name, secret_argv_values, url_credentials
from harness.scenario import Scenario


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def run_secrets(scenario: Scenario, environ: Mapping[str, str], pushgateway: str | None = None) -> Secrets:
    engine = scenario.engine.model_dump(mode="json")
    values: list[str] = [v for k, v in environ.items() if is_secret_name(k)]  # inherited by every process
    if engine.get("kind") == "sglang":
        values += [environ[name] for name in engine.get("passthrough_env") or () if environ.get(name)]
        values += [v for k, v in (engine.get("env") or {}).items() if is_secret_name(k)]
        values += secret_argv_values([*(engine.get("extra_args") or ()), *(engine.get("launcher") or ())])
        pd = engine.get("disaggregation") or {}
        for part in (pd.get("prefill") or {}, pd.get("decode") or {}, pd.get("router") or {}):  # a PD pair's roles
            values += [v for k, v in (part.get("env") or {}).items() if is_secret_name(k)]
            values += secret_argv_values([*(part.get("extra_args") or ()), *(part.get("launcher") or ())])
    gateway = pushgateway if not pushgateway or "://" in pushgateway else "http://" + pushgateway  # host:port is http
    for text in [*_strings(scenario.model_dump(mode="json")), *environ.values(), gateway or ""]:
        values += url_credentials(text)
    return Secrets(values)
