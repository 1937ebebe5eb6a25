"""Copies the step's own threads did not launch: a KV-cache transfer engine's, beside the step.

Why: on a prefill server of a prefill/decode pair, the KV transfer engine (Mooncake over TCP, seen on
SGLang 0.5.17) copies each finished request's KV cache to host memory with synchronous device-to-host
copies from its own C++ thread, while the next prefill step runs: about 300 copies a step, interleaved
with the step's kernels in time. Named by position they took the roles of the layer kernels around
them and the layer-sequence self-check fired on a table that was otherwise right. A copy (memcpy) whose
launch call ran on a thread that launched none of the step's kernels is not the model's work: it is
taken out before the step is named and reported on its own row (section "side", outside the layers).
Its time counts in the step's kernel busy time (StepRow.busy_us, the shares' denominator), never in the
step's span or its idle split: the engine copies a request's KV after its prefill, often during the idle
time before the next step, and a step stretched to its last copy looked a second long (0.5.17, PD).
"""
from __future__ import annotations

from collections.abc import Callable

from analysis.attribution.named_rules import STRUCTURE_RULES, rule
from analysis.attribution.roles import row_of
from analysis.attribution.rows import SOURCE_OFF_THREAD
from analysis.ingest.trace_model import Kernel

SIDE_ROLE, SIDE_SOURCE = "off_thread_copy", SOURCE_OFF_THREAD
_ROW = row_of(SIDE_ROLE)
SIDE_GROUP, SIDE_MODULE = _ROW.group, _ROW.module
SIDE_RULE = rule(STRUCTURE_RULES, "side.off_thread_copy")


def split_off_thread_copies(kernels: list[Kernel], thread_of: Callable[[int], int | None]
                            ) -> tuple[list[Kernel], list[Kernel]]:
    """(the step's own kernels, the copies launched from other threads), each in the given order.
    Nothing is split off unless the step's kernels name their launching threads (a replayed graph
    names the thread of its graph launch) and the copy's launch names another. `thread_of`: the
    thread that launched a correlation id, or None."""
    copy_threads = {thread_of(k.correlation) for k in kernels if k.kind == "memcpy"}
    copy_threads.discard(None)
    if not copy_threads:
        return kernels, []
    # the copies' threads that also launched some of the step's other work: found by a walk that
    # ends once each is seen (the first kernels, on a server whose copies are its own: a decode step)
    unseen, any_own = set(copy_threads), False
    for k in kernels:
        if k.kind != "memcpy":
            tid = thread_of(k.correlation)
            if tid is not None:
                any_own = True
                unseen.discard(tid)
                if not unseen:
                    break
    if not any_own or not unseen:
        return kernels, []
    own: list[Kernel] = []
    side: list[Kernel] = []
    for k in kernels:
        tid = thread_of(k.correlation) if k.kind == "memcpy" else None
        (side if tid is not None and tid in unseen else own).append(k)
    return own, side
