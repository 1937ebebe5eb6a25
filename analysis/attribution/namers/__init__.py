"""Who names a step's kernels: an ordered list of namers, each one file behind one interface.

Why a list: a step can be named from the trace's own nn.Module ranges, from a CUDA-graph capture
trace, from a stack's signature template, or from the kernels' structure alone, and the best
available source wins. Each namer answers "these are the step's layers and roles" or "not me"
(with a reason where the user should hear it); `name_step` asks them in order and the first
answer is the step's. `group.module` annotations in the trace are the user's word and override
whichever namer answered (annotation.py). The order (namers_for):

  module ranges  > capture (a signature's own map) > capture (standard roles) > template | structure > generic

Each namer's rows say which it was (KernelRow.source) and which entry decided (KernelRow.rule).
"""
from __future__ import annotations

from dataclasses import dataclass

from analysis.attribution.layers import LayerCut
from analysis.attribution.steps import Step


@dataclass
class Naming:
    """A namer's answer for one step: the cut (None: not me), how the step's note names the
    source, and why not, where the user should hear it."""

    cut: LayerCut | None
    how: str = ""
    why_not: str = ""


class Namer:
    """One source of names. `name` answers for a step; `rank_notes` says, once per rank, what the
    rank's problems.csv should hear about this namer (most have nothing to say)."""

    def name(self, step: Step) -> Naming:
        raise NotImplementedError

    def before_steps(self, steps: list[Step]) -> None:
        """Called once with the rank's steps before the first is named: a namer that reads steps
        together does it here (most read each step alone)."""

    def rank_notes(self) -> list[str]:
        return []


def name_step(namers: list[Namer], step: Step) -> tuple[LayerCut, str, list[str]]:
    """The first answer among the namers, and the reasons of those before it that said why not."""
    reasons: list[str] = []
    for namer in namers:
        naming = namer.name(step)
        if naming.cut is not None:
            return naming.cut, naming.how, reasons
        if naming.why_not:
            reasons.append(naming.why_not)
    raise AssertionError("the last namer names every step")  # generic and template always answer
