"""One rank's trace -> KernelRows and StepRows (steps, layers, attribution, overlap)."""
from __future__ import annotations

from dataclasses import dataclass, field

from analysis.attribution.capture import Capture, map_capture
from analysis.attribution.layers import LayerCut, cut_by_template, cut_generic, layer_units
from analysis.ingest.model_spec import ModelSpec
from analysis.attribution.module_attribution import (
    CaptureMap,
    ModuleIndex,
    slots_from_capture,
    slots_from_module_ranges,
)
from analysis.attribution.module_roles import (
    ModuleRoleNamer,
    RangeForest,
    annotated_rows,
    apply_annotations,
    launch_points,
    parse_annotations,
    roles_from_ranges,
    slots_from_roles,
    standard_map,
)
from analysis.attribution.overlap import exposed_durations, wall_span_us
from analysis.attribution.signature import Signature
from analysis.attribution.steps import GRAPH_LAUNCHERS, DEFAULT_GAP_US, Step, segment_steps
from analysis.attribution.structure import cut_structural
from analysis.attribution.rows import SECTION_LAYER, KernelRow, StepRow
from analysis.ingest.trace_model import RankTrace

ATTRIBUTION_MODES = ("auto", "template", "modules")


@dataclass
class RankOptions:
    run: str = "run"
    tbo: bool = False
    step_gap_us: float = DEFAULT_GAP_US
    attribution: str = "auto"  # auto: module ranges > capture > template/generic
    notes: list[str] = field(default_factory=list)
    layers: int | None = None  # expected decoder layers per step (--layers); overrides the model's


def _expected_units(stage: str, model: ModelSpec | None, per: int, layers: int | None = None) -> int | None:
    if stage in ("draft", "draft_extend"):
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
            and stage not in ("draft", "draft_extend") and per == 1):
        dense_expected = model.first_k_dense_replace
        moe_expected = model.num_layers - dense_expected
        if moe_found != moe_expected:
            return ("layer_count_mismatch", f"found {units_found - moe_found} dense + {moe_found} MoE layers, "
                    f"model expects {dense_expected} + {moe_expected}")
    return "ok", ""


def _kernel_cut(step: Step, sig: Signature) -> tuple[LayerCut, str]:
    """From the kernels alone: the signature's template, or (generic) the structure of the layers."""
    if not sig.generic:
        return cut_by_template(step.kernels, sig), "signature"
    cut = cut_structural(step.kernels)
    if cut is not None:
        return cut, "structure"
    return cut_generic(step.kernels, sig), "generic"


class _RangeSource:
    """The rank's own ranges, built once: module ranges (standard roles or the signature's map),
    and `group.module` annotations."""

    def __init__(self, trace: RankTrace, sig: Signature):
        self.sig = sig
        self.launches = trace.launch_by_correlation()
        self.legacy = ModuleIndex(trace.module_ranges) if sig.module_ranges and trace.module_ranges else None
        self.namer = None
        if sig.module_ranges is None and trace.module_ranges:
            forest = RangeForest(trace.module_ranges, trace.function_ranges, standard_map())
            namer = ModuleRoleNamer(forest)
            self.namer = namer if namer.names_layers() else None
        self.annotated = parse_annotations(trace.cpu_annotations, trace.gpu_annotations)
        self._points_of: tuple[Step, list] | None = None

    def __bool__(self) -> bool:
        return self.legacy is not None or self.namer is not None

    def _points(self, step: Step) -> list:
        """Where the step's kernels were launched: computed once per step, for the roles and the annotations."""
        if self._points_of is None or self._points_of[0] is not step:
            self._points_of = (step, launch_points(step.kernels, self.launches))
        return self._points_of[1]

    def cut(self, step: Step) -> LayerCut | None:
        if self.legacy is not None:
            slots = slots_from_module_ranges(step.kernels, self.launches, self.sig.module_ranges, self.legacy)
            return LayerCut.counted(slots) if slots is not None else None
        layers, roles, rules = roles_from_ranges(step.kernels, self._points(step), self.namer)
        slots, moe_layers = slots_from_roles(step.kernels, layers, roles, rules)
        if slots is None:
            return None
        found = layer_units(slots)
        return LayerCut(slots, found, f"{found} layers by module ranges ({moe_layers} MoE, {found - moe_layers} dense)",
                        moe_layers=moe_layers)

    def annotations(self, step: Step):
        """Per kernel, the row a `group.module` annotation gives it; None when the rank has none."""
        if self.annotated is None:
            return None
        return annotated_rows(step.kernels, self._points(step), self.annotated)


def attribute_rank(
    trace: RankTrace,
    sig: Signature,
    model: ModelSpec | None,
    options: RankOptions,
    capture: CaptureMap | None = None,
    captures: list[Capture] | None = None,
) -> tuple[list[KernelRow], list[StepRow]]:
    """`capture`: a signature's own map over a capture trace (names aligned); `captures`: capture
    traces named by the standard roles. What a capture could not do is added to options.notes."""
    per = 2 if options.tbo else 1
    capture_reasons: dict[str, int] = {}
    replay_steps = 0
    ranges = _RangeSource(trace, sig)
    use_ranges = options.attribution in ("auto", "modules") and bool(ranges)
    kernel_rows: list[KernelRow] = []
    step_rows: list[StepRow] = []
    for step in segment_steps(trace, options.step_gap_us, use_modules=options.attribution != "template"):
        cut, how = None, ""
        if use_ranges:
            cut = ranges.cut(step)
            how = "module_range" if cut is not None else ""
            if cut is not None and sig.module_ranges is not None and not sig.generic:
                # Where the template agrees on group and module, keep its (shorter) kernel label.
                template = cut_by_template(step.kernels, sig)
                for named, by_template in zip(cut.slots, template.slots):
                    if (named.group, named.module) == (by_template.group, by_template.module):
                        named.kernel = by_template.kernel
        # which kernels a CUDA graph replayed: only the capture traces need it
        replayed = ([i for i, k in enumerate(step.kernels) if k.launcher in GRAPH_LAUNCHERS]
                    if capture is not None or captures is not None else [])
        replay_steps += bool(replayed)
        if cut is None and options.attribution == "auto" and capture is not None:
            if replayed:
                capture_slots, _matched = slots_from_capture(step.kernels, capture)
                if capture_slots is not None:
                    cut = LayerCut.counted(capture_slots)
                    how = "capture"
        capture_note = ""
        if cut is None and options.attribution != "template" and captures is not None and replayed:
            match = map_capture(step.kernels, replayed, captures, step.batch_size)
            if match.slots is not None:
                cut = LayerCut.counted(match.slots, match.note, moe_layers=match.moe_layers)
                how = "capture"
            else:
                capture_reasons[match.note] = capture_reasons.get(match.note, 0) + 1
                capture_note = f"capture trace not used: {match.note}"
        if cut is None:
            cut, how = _kernel_cut(step, sig)
        if options.attribution != "template":
            apply_annotations(cut.slots, ranges.annotations(step))
        slots = cut.slots
        units_found = cut.units_found
        if options.attribution == "modules" and how != "module_range":
            how = f"{how} (no module ranges)"
        stage = step.stage
        if model is not None and model.mtp_layers and stage == "decode" and units_found == model.mtp_layers * per:
            stage = "draft"
        expected = _expected_units(stage, model, per, options.layers)
        status, mismatch = _layer_check(units_found, expected, cut.moe_layers, stage, model, options, per)
        exposed = exposed_durations(step.kernels)
        rank = trace.rank.label
        layer_kernels = []
        run, index = options.run, step.index
        for kernel, slot, exposed_us in zip(step.kernels, slots, exposed):
            in_layer = slot.section == SECTION_LAYER
            if in_layer:
                layer_kernels.append(kernel)
            # positional, in KernelRow's field order (the hottest constructor of the analysis)
            kernel_rows.append(KernelRow(
                run, rank, index, stage, slot.section,
                slot.unit // per if in_layer else -1, slot.unit % per if in_layer else 0,
                slot.group, slot.module, slot.kernel, kernel.name, kernel.stream,
                kernel.start_us, kernel.dur_us, exposed_us, slot.source, slot.role, slot.rule,
            ))
        note = f"attributed by {how}"
        if cut.detail:
            note += f"; {cut.detail}"
        if capture_note:
            note += f"; {capture_note}"
        if mismatch:
            note += f"; {mismatch}"
        step_rows.append(
            StepRow(
                run=options.run,
                rank=rank,
                step=step.index,
                stage=stage,
                start_us=step.start_us,
                end_us=step.end_us,
                step_us=wall_span_us(step.kernels),
                layers_us=wall_span_us(layer_kernels),
                busy_us=sum(k.dur_us for k in step.kernels),
                exposed_us=sum(exposed),
                kernels=len(step.kernels),
                layers_found=units_found // per if per > 1 else units_found,
                layers_expected=expected // per if expected is not None else None,
                status=status,
                segmented_by=step.segmented_by,
                batch_size=step.batch_size,
                note=note,
                moe_layers_found=cut.moe_layers,
            )
        )
    for reason, count in capture_reasons.items():
        options.notes.append(f"capture trace not used for {count} of {len(step_rows)} steps: {reason}")
    if captures is not None and not replay_steps:
        options.notes.append("capture trace given, but no step replays a CUDA graph (an eager trace names its "
                             "kernels by its own ranges): not used")
    return kernel_rows, step_rows
