"""Namers from the kernels alone, the last in the order: a stack's signature template, or (the
generic signature) the structure of the layers around their attention cores, and failing that
the kernels' families over the period of the repeating sequence. They always answer."""
from __future__ import annotations

from analysis.attribution.layers import cut_by_template, cut_generic
from analysis.attribution.namers import Namer, Naming
from analysis.attribution.signature import Signature
from analysis.attribution.stages import DRAFT
from analysis.attribution.step_shapes import StepShapes
from analysis.attribution.step_times import StepTimes
from analysis.attribution.steps import Step
from analysis.attribution.structure import cut_structural
from analysis.attribution.two_batch import two_batch_cut
from analysis.attribution.two_batch_steps import step_two_batch_order


class TemplateNamer(Namer):
    def __init__(self, sig: Signature):
        self.sig = sig

    def name(self, step: Step) -> Naming:
        return Naming(cut_by_template(step.kernels, self.sig), "signature")


class StructureNamer(Namer):
    """`first`: no namer is asked before this one, so every step is this namer's to read, and steps of
    one shape are read together (step_shapes.py)."""

    def __init__(self, first: bool = False):
        self.first = first
        self._shapes: StepShapes | None = None

    def before_steps(self, steps: list[Step]) -> None:
        if self.first:
            self._shapes = StepShapes(steps)

    def name(self, step: Step) -> Naming:
        plan = step_two_batch_order(step)
        if plan is not None:
            cut = two_batch_cut(step.kernels, plan, cut_structural)
            if cut is not None:
                return Naming(cut, "structure")
        chain = self._shapes.chain_of(step) if self._shapes is not None else None
        if step.times is None:
            step.times = StepTimes.of(step.kernels)
        cut = cut_structural(step.kernels, step.times, chain)
        return Naming(cut, "structure" if cut is not None else "")


class GenericNamer(Namer):
    def __init__(self, sig: Signature):
        self.sig = sig

    def name(self, step: Step) -> Naming:
        # Only a step without an attention core the structure knows comes here. In an MTP draft phase
        # that is no forward (EAGLE with one speculative step: the draft tokens' bookkeeping), and what
        # repeats there (host copies, per-token index kernels) is no layer: SGLang 0.5.17's graph
        # draft phase was read as 3 layers, its eager one (six host copies) as 6.
        return Naming(cut_generic(step.kernels, self.sig, find_layers=step.stage != DRAFT), "generic")
