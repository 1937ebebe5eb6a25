"""A rank's later steps named by a forked copy of the process while the parent names the earlier
ones and builds their rows.

Why: naming a step's kernels (its chain across streams, the layer plan, the roles) and finding their
exposed time is most of the attribution: about 0.35 s of a 400 MB trace whose steps repeat one chain
and about 1 s where no two steps share a chain (speculative decoding, changing batch sizes), on one
core while a second sat idle. The kernels-only namers (structure, template, generic: Namer.forkable)
name a step from its own kernels and keep nothing between steps, so a child (analysis/forked_call.py)
names the later steps and the parent takes its names where they come: each step is named as it
would have been here, so the rows are the same (tests/test_forked_naming.py). What comes back is the
cuts (the slots one layer plan shares cross once) and the exposed times.
"""
from __future__ import annotations

from array import array

from msgspec.structs import astuple

from analysis.attribution.layers import LayerCut, Slot
from analysis.attribution.namers import Namer, name_step
from analysis.attribution.overlap import exposed_durations
from analysis.attribution.steps import Step
from analysis.forked_call import ForkedCall, fork_allowed

# Of the kernels, the share the child names. The parent also builds every step's rows, but the child
# pickles its cuts: half each was measured as fast as 55% for the child where steps repeat a chain and
# 2.5% faster where none does (docs/performance.md).
CHILD_SHARE = 0.5
_BYTES_PER_KERNEL = 1024  # bounds the child's message: a kernel's slot, chain position and exposed time
StepNames = tuple[LayerCut, str, list[str], "list[float] | array"]  # name_step's answer and the exposed times


def step_names(namers: list[Namer], step: Step) -> StepNames:
    """The step's cut, how it was named, the namers' reasons before it, and its kernels' exposed us:
    what the parent makes for its own steps and the child for the later ones, so both make it alike."""
    return (*name_step(namers, step), exposed_durations(step.kernels))


def name_steps(namers: list[Namer], steps: list[Step]) -> list[StepNames]:
    """step_names of each step."""
    return [step_names(namers, step) for step in steps]


def _names_to_send(namers: list[Namer], steps: list[Step]) -> list[StepNames]:
    """name_steps, made cheap to pickle: equal slots become one object (pickle sends an object it has
    sent before as a reference; slots are never changed in place, only replaced, so sharing them is
    what the structure namer already does for the steps of one plan) and the exposed times an array."""
    shared: dict[tuple, Slot] = {}
    out = []
    for cut, how, reasons, exposed in name_steps(namers, steps):
        slots = cut.slots
        for i, slot in enumerate(slots):
            slots[i] = shared.setdefault(astuple(slot), slot)
        out.append((cut, how, reasons, array("d", exposed)))
    return out


def first_child_step(steps: list[Step]) -> int:
    """Where the child's steps begin: after the first steps that hold at least the parent's share
    (1 - CHILD_SHARE) of the kernels; len(steps), no child, where that takes every step."""
    total = sum(len(s.kernels) for s in steps)
    seen = 0
    for i, step in enumerate(steps):
        if seen >= (1 - CHILD_SHARE) * total:
            return i
        seen += len(step.kernels)
    return len(steps)


def can_fork_naming(namers: list[Namer], steps: list[Step]) -> bool:
    return len(steps) > 1 and all(n.forkable for n in namers) and fork_allowed()


class ForkedNaming(ForkedCall):
    """name_steps of steps[first:], in a forked child; `result()` waits for them."""

    def __init__(self, namers: list[Namer], steps: list[Step], first: int):
        later = steps[first:]

        def valid(value) -> bool:
            return (isinstance(value, list) and len(value) == len(later)
                    and all(isinstance(v, tuple) and len(v) == 4 and isinstance(v[0], LayerCut)
                            and len(v[0].slots) == len(v[3]) == len(s.kernels) for v, s in zip(value, later)))

        limit = _BYTES_PER_KERNEL * sum(len(s.kernels) for s in later) + (1 << 20)
        super().__init__(_names_to_send, (namers, later), valid, limit)
