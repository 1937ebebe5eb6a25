"""Name kernels by the nn.Module ranges that launched them (eager traces, graph-capture traces).

A kernel's launch call (matched by correlation id; for CPU-only traces the operator itself)
happened inside nested `nn.Module: Class_N` python ranges on one thread. The innermost range
whose class the signature maps names the kernel's group and module; the enclosing decoder-layer
range gives its layer.
"""
from __future__ import annotations

import functools

from dataclasses import dataclass

from msgspec.structs import replace

from analysis.attribution.align import matching_pairs
from analysis.attribution.layers import Slot
from analysis.attribution.signature import ModuleRanges
from analysis.ingest.range_tree import RangeTree
from analysis.attribution.rows import (
    SECTION_LAYER,
    SECTION_POST,
    SECTION_PRE,
    SOURCE_CAPTURE,
    SOURCE_MODULE_RANGE,
    SOURCE_UNATTRIBUTED,
    RULE_NONE,
    UNATTRIBUTED,
)
from analysis.ingest.trace_model import Kernel, Range, RankTrace


def module_class(range_name: str) -> str:
    """'OAIAttention_3' -> 'OAIAttention' (the profiler appends an instance counter)."""
    head, sep, tail = range_name.rpartition("_")
    return head if sep and tail.isdigit() else range_name


class ModuleIndex:
    """Which module ranges enclose time t on thread tid (the rank's range tree, RankTrace.module_range_tree)."""

    def __init__(self, tree: RangeTree):
        self._tree = tree

    def __bool__(self) -> bool:
        return bool(self._tree)

    def stack_at(self, tid: int, t: float) -> list[Range]:
        """Enclosing ranges, innermost first."""
        return self._tree.enclosing(tid, t)


@dataclass
class _Named:
    group: str
    module: str
    layer_range: Range | None
    rule: str = ""  # the map entry (or the layer regex) of the signature that named it


def _name_from_stack(stack: list[Range], spec: ModuleRanges) -> _Named | None:
    named: tuple[str, str] | None = None
    rule = spec.rule
    layer_range = None
    classes = [module_class(r.name) for r in stack]
    for depth, r in enumerate(stack):
        cls = classes[depth]
        if named is None:
            for entry in spec.map:
                if not entry.regex.search(cls):
                    continue
                if entry.within_regex is not None and not any(entry.within_regex.search(c) for c in classes[depth + 1 :]):
                    continue
                named = (entry.group, entry.module)
                rule = entry.rule
                break
        if layer_range is None and spec.layer_regex.search(cls):
            layer_range = r
    if named is None and layer_range is None:
        return None
    group, module = named if named is not None else (UNATTRIBUTED, UNATTRIBUTED)
    return _Named(group, module, layer_range, rule)


def _slots_from_names(kernels: list[Kernel], names: list[_Named | None], kernel_labels: list[str], source: str) -> list[Slot] | None:
    layer_ranges = sorted({id(n.layer_range): n.layer_range for n in names if n and n.layer_range}.values(), key=lambda r: r.start_us)
    if not layer_ranges:
        return None
    unit_of = {id(r): u for u, r in enumerate(layer_ranges)}
    first_layer_start = layer_ranges[0].start_us
    slots = []
    for kernel, named, label in zip(kernels, names, kernel_labels):
        if named is not None and named.layer_range is not None:
            unit = unit_of[id(named.layer_range)]
            if named.group == UNATTRIBUTED:
                slots.append(Slot(SECTION_LAYER, unit, UNATTRIBUTED, UNATTRIBUTED, UNATTRIBUTED, SOURCE_UNATTRIBUTED,
                                  UNATTRIBUTED, RULE_NONE))
            else:
                slots.append(Slot(SECTION_LAYER, unit, named.group, named.module, label, source, named.module, named.rule))
        else:
            section = SECTION_PRE if kernel.start_us < first_layer_start else SECTION_POST
            if named is not None:
                slots.append(Slot(section, -1, named.group, named.module, label, source, named.module, named.rule))
            else:
                slots.append(Slot(section, -1, UNATTRIBUTED, UNATTRIBUTED, UNATTRIBUTED, SOURCE_UNATTRIBUTED,
                                  UNATTRIBUTED, RULE_NONE))
    # Section by position relative to the layers, on the kernel timeline.
    first_layer_kernel = min((k.start_us for k, s in zip(kernels, slots) if s.section == SECTION_LAYER), default=None)
    if first_layer_kernel is not None:
        for i, (kernel, slot) in enumerate(zip(kernels, slots)):
            if slot.section != SECTION_LAYER:
                slots[i] = replace(slot, section=SECTION_PRE if kernel.start_us < first_layer_kernel else SECTION_POST)
    return slots


def kernel_label(kernel: Kernel) -> str:
    """The D4 kernel column for a kernel: its whole name; a CPU operator's is its top-level call's
    (aten::linear for the aten::t and aten::mm inside it), so a CPU table has one row per call."""
    return name_label(kernel.root or kernel.name)


@functools.lru_cache(maxsize=100_000)
def name_label(kernel_name: str) -> str:
    """The D4 kernel column for a kernel name: the whole name, so that two kernels never share a row
    (a cut prefix put every at::native::vectorized_elementwise_kernel<...> variant in one). Only a
    leading `void ` goes: every kernel returns void and the demangler prints a return type only for a
    function template instantiation, whose name ends in `<...>` before its parameters as no other
    function's does, so no two names meet. Shortened only where shown (analysis/tables/shown_names.py).
    Cached: one string per name, however many rows carry it."""
    return kernel_name[5:] if kernel_name.startswith("void ") else kernel_name


def slots_from_module_ranges(kernels: list[Kernel], points: list[tuple[int, float] | None], spec: ModuleRanges,
                             index: ModuleIndex) -> list[Slot] | None:
    """Slots for a step's kernels from the trace's own module ranges, or None if none enclose them;
    `points`: where each kernel was launched (module_roles.launch_points)."""
    names = [_name_from_stack(index.stack_at(*point) if point is not None else [], spec) for point in points]
    return _slots_from_names(kernels, names, [name_label(k.name) for k in kernels], SOURCE_MODULE_RANGE)


@dataclass
class CaptureMap:
    """Kernels launched while a CUDA graph was captured, in launch order, with their module names."""

    kernel_names: list[str]
    named: list[_Named | None]


def build_capture_map(capture: RankTrace, spec: ModuleRanges) -> CaptureMap:
    index = ModuleIndex(capture.module_range_tree())
    names, named = [], []
    for launch in capture.launches:
        if not launch.kernel_name:
            continue
        names.append(launch.kernel_name)
        named.append(_name_from_stack(index.stack_at(launch.tid, launch.start_us), spec))
    return CaptureMap(names, named)


def slots_from_capture(kernels: list[Kernel], capture: CaptureMap) -> tuple[list[Slot] | None, int]:
    """Map replayed kernels onto the capture's launches by position (order-preserving match).

    Returns the slots (None if too little matched) and the number of replayed kernels matched.
    """
    mapped: list[_Named | None] = [None] * len(kernels)
    pairs = matching_pairs([k.name for k in kernels], capture.kernel_names)
    for i, j in pairs:
        mapped[i] = capture.named[j]
    matched = len(pairs)
    if matched < 0.5 * len(kernels):
        return None, matched
    slots = _slots_from_names(kernels, mapped, [name_label(k.name) for k in kernels], SOURCE_CAPTURE)
    return slots, matched
