"""Namer: the trace's own nn.Module ranges (eager traces recorded with stacks).

The standard module map (module_map.yaml) names roles for every model; a signature that brings
its own `module_ranges` map (the embedded engine's) is read by that map instead, and where its
template agrees on group and module the template's shorter kernel label is kept."""
from __future__ import annotations

from msgspec.structs import replace

from analysis.attribution.layers import LayerCut, cut_by_template, layer_units
from analysis.attribution.module_attribution import ModuleIndex, slots_from_module_ranges
from analysis.attribution.module_roles import (
    ModuleRoleNamer,
    RangeForest,
    roles_from_ranges,
    slots_from_roles,
    standard_map,
)
from analysis.attribution.namers import Namer, Naming
from analysis.attribution.two_batch import TWO_BATCH_WHY_NOT
from analysis.attribution.two_batch_steps import step_two_batch_order
from analysis.attribution.namers.launch_points import LaunchPoints
from analysis.attribution.signature import Signature
from analysis.attribution.steps import Step
from analysis.ingest.trace_model import RankTrace

HOW = "module_range"


class ModuleRangeNamer(Namer):
    def __init__(self, trace: RankTrace, sig: Signature, points: LaunchPoints):
        self.sig = sig
        self.points = points
        self.own_map = ModuleIndex(trace.module_range_tree()) if sig.module_ranges and trace.module_ranges else None
        self.namer = None
        if sig.module_ranges is None and trace.module_ranges:
            namer = ModuleRoleNamer(RangeForest(trace.module_ranges, trace.function_ranges, standard_map()))
            self.namer = namer if namer.names_layers() else None  # no layer range: nothing to name

    def __bool__(self) -> bool:
        return self.own_map is not None or self.namer is not None

    def name(self, step: Step) -> Naming:
        if step_two_batch_order(step) is not None:
            # SGLang runs a TBO step's MoE layers through its operation scheduler, not the decoder
            # layer's forward: their layer and attention module ranges are missing (two_batch.py)
            return Naming(None, why_not=TWO_BATCH_WHY_NOT)
        cut = self._cut(step)
        if cut is not None and self.sig.module_ranges is not None and not self.sig.generic:
            # Where the template agrees on group and module, keep its (shorter) kernel label.
            template = cut_by_template(step.kernels, self.sig)
            for i, (named, by_template) in enumerate(zip(cut.slots, template.slots)):
                if (named.group, named.module) == (by_template.group, by_template.module):
                    cut.slots[i] = replace(named, kernel=by_template.kernel)
        return Naming(cut, HOW if cut is not None else "")

    def _cut(self, step: Step) -> LayerCut | None:
        if self.own_map is not None:
            slots = slots_from_module_ranges(step.kernels, self.points.of(step), self.sig.module_ranges,
                                             self.own_map)
            return LayerCut.counted(slots) if slots is not None else None
        layers, roles, rules, paths = roles_from_ranges(step.kernels, self.points.of(step), self.namer)
        slots, moe_layers = slots_from_roles(step.kernels, layers, roles, rules, paths)
        if slots is None:
            return None
        found = layer_units(slots)
        return LayerCut(slots, found, f"{found} layers by module ranges ({moe_layers} MoE, {found - moe_layers} dense)",
                        moe_layers=moe_layers)
