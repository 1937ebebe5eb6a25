"""The SGLang version table (versions.yaml): every release from the oldest supported to the newest
known, each with what changed at it; a release's row is the common part with every change up to it.

Why a table: flag spellings, endpoints and capabilities differ between releases, while scenarios
stay the same; every consumer (plan, flag checks, profiling, Dockerfile test) reads its row here.
A release newer than the newest known is planned as the newest known (`SGLangVersion.assumed_from`):
its flags are still read from its own wheel offline and judged by the node's own SGLang at run time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import re

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
    step_labels: dict[str, str | None] = None   # verify / draft stage names in `step[<stage> bs=N]`
    generate_contract: bool = False             # /generate refuses unknown sampling_params keys
    assumed_from: str | None = None             # a release newer than the table: the row it borrows

    @property
    def assumption(self) -> str | None:
        """The warning for a release newer than the table (None for a known release)."""
        if self.assumed_from is None:
            return None
        return (f"SGLang {self.version} is newer than the newest release in harness/sglang/versions.yaml "
                f"({self.assumed_from}): planned as {self.assumed_from} (flag spellings, SGLANG_* variables, "
                f"endpoints, profiler, trace and step-label names); its flags are checked against its own "
                f"wheel by `moe-harness plan --check-flags` and by its own parser on every node before launch")


RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:(rc)(\d+)|\.post(\d+))?$")


def release_key(version: str) -> tuple[int, ...]:
    """Sortable key of an SGLang release name (X.Y.Z, X.Y.ZrcN, X.Y.Z.postN); VersionError otherwise."""
    match = RELEASE.match(str(version))
    if not match:
        raise VersionError(f"SGLang version {version!r} is not a release name (X.Y.Z or X.Y.Z.postN)")
    major, minor, patch, rc, rc_n, post = match.groups()
    return (int(major), int(minor), int(patch), -1 if rc else 0, int(rc_n or post or 0))


@lru_cache(maxsize=1)
def load_table(path: str | None = None) -> dict[str, Any]:
    table_path = Path(path) if path else VERSIONS_PATH
    data = yaml.safe_load(table_path.read_text())
    for key in ("default", "wheel_download", "common", "releases"):
        if key not in (data or {}):
            raise VersionError(f"{table_path}: missing key {key!r}")
    names = list(data["releases"])
    if names != sorted(names, key=release_key):
        raise VersionError(f"{table_path}: releases must be listed oldest first: {', '.join(names)}")
    if data["default"] not in data["releases"]:
        raise VersionError(f"{table_path}: default {data['default']!r} is not one of the releases")
    return data


def known_releases() -> list[str]:
    """Every release the table lists, oldest first."""
    return list(load_table()["releases"])


def supported_versions() -> list[str]:
    """The supported releases the table lists, newest first."""
    return known_releases()[::-1]


def supported_range() -> str:
    """The supported releases in words, for messages and --help."""
    names = known_releases()
    return f"every release from {names[0]} to {names[-1]}, and newer ones with a warning"


def checked_version(version: str) -> str:
    """`version` if the harness can plan for it (known, or newer than the newest known); else VersionError."""
    names = known_releases()
    if version in names:
        return version
    key = release_key(version)
    if key > release_key(names[-1]):
        return version
    raise VersionError(f"SGLang {version} is not supported; supported: {supported_range()} "
                       f"(harness/sglang/versions.yaml)")


def _version_type(value: str) -> str:
    import argparse
    try:
        return checked_version(value)
    except VersionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_version_argument(parser, what: str) -> None:
    """--sglang-version: a known release or a newer one; the range and the default named in the help."""
    parser.add_argument("--sglang-version", default=None, type=_version_type, metavar="VERSION",
                        help=f"{what}: {supported_range()} (harness/sglang/versions.yaml)")


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
    """The row of `version` (None: the default release): the common part with every change up to it.
    A release newer than the newest known gets the newest known's row (`assumed_from` says so)."""
    table = load_table()
    name = checked_version(str(version or table["default"]))
    names = known_releases()
    assumed_from = None if name in names else names[-1]
    row = dict(table["common"])
    for release in names:
        row = _merged(row, table["releases"][release] or {})
        if release == (assumed_from or name):
            break
    image = str(row.get("docker_image") or "").format(version=name)
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
        expert_record=dict(row.get("expert_record") or {}),
        step_labels=dict(row["step_labels"]), generate_contract=bool(row.get("generate_contract")),
        assumed_from=assumed_from)
