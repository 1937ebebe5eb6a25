"""Kernels whose name says what they are keep that name wherever they sit in a layer.

Why: the structural namer reads a kernel's role from its position, and the module-range namer from the
module around its launch. A DeepEP receive that waits milliseconds for another rank (an eager run's first
steps), or a collective that a layer border put in the wrong place, then took the role of its
neighbours ("moe / experts" for `deep_ep::internode_ll::dispatch`): 2-4 points of a step moved from
communication into compute. A DeepEP dispatch or combine (low-latency or normal mode), an NCCL
collective or a custom all-reduce is named by its class (kernel_classes.yaml) instead; an outlier layer
is left to the self-checks to flag (layer_time, layer_kernel_sequence), never renamed into experts.
A stack's own signature and the trace's own annotations are the user's word and are not changed.
"""
from __future__ import annotations

import functools

from msgspec.structs import replace

from analysis.ingest.kernel_classes import class_of_name, collective_role
from analysis.attribution.layers import Slot
from analysis.attribution.roles import row_of

UNCHANGED_SOURCES = frozenset({"signature", "annotation", "unattributed"})
_CLASS_RULE = "kernel_classes.yaml:{}"


@functools.lru_cache(maxsize=100_000)
def pinned_role(name: str) -> tuple[str, str] | None:
    """(role, class) of a kernel whose class fixes its row, else None (cached: names repeat)."""
    cls = class_of_name(name)
    if cls in ("dispatch", "combine"):
        return cls, cls
    if cls == "allreduce":
        return collective_role(name), cls
    return None


def pinned(slot: Slot, name: str) -> Slot:
    """The slot, or a copy named by the kernel's class where a namer put a communication kernel in
    another row of its layer."""
    pin = pinned_role(name)
    if pin is None or slot.source in UNCHANGED_SOURCES:
        return slot
    role, cls = pin
    row = row_of(role)
    if (slot.group, slot.module) == (row.group, row.module):
        return slot
    return replace(slot, group=row.group, module=row.module, role=role, rule=_CLASS_RULE.format(cls))
