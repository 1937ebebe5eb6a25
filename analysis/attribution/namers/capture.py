"""Namers: a CUDA-graph capture trace names the kernels a graph replay ran.

Two kinds of capture: a signature's own module map over one capture trace, kernels aligned by
name (SignatureCaptureNamer); or capture traces named by the standard roles, matched to the
replay by launch order or name (CaptureNamer), which says why when it cannot be used."""
from __future__ import annotations

from analysis.attribution.capture import Capture, map_capture
from analysis.attribution.layers import LayerCut
from analysis.attribution.module_attribution import CaptureMap, slots_from_capture
from analysis.attribution.namers import Namer, Naming
from analysis.attribution.two_batch import TWO_BATCH_WHY_NOT
from analysis.attribution.two_batch_steps import step_two_batch_order
from analysis.attribution.steps import GRAPH_LAUNCHERS, Step

HOW = "capture"


def replayed(step: Step) -> list[int]:
    """Positions of the step's kernels a CUDA graph replayed."""
    return [i for i, k in enumerate(step.kernels) if k.launcher in GRAPH_LAUNCHERS]


class SignatureCaptureNamer(Namer):
    def __init__(self, capture: CaptureMap):
        self.capture = capture

    def name(self, step: Step) -> Naming:
        if step_two_batch_order(step) is not None:
            return Naming(None, why_not=TWO_BATCH_WHY_NOT)
        if replayed(step):
            slots, _matched = slots_from_capture(step.kernels, self.capture)
            if slots is not None:
                return Naming(LayerCut.counted(slots), HOW)
        return Naming(None)


class CaptureNamer(Namer):
    def __init__(self, captures: list[Capture], steps: list[Step]):
        self.captures = captures
        self.steps = len(steps)
        self.replay_steps = sum(bool(replayed(s)) for s in steps)
        self.reasons: dict[str, int] = {}  # why a step's replay could not be named, with its count

    def name(self, step: Step) -> Naming:
        positions = replayed(step)
        if not positions:
            return Naming(None)
        if step_two_batch_order(step) is not None:
            # a capture of two micro-batches names one layer's kernels twice, interleaved: structure reads them
            return Naming(None, why_not=TWO_BATCH_WHY_NOT)
        match = map_capture(step.kernels, positions, self.captures, step.batch_size)
        if match.slots is not None:
            return Naming(LayerCut.counted(match.slots, match.note, moe_layers=match.moe_layers), HOW)
        self.reasons[match.note] = self.reasons.get(match.note, 0) + 1
        return Naming(None, why_not=f"capture trace not used: {match.note}")

    def rank_notes(self) -> list[str]:
        notes = [f"capture trace not used for {count} of {self.steps} steps: {reason}"
                 for reason, count in self.reasons.items()]
        if not self.replay_steps:
            notes.append("capture trace given, but no step replays a CUDA graph (an eager trace names its "
                         "kernels by its own ranges): not used")
        return notes
