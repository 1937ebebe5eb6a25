"""One rank's trace -> its kernel rows (as columns) and StepRows (steps, layers, attribution, overlap)."""
from __future__ import annotations

import operator
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from analysis.attribution.capture import Capture
from analysis.attribution.idle import LaunchClock, step_idle
from analysis.attribution.module_attribution import CaptureMap, kernel_label
from analysis.attribution.namers.annotation import AnnotationOverride
from analysis.attribution.namers.launch_points import LaunchPoints
from analysis.attribution.namers import name_step
from analysis.attribution.namers.order import namers_for
from analysis.attribution.overlap import exposed_durations, exposed_of_times
from analysis.attribution.step_times import StepTimes
from analysis.attribution.phases import label_phases
from analysis.ingest.kernel_classes import phases_of
from analysis.attribution.off_thread import SIDE_GROUP, SIDE_MODULE, SIDE_ROLE, SIDE_RULE, SIDE_SOURCE, split_off_thread_copies
from analysis.attribution.pinned_names import pinned, pinned_role
from analysis.attribution.two_batch_steps import mark_one_batch, may_overlap_two_batches
from analysis.attribution.shared_stream import join_shared_blocks
from analysis.attribution.kernel_columns import ColumnsBuilder, KernelColumns
from analysis.attribution.rows import SECTION_LAYER, SECTION_SIDE, KernelRow, StepRow
from analysis.attribution.signature import Signature
from analysis.attribution.steps import DEFAULT_GAP_US, Step, segment_steps
from analysis.attribution.structure import count_attention_cores
from analysis.ingest.model_spec import ModelSpec
from analysis.ingest.trace_model import RankTrace, are_cpu_operators
from analysis.attribution.stages import DECODE, DRAFT, DRAFT_STAGES

if TYPE_CHECKING:
    import numpy as np

ATTRIBUTION_MODES = ("auto", "template", "modules")
_BY_START = operator.attrgetter("start_us")
TBO_NOT_SEEN = ("two-batch overlap expected (--tbo, or the run's engine.two_batch_overlap) but not seen in {where}: "
                "read as one batch")


@dataclass
class RankOptions:
    run: str = "run"
    tbo: bool = False
    step_gap_us: float = DEFAULT_GAP_US
    attribution: str = "auto"  # auto: module ranges > capture > template/generic
    notes: list[str] = field(default_factory=list)
    layers: int | None = None  # expected decoder layers per step (--layers); overrides the model's
    # per step index: its chain across streams as the structural cut read it (the self-checks reuse it)
    chains: dict[int, Sequence[int]] = field(default_factory=dict)
    # the trace is not read again: each step's kernels are let go once its rows are built, so a large
    # trace's kernels and its rows are never all held at once (peak memory: docs/performance.md)
    release_kernels: bool = False


def _expected_units(stage: str, model: ModelSpec | None, per: int, layers: int | None = None) -> int | None:
    if stage in DRAFT_STAGES:
        count = model.mtp_layers if model is not None else None
    else:
        count = layers if layers is not None else (model.num_layers if model is not None else None)
    return count * per if count else None


def _layer_check(units_found: int, expected: int | None, moe_found: int | None, stage: str,
                 model: ModelSpec | None, options: RankOptions, per: int) -> tuple[str, str]:
    """Status and note of a step's layer count against the model (dense and MoE where both are known)."""
    if units_found == 0:
        return "no_layers", ""
    if expected is not None and units_found != expected:
        return "layer_count_mismatch", f"found {units_found // per} layers, expected {expected // per}"
    if (model is not None and model.first_k_dense_replace and moe_found is not None and options.layers is None
            and stage not in DRAFT_STAGES and per == 1):
        dense_expected = model.first_k_dense_replace
        moe_expected = model.num_layers - dense_expected
        if moe_found != moe_expected:
            return ("layer_count_mismatch", f"found {units_found - moe_found} dense + {moe_found} MoE layers, "
                    f"model expects {dense_expected} + {moe_expected}")
    return "ok", ""


def attribute_rank(*args, **kwargs) -> tuple[list[KernelRow], list[StepRow]]:
    """attribute_rank_columns (the same arguments) with the kernel rows as KernelRows, for readers of objects."""
    columns, step_rows = attribute_rank_columns(*args, **kwargs)
    return columns.rows(), step_rows


def attribute_rank_columns(
    trace: RankTrace,
    sig: Signature,
    model: ModelSpec | None,
    options: RankOptions,
    capture: CaptureMap | None = None,
    captures: list[Capture] | None = None,
) -> tuple[KernelColumns, list[StepRow]]:
    """`capture`: a signature's own map over a capture trace (names aligned); `captures`: capture
    traces named by the standard roles. What a capture could not do is added to options.notes."""
    steps = segment_steps(trace, options.step_gap_us, use_modules=options.attribution != "template")
    clock = LaunchClock(trace.launches, trace.syncs)
    for step in steps:  # a transfer engine's copies are not the model's: named apart, before the cut
        step.kernels, step.side = split_off_thread_copies(step.kernels, clock.thread_of)
    names = {k.name for step in steps for k in step.kernels}  # a rank's distinct kernel names: a few hundred
    if not may_overlap_two_batches(names):
        mark_one_batch(steps)  # no step of this rank can be two-batch-overlapped: none is read for it
    pinned_names = frozenset(n for n in names if pinned_role(n) is not None)  # its communication kernels
    phased = any(map(phases_of, names))  # DeepEP low-latency send / recv launches (phases.py), or none
    points = LaunchPoints(trace)
    namers = namers_for(trace, sig, options.attribution, steps, points, capture, captures)
    annotations = AnnotationOverride(trace, points) if options.attribution != "template" else None
    if options.release_kernels:
        trace.kernels = []  # the steps hold them now
    return _rows_of_steps(trace, steps, namers, annotations, clock, model, options, template=not sig.generic,
                          pinned_names=pinned_names, phased=phased)


def _any_root(kernels: list) -> bool:
    """Whether any kernel is a CPU operator under an outer call. Only a CPU operator has a root: a step
    of GPU kernels is not read (are_cpu_operators)."""
    if not are_cpu_operators(kernels):
        return False
    roots = {k.root for k in kernels}
    roots.discard("")
    return bool(roots)


def _pinned_slots(kernels: list, slots: list, units: list[int], pinned_names: frozenset[str]) -> list:
    """The slots with each communication kernel in a layer pinned to its own row (pinned_names.py)."""
    row_slots = list(slots)
    if pinned_names:
        names = [k.name for k in kernels]
        here = pinned_names.intersection(names)
        if here:
            for i in [i for i, name in enumerate(names) if name in here]:
                if units[i] >= 0:
                    row_slots[i] = pinned(row_slots[i], names[i])
    return row_slots


def _layers_of_units(units: list[int], per: int, unit_layers: dict[int, tuple[int, int]] | None
                     ) -> tuple[list[int], list[int], list[int]]:
    """Per kernel of a step, from its layer unit (-1 outside the layers): its layer and micro-batch
    as its row holds them, and the layer its idle time is placed by. `per`: units a layer (two under
    a signature's template with --tbo); `unit_layers`: a two-batch cut's (layer, micro-batch) per unit."""
    if unit_layers is not None:
        of_unit = {u: unit_layers[u] for u in set(units) if u >= 0}
        layers = [of_unit[u][0] if u >= 0 else -1 for u in units]
        return layers, [of_unit[u][1] if u >= 0 else 0 for u in units], layers
    if per == 1:
        return units, [0] * len(units), units
    return ([u // per if u >= 0 else -1 for u in units], [u % per if u >= 0 else 0 for u in units], units)


def _layers_span_us(times: StepTimes, layer_of: np.ndarray) -> tuple[float, float]:
    """The first start and the last end of the step's kernels in layers (inf, -inf: none)."""
    inside = layer_of >= 0
    if not inside.any():
        return float("inf"), float("-inf")
    return float(times.start_us[inside].min()), float(times.end_us[inside].max())


def _rows_of_steps(trace: RankTrace, steps: list[Step], namers: list, annotations: AnnotationOverride | None,
                   clock: LaunchClock, model: ModelSpec | None, options: RankOptions, template: bool = False,
                   pinned_names: frozenset[str] = frozenset(), phased: bool = True) -> tuple[KernelColumns, list[StepRow]]:
    """Each step named, then its rows. `template`:
    a stack's signature names the kernels (with --tbo, two anchors a layer); the generic analysis finds
    two-batch overlap itself, and --tbo there is what the run expected: a step without it says so."""
    from analysis.numeric import np, sequential_sum

    tbo_units = 2 if options.tbo and template else 1  # --tbo on a signature's template: two units a layer
    expect_tbo = options.tbo and not template
    tbo_missing = 0
    rows = ColumnsBuilder(options.run, trace.rank.label, sum(len(s.kernels) + len(s.side) for s in steps))
    step_rows: list[StepRow] = []
    previous_end: float | None = None
    for namer in namers:
        namer.before_steps(steps)
    for step in steps:
        cut, how, reasons = name_step(namers, step)  # a namer may read the step's times with others' first
        if step.times is None:
            step.times = StepTimes.of(step.kernels)
        times = step.times
        exposed = exposed_of_times(times)
        capture_note = "; ".join(reasons)
        if annotations is not None:
            annotations.apply(step, cut)
        slots = cut.slots
        join_shared_blocks(step.kernels, slots)  # one stream runs in order: its shared-expert block stays whole
        unit_layers = cut.unit_layers  # a cut that read two micro-batches (two_batch.py) maps its units itself
        per = tbo_units if unit_layers is None else 1
        units_found = cut.units_found
        if cut.chain is not None and not _any_root(step.kernels):
            # what the self-check would read from the rows again; as int32s (a list of ints held 6 MB of
            # a 400 MB trace's analysis)
            options.chains[step.index] = array("i", cut.chain)
        if options.attribution == "modules" and how != "module_range":
            how = f"{how} (no module ranges)"
        stage = step.stage
        if model is not None and model.mtp_layers and stage == DECODE and units_found == model.mtp_layers * per:
            stage = DRAFT
        expected = _expected_units(stage, model, per, options.layers)
        status, mismatch = _layer_check(units_found, expected, cut.moe_layers, stage, model, options, per)
        if status == "no_layers" and stage == DRAFT and not count_attention_cores(step.kernels):
            # EAGLE's draft phase with one speculative step runs no draft-model pass: it only picks the
            # draft token (SGLang 0.5.17's `draft` range around a few sampling kernels), so no layer is right
            status, mismatch = "ok", "no draft-model pass (one speculative step: the draft token's selection only)"
        rank = trace.rank.label
        index = step.index
        first, last = times.span_us()
        busy_us = times.busy_us()
        # each kernel's layer unit (-1 outside the layers), its slot as its row holds it
        # (communication pinned), its layer and micro-batch
        units = [s.unit if s.section == SECTION_LAYER else -1 for s in slots]
        row_slots = _pinned_slots(step.kernels, slots, units, pinned_names)
        layers, micro_batches, layer_list = _layers_of_units(units, per, unit_layers)
        layer_of = np.array(layer_list, dtype=np.int64)  # the layer each kernel's idle time is placed by
        if phased:
            label_phases(step.kernels, row_slots, layers, micro_batches)
        rows.add(index, stage, step.kernels, row_slots, layers, micro_batches, exposed, times)
        layers_first, layers_last = _layers_span_us(times, layer_of)
        if step.side:  # named apart; in the step's kernel busy time, never in its span or idle time
            merged = sorted(step.kernels + step.side, key=_BY_START)
            side_exposed = dict(zip(map(id, merged), exposed_durations(merged)))
            side_times = StepTimes.of(step.side)
            rows.add(index, stage, step.side,
                     [(SECTION_SIDE, SIDE_GROUP, SIDE_MODULE, kernel_label(k), SIDE_SOURCE, SIDE_ROLE, SIDE_RULE, "")
                      for k in step.side], [-1] * len(step.side), [0] * len(step.side),
                     [side_exposed[id(k)] for k in step.side], side_times)
            busy_us += side_times.busy_us()
        idle = step_idle(step.kernels, times, layer_of, clock)
        note = f"attributed by {how}"
        if cut.detail:
            note += f"; {cut.detail}"
        if capture_note:
            note += f"; {capture_note}"
        if mismatch:
            note += f"; {mismatch}"
        if expect_tbo and unit_layers is None and units_found and stage not in DRAFT_STAGES:
            note += "; " + TBO_NOT_SEEN.format(where="this step's kernels")
            tbo_missing += 1
        step_rows.append(
            StepRow(
                run=options.run,
                rank=rank,
                step=step.index,
                stage=stage,
                start_us=first,
                end_us=last,
                step_us=last - first,
                layers_us=layers_last - layers_first if layers_last > float("-inf") else 0.0,
                busy_us=busy_us,
                exposed_us=sequential_sum(exposed, 0),
                kernels=len(step.kernels),
                layers_found=units_found // per if per > 1 else units_found,
                layers_expected=expected // per if expected is not None else None,
                status=status,
                segmented_by=step.segmented_by,
                batch_size=step.batch_size,
                note=note,
                moe_layers_found=cut.moe_layers,
                busy_any_us=idle.busy_any_us,
                idle_pre_us=idle.idle_us["pre"],
                idle_between_us=idle.idle_us["between"],
                idle_inside_us=idle.idle_us["inside"],
                idle_post_us=idle.idle_us["post"],
                idle_host_launch_us=idle.cause_us["host_launch"],
                idle_host_sync_us=idle.cause_us["host_sync"],
                idle_queued_us=idle.cause_us["queued"],
                idle_unknown_us=idle.cause_us["unknown"],
                gap_before_us=max(0.0, first - previous_end) if previous_end is not None else None,
                **step.aggregates,
            )
        )
        previous_end = last
        if options.release_kernels:
            step.kernels, step.times = [], None
    for namer in namers:
        options.notes.extend(namer.rank_notes())
    if note := clock.clock_note():
        options.notes.append(note)
    if tbo_missing:
        options.notes.append(TBO_NOT_SEEN.format(where=f"{tbo_missing} of {len(steps)} steps"))
    return rows.columns(), step_rows
