"""Override: `group.module` annotations in the trace (a CPU range around a kernel's launch, or a
GPU range around the kernel) rename whatever a namer gave those kernels: they are the user's word."""
from __future__ import annotations

from analysis.attribution.layers import LayerCut
from analysis.attribution.module_roles import annotated_rows, apply_annotations, parse_annotations
from analysis.attribution.namers.launch_points import LaunchPoints
from analysis.attribution.steps import Step
from analysis.ingest.trace_model import RankTrace


class AnnotationOverride:
    def __init__(self, trace: RankTrace, points: LaunchPoints):
        self.points = points
        self.annotated = parse_annotations(trace.cpu_annotations, trace.gpu_annotations)

    def apply(self, step: Step, cut: LayerCut) -> None:
        if self.annotated is not None:
            apply_annotations(cut.slots, annotated_rows(step.kernels, self.points.of(step), self.annotated))
