"""What every engine does in a run, stage by stage; harness/stages.py calls the stages in this order.

Why one interface: the embedded engine (one Ray actor) and SGLang (a server per node) differ in every
detail but go through the same stages, and the driver keeps what they share: the order, the run
directory, the manifest's run-level keys, the error record, and stopping the engine on every exit.

Each stage opens its own progress phases (their names are the engine's words, and what a failed run's
manifest names as `error.phase`) and records what it learns in the manifest at once, so a failure
keeps everything collected before it. A stage that cannot complete raises RunFailed (or one of the
engine's `expected_errors`), whose message is shown as is.

This module imports no engine: harness/engines/registry.py names the class of each `engine.kind`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.progress import Progress
from harness.scenario import Scenario


@dataclass
class RunContext:
    """What every stage works on: the scenario, the new run directory, the manifest filled as the run
    goes, and the progress phases (None for the standalone runner, which times its stages itself)."""

    scenario: Scenario
    run_dir: Path
    manifest: dict[str, Any]
    progress: Progress | None


@dataclass
class Traces:
    """Where the profiled ranks' trace files are.

    in_run_dir: copies under the run directory's traces/ (the embedded engine writes them there as the
    profile returns them; SGLang copies them there only with outputs.keep_traces).
    on_nodes: node rank -> paths on that node (SGLang: nodes share no file system with the driver).
    """

    in_run_dir: list[Path] = field(default_factory=list)
    on_nodes: dict[int, list[str]] = field(default_factory=dict)


class Engine(ABC):
    """One engine's stages. harness/stages.py calls, in order: start, reach_steady_state, profile,
    finish, collect, analyse, discard_traces; and stop on every exit, success or failure."""

    expected_errors: tuple[type[BaseException], ...] = ()  # besides RunFailed: failures shown without a traceback

    def __init__(self, ctx: RunContext):
        self.scenario, self.run_dir = ctx.scenario, ctx.run_dir
        self.manifest, self.progress = ctx.manifest, ctx.progress

    @abstractmethod
    def start(self) -> None:
        """Launch the engine and wait until it is ready to serve."""

    @abstractmethod
    def reach_steady_state(self) -> None:
        """Bring the batch of `workload.batch_size` requests to steady decoding."""

    @abstractmethod
    def profile(self) -> Traces:
        """Profile `profile.num_steps` decode steps on every rank; where their traces are."""

    @abstractmethod
    def finish(self) -> None:
        """Let every request finish and record them, then stop serving (logs fetched where they live apart)."""

    @abstractmethod
    def collect(self, traces: Traces) -> Traces:
        """The traces the run keeps, copied into the run directory; returns where they all are now."""

    @abstractmethod
    def analyse(self, traces: Traces) -> str:
        """Write analysis/ from the traces; returns the D4 table with the run's notes under it."""

    @abstractmethod
    def discard_traces(self, traces: Traces) -> None:
        """Remove the trace copies the run does not keep, once analysed."""

    @abstractmethod
    def stop(self) -> None:
        """Stop whatever is still running (servers, actors, load); called on every exit, more than once safe."""

