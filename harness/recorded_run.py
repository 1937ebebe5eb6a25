"""A run directory read back as the inputs of its analysis: the resolved scenario, the manifest, and
each node's kept traces in the order the node analysed them.

Why: `analyze`, `report`, `compare` and `export` take a run directory, and must analyse it as the
run did (harness/reanalysis.py) or say in one line what is missing and where. A file in traces/
that is not one of the run's traces is left out with a note, never taken for a rank.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness.run_dir import MANIFEST

if TYPE_CHECKING:  # the schema (pydantic) loads only when a run directory is read: `analyze` asks is_run_dir
    from harness.scenario import Scenario

SCENARIO = "scenario.yaml"  # the resolved scenario, written first by harness/run.py
TRACES = "traces"
ANALYSIS = "analysis"
TRACE_SUFFIXES = (".json", ".json.gz")


class RunDirError(Exception):
    """A run directory that cannot be analysed as its run did; the message names the path and why."""


@dataclass
class RecordedRun:
    path: Path
    manifest: dict
    scenario: Scenario
    run_name: str  # the name the run analysed under (its directory's name when it ran)
    node_traces: dict[int, list[str]]  # node rank -> its kept traces, in the node's order
    notes: list[str] = field(default_factory=list)  # files of traces/ left out, and why

    @property
    def traces(self) -> list[str]:
        return [p for _, paths in sorted(self.node_traces.items()) for p in paths]


def is_run_dir(path: str | Path) -> bool:
    """A folder harness/run.py wrote: it holds manifest.json or scenario.yaml (the first file a run writes)."""
    p = Path(path)
    return p.is_dir() and ((p / MANIFEST).is_file() or (p / SCENARIO).is_file())


def read_run_dir(path: str | Path) -> RecordedRun:
    """The run's recorded inputs; RunDirError when the folder is not a finished run or kept no traces."""
    run_dir = Path(path)
    manifest = _manifest(run_dir)
    roles = manifest.get("pd_roles")
    if isinstance(roles, dict) and roles:  # harness/engines/sglang_pd.py: each role is a run directory
        raise RunDirError(f"{run_dir}: a prefill/decode run; each role is a run directory of its own: "
                          + ", ".join(str(run_dir / str(folder)) for folder in roles.values()))
    from harness.manifest_check import first_mismatch

    if (run_dir / SCENARIO).is_file() and (problem := first_mismatch(run_dir, manifest, [run_dir / SCENARIO])):
        raise RunDirError(problem)  # (a missing one is _scenario's error, as it always was)
    scenario = _scenario(run_dir)
    name = manifest.get("run_name") or Path(str(manifest.get("run_dir") or run_dir)).name  # a PD role's has run_name
    node_traces, notes = _kept_traces(run_dir, manifest, scenario)
    return RecordedRun(run_dir, manifest, scenario, name, node_traces, notes)


def _manifest(run_dir: Path) -> dict:
    path = run_dir / MANIFEST
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: no such run directory")
    if not path.is_file():
        what = "its run is still going or stopped before the end" if (run_dir / SCENARIO).is_file() else \
            "not a run directory"
        raise RunDirError(f"{run_dir}: no {MANIFEST} ({what}; harness/run.py writes it last)")
    from analysis.api import CONFIG_LIMIT_BYTES, InputFileError, read_json

    try:  # bounded like every manifest reader: it lists the run's files and is never big
        manifest = read_json(path, CONFIG_LIMIT_BYTES, "a run manifest")
    except InputFileError as exc:
        raise RunDirError(str(exc)) from None
    if not isinstance(manifest, dict):
        raise RunDirError(f"{path}: must hold a JSON object")
    return manifest


def _scenario(run_dir: Path) -> Scenario:
    """scenario.yaml as the run resolved it. A relative model or signature path is read from the current
    folder when it is there, else from this checkout's root: a Ray job runs in a copy of the repository."""
    import yaml

    from analysis.api import CONFIG_LIMIT_BYTES, InputFileError, load_yaml, read_input_text
    from harness.scenario import ScenarioError, parse_scenario

    path = run_dir / SCENARIO
    if not path.is_file():
        raise RunDirError(f"{run_dir}: no {SCENARIO} (the scenario the run resolved; harness/run.py writes it first)")
    try:
        text = read_input_text(path, CONFIG_LIMIT_BYTES, "a scenario")
        data = load_yaml(text)
        analysis = data.get("analysis") if isinstance(data, dict) else None
        if isinstance(analysis, dict) and any(_from_checkout(analysis.get(k)) for k in ("model", "signature")):
            for key in ("model", "signature"):
                analysis[key] = _from_checkout(analysis.get(key)) or analysis.get(key)
            text = yaml.safe_dump(data, sort_keys=False)
        return parse_scenario(text, str(path))
    except InputFileError as exc:
        raise RunDirError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise RunDirError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    except ScenarioError as exc:
        raise RunDirError(f"{path}: {'; '.join(exc.problems)}") from None


def _from_checkout(value) -> str | None:
    """A relative YAML path that is not under the current folder but is in this checkout, made absolute."""
    from harness.scenario import REPO_ROOT

    if not isinstance(value, str) or not value.endswith((".yaml", ".yml")) or Path(value).is_absolute():
        return None
    if Path(value).exists() or not (REPO_ROOT / value).is_file():
        return None
    return str(REPO_ROOT / value)


def _kept_traces(run_dir: Path, manifest: dict, scenario: Scenario) -> tuple[dict[int, list[str]], list[str]]:
    """Node rank -> kept trace paths (the manifest's node_traces, else its traces as one node, else every
    trace file in traces/); the notes say which files of traces/ were left out."""
    folder = run_dir / TRACES
    present = sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
    kept_none = (not scenario.outputs.keep_traces) or bool(manifest.get("traces_removed"))
    if kept_none and not present:
        raise RunDirError(f"{run_dir}: the run kept no traces (outputs.keep_traces: false in {SCENARIO}), so it "
                          f"cannot be analysed again; its tables are in {run_dir / ANALYSIS} (report, compare, "
                          "metrics and export read them)")
    by_node = manifest.get("node_traces")
    if isinstance(by_node, dict) and by_node:
        groups = {int(node): [str(n) for n in names] for node, names in by_node.items()}
    elif isinstance(manifest.get("traces"), list):
        groups = {0: [str(n) for n in manifest["traces"]]}
    else:
        groups = {0: [n for n in present if n.endswith(TRACE_SUFFIXES)]}
    expected = {n for names in groups.values() for n in names}
    if not expected:
        error = manifest.get("error")
        raise RunDirError(f"{folder}: no trace files (run status {manifest.get('status', 'unknown')}"
                          + (f", stopped during {error.get('phase')}" if isinstance(error, dict) else "") + ")")
    missing = sorted(expected - set(present))
    if missing:
        raise RunDirError(f"{folder}: {len(missing)} of the run's {len(expected)} traces are missing "
                          f"(named in {MANIFEST}): {', '.join(missing)}")
    notes = [f"{folder / n}: left out, " + ("not one of the run's traces (" + MANIFEST + " names them)"
                                           if n.endswith(TRACE_SUFFIXES) else "not a trace file (.json or .json.gz)")
             for n in present if n not in expected]
    return {node: [str(folder / n) for n in names] for node, names in sorted(groups.items())}, notes
