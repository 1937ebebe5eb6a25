"""Label the phases of kernels launched once per phase in a layer (DeepEP's low-latency send / recv).

Why: SGLang asks DeepEP's low-latency dispatch and combine for the receive hook, so each runs as two
launches of one kernel per MoE layer: the send, then the receive that waits for the other ranks.
Under one label the table would add a few microseconds of sending to whatever the receive waited;
apart, the two halves are low-latency mode's own transfer and wait.
"""
from __future__ import annotations

from collections import defaultdict

from msgspec.structs import replace

from analysis.ingest.kernel_classes import phases_of


def label_phases(kernels: list, slots: list, layers: list[int], micro_batches: list[int]) -> None:
    """One step's kernels, each with its slot, layer and micro-batch; `slots` in place: in each
    (layer, micro-batch, module), the launches of a phased kernel in start order take its phases in
    turn ("... (send)", "... (recv)") when their number is a multiple of the phases'; otherwise (one
    launch doing both) the labels stay."""
    groups: dict[tuple[int, int, str, str], list[int]] = defaultdict(list)
    for i, (kernel, layer) in enumerate(zip(kernels, layers)):
        if layer >= 0 and phases_of(kernel.name):
            slot = slots[i]
            groups[(layer, micro_batches[i], slot.module, slot.kernel)].append(i)
    for members in groups.values():
        phases = phases_of(kernels[members[0]].name)
        if len(members) % len(phases):
            continue
        for n, i in enumerate(sorted(members, key=lambda i: kernels[i].start_us)):
            slots[i] = replace(slots[i], kernel=f"{slots[i].kernel} ({phases[n % len(phases)]})")
