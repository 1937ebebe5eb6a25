"""The SGLang version table (versions.yaml): one row per supported release, the default first.

Why a table: flag spellings, endpoints and capabilities differ between releases, while scenarios
stay the same; every consumer (plan, flag checks, profiling, Dockerfile test) reads its row here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

VERSIONS_PATH = Path(__file__).with_name("versions.yaml")


class VersionError(ValueError):
    """An SGLang version the table does not support, or a malformed table."""


@dataclass(frozen=True)
class CaptureTrace:
    """How a release writes CUDA-graph capture traces (only when asked, at server start)."""
    env: dict[str, str]
    subdir: str
    pattern: str
    with_stack: bool


@dataclass(frozen=True)
class SGLangVersion:
    version: str
    docker_image: str
    flags: dict[str, tuple[str, ...]]
    cli_sources: tuple[str, ...]
    choice_sources: tuple[str, ...]
    environ_source: str
    metrics_source: str
    endpoints: dict[str, str]
    profile: dict[str, Any]
    capture_trace: CaptureTrace | None
    wheel_python_version: str
    wheel_platform: str
    expert_record: dict[str, str] = field(default_factory=dict)  # dir_env, pattern of the expert-load dump


@lru_cache(maxsize=1)
def load_table(path: str | None = None) -> dict[str, Any]:
    table_path = Path(path) if path else VERSIONS_PATH
    data = yaml.safe_load(table_path.read_text())
    for key in ("default", "wheel_download", "common", "versions"):
        if key not in (data or {}):
            raise VersionError(f"{table_path}: missing key {key!r}")
    if data["default"] not in data["versions"]:
        raise VersionError(f"{table_path}: default {data['default']!r} is not one of the versions")
    return data


def supported_versions() -> list[str]:
    """The supported releases, newest (the default) first, as the table lists them."""
    return list(load_table()["versions"])


def add_version_argument(parser, what: str) -> None:
    """--sglang-version: the supported releases as choices, the default named in the help after `what`."""
    parser.add_argument("--sglang-version", default=None, choices=supported_versions(),
                        help=f"{what} (default {load_table()['default']}; harness/sglang/versions.yaml)")


def _merged(common: dict, own: dict) -> dict:
    """A release's keys over the common ones, one level deep (its flags replace single flags)."""
    out = dict(common)
    for key, value in own.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


@lru_cache(maxsize=None)
def load_version(version: str | None = None) -> SGLangVersion:
    """The table row of `version` (None: the default release); unknown versions name the supported ones."""
    table = load_table()
    name = version or table["default"]
    if name not in table["versions"]:
        raise VersionError(f"SGLang {name} is not supported; supported: {', '.join(supported_versions())} "
                           f"(harness/sglang/versions.yaml)")
    row = _merged(table["common"], table["versions"][name] or {})
    image = row.get("docker_image") or ""
    if not image.endswith(f":v{name}"):
        raise VersionError(f"{VERSIONS_PATH}: {name}: docker_image {image!r} does not end in ':v{name}'")
    capture = row.get("capture_trace")
    wheel = table["wheel_download"]
    return SGLangVersion(
        version=name, docker_image=image,
        flags={k: tuple(str(t) for t in v) for k, v in row["flags"].items()},
        cli_sources=tuple(row["cli_sources"]), choice_sources=tuple(row.get("choice_sources") or ()),
        environ_source=row["environ_source"], metrics_source=row["metrics_source"],
        endpoints=dict(row["endpoints"]), profile=dict(row["profile"]),
        capture_trace=CaptureTrace(dict(capture["env"]), capture["subdir"], capture["pattern"],
                                   bool(capture.get("with_stack"))) if capture else None,
        wheel_python_version=str(wheel["python_version"]), wheel_platform=wheel["platform"],
        expert_record=dict(row.get("expert_record") or {}))
