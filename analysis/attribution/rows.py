"""Row types of the analysis output: the long per-kernel table and the per-step table.

Every D4 cell is a sum over KernelRows, so every figure can be traced back to kernels, steps
and ranks (the long CSV is these rows).
"""
from __future__ import annotations

import msgspec

# Where a kernel sits in a step.
SECTION_PRE = "pre"  # before the first layer (embedding, input preparation)
SECTION_LAYER = "layer"
SECTION_POST = "post"  # after the last layer (final norm, lm head, sampling)

# Which source named a kernel.
SOURCE_MODULE_RANGE = "module_range"
SOURCE_CAPTURE = "capture"
SOURCE_SIGNATURE = "signature"
SOURCE_GENERIC = "generic"
SOURCE_STRUCTURE = "structure"  # role in the layer, from the kernel's position (no signature needed)
SOURCE_UNATTRIBUTED = "unattributed"
SOURCE_ANNOTATION = "annotation"
RULE_NONE = "none"  # an unattributed kernel's rule: no entry named it (its step's note in steps.csv says why)  # a `group.module` annotation in the trace (the user's word)

UNATTRIBUTED = "unattributed"


class KernelRow(msgspec.Struct, gc=False):
    """One kernel launch in one step of one rank, with its attribution and times."""

    run: str
    rank: str
    step: int
    stage: str  # decode | extend | target_verify | draft | draft_extend | unknown
    section: str  # pre | layer | post
    layer: int  # layer index within the step; -1 outside layers
    micro_batch: int  # 0, or 0/1 under two-batch overlap
    group: str  # attention | gate | moe | combine/share overlap | mtp | other | unattributed ...
    module: str
    kernel: str  # the signature's label for the kernel (short); the family for generic
    kernel_name: str  # the full name from the trace
    stream: int
    start_us: float
    busy_us: float  # the kernel's duration
    exposed_us: float  # the part of its duration not covered by kernels on other streams
    source: str  # module_range | capture | signature | structure | generic | annotation | unattributed
    role: str = ""  # what the kernel does in the layer as the namer saw it (router, shared_experts, ...)
    rule: str = ""  # the data entry or code rule that decided: kernel_classes.yaml:router_gemm, ... (docs/architecture.md)


class StepRow(msgspec.Struct):
    """One forward step of one rank."""

    run: str
    rank: str
    step: int
    stage: str
    start_us: float
    end_us: float
    step_us: float  # wall time from the first kernel's start to the last kernel's end
    layers_us: float  # wall time from the first layer kernel's start to the last layer kernel's end
    busy_us: float  # sum of all kernel durations in the step
    exposed_us: float  # time covered by exactly one stream
    kernels: int
    layers_found: int
    layers_expected: int | None
    status: str  # ok | layer_count_mismatch | no_layers
    segmented_by: str  # module_range | gpu_annotation | cpu_annotation | graph_launch | gap
    batch_size: int | None = None
    note: str = ""
    moe_layers_found: int | None = None  # of layers_found, those with experts (None: the attribution cannot tell)


class RankProblem(msgspec.Struct):
    """A rank that could not be analysed (or only partly), reported instead of stopping the run."""

    path: str
    rank: str
    message: str
