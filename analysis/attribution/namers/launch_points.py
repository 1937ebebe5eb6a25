"""Where a step's kernels were launched on the CPU, computed once per step for every namer that
reads CPU ranges (module ranges, annotations)."""
from __future__ import annotations

from analysis.attribution.module_roles import launch_points
from analysis.attribution.steps import Step
from analysis.ingest.trace_model import RankTrace


class LaunchPoints:
    def __init__(self, trace: RankTrace):
        self._trace = trace
        self._launches: dict | None = None  # built on first use: a rank no range namer reads never needs it
        self._of: tuple[Step, list] | None = None

    @property
    def launches(self) -> dict:
        if self._launches is None:
            self._launches = self._trace.launch_by_correlation()
        return self._launches

    def of(self, step: Step) -> list:
        if self._of is None or self._of[0] is not step:
            self._of = (step, launch_points(step.kernels, self.launches))
        return self._of[1]
