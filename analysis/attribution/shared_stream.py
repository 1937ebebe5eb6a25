"""A kernel between two shared-expert kernels on their own stream is the shared experts' too.

Why: SGLang runs the unfused shared expert on an alternate stream beside the gate and the dispatch
(quantise, gate-up GEMM, activation, quantise, down GEMM). The structural namer reads a side-stream
kernel's role from where it starts among the main stream's kernels, so when the gate's top-k ran
shorter than usual the activation and the second quantisation started after the dispatch began and
were named `moe / silu` and `moe / dispatch` (seen on SGLang 0.5.17 prefill and CUDA-graph decode,
DeepEP; layer_kernel_sequence then fired). One stream runs its kernels in order: a kernel whose
stream's previous and next shared-expert kernels in the same layer unit enclose it (at most MAX_RUN
kernels between them, named by the same source, none a communication kernel) is part of that block.
"""
from __future__ import annotations

import operator

from msgspec.structs import replace

from analysis.attribution.layers import Slot
from analysis.attribution.named_rules import STRUCTURE_RULES, rule
from analysis.attribution.pinned_names import pinned_role
from analysis.attribution.roles import row_of
from analysis.attribution.rows import SECTION_LAYER
from analysis.ingest.trace_model import Kernel

SHARED_ROLE = "shared_experts"
_RULE = rule(STRUCTURE_RULES, "moe.shared_block_on_its_stream")
MAX_RUN = 3  # the block's own kernels between two of its GEMMs: activation, quantisation
_MODULE = operator.attrgetter("module")


def join_shared_blocks(kernels: list[Kernel], slots: list[Slot]) -> int:
    """Renames, in `slots` (one per kernel, kernels by start), the kernels sandwiched between two shared-
    expert kernels of one layer unit on one side stream; returns how many were renamed."""
    shared = row_of(SHARED_ROLE)
    if shared.module not in set(map(_MODULE, slots)):
        return 0  # no shared-expert kernel in the step (most models, and a step without layers)
    by_stream: dict[tuple[int, int], list[int]] = {}
    for i, (kernel, slot) in enumerate(zip(kernels, slots)):
        if slot.section == SECTION_LAYER:
            by_stream.setdefault((slot.unit, kernel.stream), []).append(i)
    renamed = 0
    for members in by_stream.values():
        ours = [n for n, i in enumerate(members) if slots[i].module == shared.module and slots[i].group == shared.group]
        for left, right in zip(ours, ours[1:]):
            between = members[left + 1:right]
            source = slots[members[left]].source
            if not between or len(between) > MAX_RUN or slots[members[right]].source != source:
                continue
            if any(slots[i].source != source or is_pinned(kernels[i].name) for i in between):
                continue
            for i in between:
                slots[i] = replace(slots[i], group=shared.group, module=shared.module, role=SHARED_ROLE, rule=_RULE)
            renamed += len(between)
    return renamed


def is_pinned(name: str) -> bool:
    return pinned_role(name) is not None
