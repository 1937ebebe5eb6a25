"""Label the phases of kernels launched once per phase in a layer (DeepEP's low-latency send / recv).

Why: SGLang asks DeepEP's low-latency dispatch and combine for the receive hook, so each runs as two
launches of one kernel per MoE layer: the send, then the receive that waits for the other ranks.
Under one label the table would add a few microseconds of sending to whatever the receive waited;
apart, the two halves are low-latency mode's own transfer and wait.
"""
from __future__ import annotations

from collections import defaultdict

from analysis.ingest.kernel_classes import phases_of
from analysis.attribution.rows import KernelRow


def label_phases(rows: list[KernelRow]) -> None:
    """Rows of one step, in place: in each (layer, micro-batch, module), the launches of a phased
    kernel in start order take its phases in turn ("... (send)", "... (recv)") when their number is a
    multiple of the phases'; otherwise (one launch doing both) the labels stay."""
    groups: dict[tuple[int, int, str, str], list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        if row.layer >= 0 and phases_of(row.kernel_name):
            groups[(row.layer, row.micro_batch, row.module, row.kernel)].append(i)
    for members in groups.values():
        phases = phases_of(rows[members[0]].kernel_name)
        if len(members) % len(phases):
            continue
        for n, i in enumerate(sorted(members, key=lambda i: rows[i].start_us)):
            row = rows[i]
            row.kernel = f"{row.kernel} ({phases[n % len(phases)]})"
