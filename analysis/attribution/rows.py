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
SECTION_SIDE = "side"  # beside the step: copies its threads did not launch (attribution/off_thread.py)

# Which source named a kernel.
SOURCE_MODULE_RANGE = "module_range"
SOURCE_CAPTURE = "capture"
SOURCE_SIGNATURE = "signature"
SOURCE_GENERIC = "generic"
SOURCE_STRUCTURE = "structure"  # role in the layer, from the kernel's position (no signature needed)
SOURCE_UNATTRIBUTED = "unattributed"
SOURCE_ANNOTATION = "annotation"
SOURCE_OFF_THREAD = "off_thread"  # a copy the step's threads did not launch (attribution/off_thread.py)
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
    kernel: str  # the kernel's whole name, less `void ` (a signature's label; the family for generic)
    kernel_name: str  # the full name from the trace
    stream: int
    start_us: float
    busy_us: float  # the kernel's duration
    exposed_us: float  # the part of its duration not covered by kernels on other streams
    source: str  # module_range | capture | signature | structure | generic | annotation | unattributed
    role: str = ""  # what the kernel does in the layer as the namer saw it (router, shared_experts, ...)
    rule: str = ""  # the data entry or named rule that decided: structure_rules.yaml:moe.router, ... (docs/architecture.md)
    # module_range / capture rows: the nn.Module classes (and the Python function) around the kernel's
    # launch, outermost first, " > " between them: what the module map's key in `rule` matched
    module_path: str = ""


def usable_statuses(strict: bool) -> tuple[str, ...]:
    """The step statuses a table uses: a step whose layer count differs from the expected one is used
    (and flagged) unless --strict leaves it out."""
    return ("ok",) if strict else ("ok", "layer_count_mismatch")


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
    # Where the step's wall time goes besides kernels (analysis/attribution/idle.py, docs/analysis.md):
    busy_any_us: float = 0.0  # time some kernel ran on some stream (the union over streams)
    idle_pre_us: float = 0.0  # no kernel on any stream, before the first layer kernel
    idle_between_us: float = 0.0  # ... between one layer's last kernel and the next layer's first
    idle_inside_us: float = 0.0  # ... within a layer's span
    idle_post_us: float = 0.0  # ... after the last layer kernel
    idle_host_launch_us: float = 0.0  # idle ended by a kernel the host launched after the gap began
    idle_host_sync_us: float = 0.0  # ... while the launching thread sat in a blocking call when it began
    idle_queued_us: float = 0.0  # idle ended by a kernel launched before the gap began
    idle_unknown_us: float = 0.0  # idle ended by a kernel without a launch call in the trace
    gap_before_us: float | None = None  # from the rank's previous step's last kernel end to this step's first start
    # waiting in collectives for the last rank (comm_split.py), by place; None: not split (one rank)
    wait_pre_us: float | None = None
    wait_layers_us: float | None = None
    wait_post_us: float | None = None
    # The step's own batch shape where its label says (SGLang's detailed annotations, step_labels.yaml):
    query_tokens: int | None = None  # tokens the step computes, summed over its requests
    kv_tokens: int | None = None  # KV-cache lengths summed over its requests (kv_tokens / batch_size: the mean)
    forward_id: int | None = None  # the pass's id in the expert-distribution recorder (0.5.23)


class RankProblem(msgspec.Struct):
    """A rank that could not be analysed (or only partly), reported instead of stopping the run."""

    path: str
    rank: str
    message: str
