"""Which reader finds a step's two-batch overlap, asked once per step whichever namer asks first.

A decode or verify step under DeepEP's low-latency mode is read by its kernels' two phases
(two_batch.py); a prefill step under its normal mode by the order its kernels were launched in
(two_batch_prefill.py). A rank that launches no DeepEP dispatch or combine has no such step.
"""
from __future__ import annotations

from analysis.attribution.two_batch import TwoBatchOrder, two_batch_order
from analysis.attribution.two_batch_prefill import prefill_two_batch_order
from analysis.ingest.kernel_classes import class_of_name

_NOT_READ = object()


def may_overlap_two_batches(names) -> bool:
    """Whether a rank whose kernels have these names can hold a two-batch-overlapped step: it
    launches DeepEP's dispatch or combine (either mode)."""
    return any(class_of_name(name) in ("dispatch", "combine") for name in names)


def mark_one_batch(steps) -> None:
    """Steps known not to be two-batch-overlapped (may_overlap_two_batches is False for their rank):
    step_two_batch_order answers None for them without reading their kernels."""
    for step in steps:
        step.__dict__["_two_batch"] = None


def step_two_batch_order(step) -> TwoBatchOrder | None:
    """The micro-batch order of a step's kernels (the decode reader's, else the prefill reader's), or
    None; read once per step."""
    plan = step.__dict__.get("_two_batch", _NOT_READ)
    if plan is _NOT_READ:
        plan = step.__dict__["_two_batch"] = two_batch_order(step.kernels) or prefill_two_batch_order(step.kernels)
    return plan
