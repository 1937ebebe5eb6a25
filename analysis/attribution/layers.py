"""Split a step's kernels into layers and name each kernel's group / module.

Two ways, both order-based:
- template: the signature's anchor kernel cuts the main stream into regions and each region is
  aligned against the template (see docs/signatures.md);
- generic: with no template, the layer count is found from the period of the repeating kernel
  sequence, and kernels are named by kernel family.
Side-stream kernels join the layer whose main-stream span holds their start.
"""
from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass

import msgspec

from analysis.attribution.align import align, align_scored
from analysis.attribution.signature import Entry, Signature
from analysis.attribution.rows import (
    SECTION_LAYER,
    SECTION_POST,
    SECTION_PRE,
    SOURCE_GENERIC,
    SOURCE_SIGNATURE,
    SOURCE_UNATTRIBUTED,
    RULE_NONE,
    UNATTRIBUTED,
)
from analysis.ingest.trace_model import Kernel


OUTSIDE_WEIGHT = 0.02  # pre/post catch-alls score less than any layer entry in the alignment


class Slot(msgspec.Struct, frozen=True, gc=False):
    """Where one kernel sits: section, layer unit, and the name the attribution gave it. A struct:
    made once per kernel of every step not named before. Frozen: a plan's slots are shared by its
    steps, and the kernel columns code each slot by its value (kernel_columns.py); changed with
    msgspec.structs.replace."""

    section: str
    unit: int  # layer unit: layer * units_per_layer + micro_batch; -1 outside layers
    group: str
    module: str
    kernel: str
    source: str
    role: str = ""  # the namer's role for the kernel (KernelRow.role)
    rule: str = ""  # the entry or rule that decided (KernelRow.rule)
    module_path: str = ""  # the module calls around the launch (KernelRow.module_path), module ranges only


def _unattributed(section: str, unit: int) -> Slot:
    return Slot(section, unit, UNATTRIBUTED, UNATTRIBUTED, UNATTRIBUTED, SOURCE_UNATTRIBUTED, UNATTRIBUTED, RULE_NONE)


def _named(section: str, unit: int, entry: Entry, source: str = SOURCE_SIGNATURE) -> Slot:
    return Slot(section, unit, entry.group, entry.module, entry.kernel, source, entry.module, entry.rule)


def main_stream(kernels: list[Kernel]) -> int:
    counts = Counter(k.stream for k in kernels)
    return max(counts, key=lambda s: (counts[s], -s))


@dataclass
class LayerCut:
    """Result of cutting one step: a slot per kernel (same order as the step's kernels)."""

    slots: list[Slot]
    units_found: int
    detail: str = ""
    moe_layers: int | None = None  # layers with experts, where the cut can tell
    chain: list[int] | None = None  # positions of the step's chain across streams, where the cut read one
    # unit -> (layer, micro-batch) where units are not layers (two-batch overlap: two_batch.py); None: unit = layer
    unit_layers: dict[int, tuple[int, int]] | None = None

    @classmethod
    def counted(cls, slots: list[Slot], detail: str = "", moe_layers: int | None = None) -> LayerCut:
        """A cut whose layer count is the number of layer units its slots hold."""
        return cls(slots, layer_units(slots), detail, moe_layers)


def layer_units(slots: list[Slot]) -> int:
    """How many distinct layer units the slots hold."""
    return len({s.unit for s in slots if s.section == SECTION_LAYER})


def _assign_region(
    region: list[int],
    names: list[str],
    before: list[Entry],
    before_unit: int,
    before_section: str,
    after: list[Entry],
    after_unit: int,
    after_section: str,
    slots: list[Slot | None],
    unmatched_tail_section: str | None = None,
) -> None:
    """Align kernels `region` (indices) against before+after; fill their slots."""
    names_here = [names[i] for i in region]
    best: tuple[float, list[int | None], list[Entry], list[Entry]] | None = None
    # A layer is dense or MoE, never both: try each kind for each side, keep the best alignment.
    for before_kind in _kinds(before):
        for after_kind in _kinds(after):
            b = [e for e in before if e.in_layers in ("all", before_kind)]
            a = [e for e in after if e.in_layers in ("all", after_kind)]
            weights = [_section_weight(e, before_section) for e in b] + [_section_weight(e, after_section) for e in a]
            score, matched = align_scored(names_here, [*b, *a], weights)
            if best is None or score > best[0]:
                best = (score, matched, b, a)
    _score, matched, before, after = best
    split = len(before)
    first_after = next((p for p, m in enumerate(matched) if m is not None and m >= split), None)
    last_before = max((p for p, m in enumerate(matched) if m is not None and m < split), default=None)
    for pos, kernel_index in enumerate(region):
        entry_index = matched[pos]
        if entry_index is not None and entry_index < split:
            slots[kernel_index] = _named(before_section, before_unit, before[entry_index])
        elif entry_index is not None:
            slots[kernel_index] = _named(after_section, after_unit, after[entry_index - split])
        elif first_after is not None and pos > first_after:
            slots[kernel_index] = _unattributed(after_section, after_unit)
        elif (
            unmatched_tail_section is not None
            and first_after is None
            and (last_before is None or pos > last_before)
        ):
            slots[kernel_index] = _unattributed(unmatched_tail_section, -1)
        else:
            slots[kernel_index] = _unattributed(before_section, before_unit)


def _section_weight(entry: Entry, section: str) -> float:
    """Hand-written pre/post catch-alls yield to layer entries; learned (weighted) ones compete."""
    return OUTSIDE_WEIGHT if section != SECTION_LAYER and entry.weights is None else 1.0


def _kinds(entries: list[Entry]) -> list[str]:
    kinds = {e.in_layers for e in entries} - {"all"}
    return sorted(kinds) or ["all"]


def cut_by_template(kernels: list[Kernel], sig: Signature) -> LayerCut:
    main = main_stream(kernels)
    main_idx = [i for i, k in enumerate(kernels) if k.stream == main]
    names = [k.name for k in kernels]
    anchor = sig.layer[sig.anchor_index]
    head, tail = sig.layer[: sig.anchor_index], sig.layer[sig.anchor_index + 1 :]
    anchors = [i for i in main_idx if anchor.matches(names[i])]
    slots: list[Slot | None] = [None] * len(kernels)
    if not anchors:
        for i in range(len(kernels)):
            slots[i] = _unattributed(SECTION_PRE, -1)
        return LayerCut([s for s in slots if s is not None], 0, "no anchor kernel found")
    pos_of = {k: p for p, k in enumerate(main_idx)}
    cuts = [pos_of[a] for a in anchors]
    # First region: pre entries, then the part of layer 0 before its anchor.
    _assign_region(main_idx[: cuts[0]], names, sig.pre, -1, SECTION_PRE, head, 0, SECTION_LAYER, slots)
    for unit, cut in enumerate(cuts):
        slots[main_idx[cut]] = _named(SECTION_LAYER, unit, anchor)
        end = cuts[unit + 1] if unit + 1 < len(cuts) else len(main_idx)
        region = main_idx[cut + 1 : end]
        if unit + 1 < len(cuts):
            _assign_region(region, names, tail, unit, SECTION_LAYER, head, unit + 1, SECTION_LAYER, slots)
        else:
            _assign_region(
                region, names, tail, unit, SECTION_LAYER, sig.post, -1, SECTION_POST, slots,
                unmatched_tail_section=SECTION_POST,
            )
    _place_side(kernels, main, slots, sig.side, SOURCE_SIGNATURE)
    return LayerCut([s for s in slots if s is not None], len(anchors))


def _unit_bounds(kernels: list[Kernel], slots: list[Slot | None], main: int) -> tuple[list[float], list[int], float]:
    first: dict[int, float] = {}
    last_end = float("-inf")
    for k, slot in zip(kernels, slots):
        if k.stream != main or slot is None or slot.section != SECTION_LAYER:
            continue
        first[slot.unit] = min(first.get(slot.unit, k.start_us), k.start_us)
        last_end = max(last_end, k.end_us)
    units = sorted(first)
    return [first[u] for u in units], units, last_end


def _place_side(
    kernels: list[Kernel], main: int, slots: list[Slot | None], side: list[Entry], source: str,
    name_generic=None,
) -> None:
    starts, units, layers_end = _unit_bounds(kernels, slots, main)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, k in enumerate(kernels):
        if k.stream == main:
            continue
        pos = bisect.bisect_right(starts, k.start_us) - 1
        if pos < 0:
            slots[i] = name_generic(i, SECTION_PRE, -1) if name_generic else _unattributed(SECTION_PRE, -1)
        elif k.start_us >= layers_end:
            slots[i] = name_generic(i, SECTION_POST, -1) if name_generic else _unattributed(SECTION_POST, -1)
        else:
            groups.setdefault((units[pos], k.stream), []).append(i)
    for (unit, _stream), members in groups.items():
        if name_generic is not None:
            for i in members:
                slots[i] = name_generic(i, SECTION_LAYER, unit)
            continue
        matched = align([kernels[i].name for i in members], side)
        for i, entry_index in zip(members, matched):
            slots[i] = (
                _named(SECTION_LAYER, unit, side[entry_index], source)
                if entry_index is not None
                else _unattributed(SECTION_LAYER, unit)
            )


# A copy anchors no layer: host copies repeat in stretches without layers too (SGLang 0.5.17's EAGLE draft
# phase with DeepEP: six host-to-device copies were read as six layers; a PD prefill window's tail of
# KV-transfer copies as three).
COPY_PREFIXES = ("Memcpy", "Memset")


def find_period(names: list[str], coarse: list[str] | None = None) -> tuple[list[int], int] | None:
    """Layer starts (indices) and the layer-unit length from the repeating kernel sequence.

    The anchor is a kernel name whose occurrences cut the sequence into mostly identical segments
    (the modal segment at least 60% of them) and, among those, whose repeats span the most kernels
    (occurrences times the modal segment's length; then the higher share, then fewer occurrences):
    a kernel of every layer spans more than one of some layers only (a MoE kernel where the first
    layers are dense, which ranked first by share and left the dense layers out of the count), and
    a kernel twice a layer no more than one once a layer. The layer start is moved back from the
    anchor by as many kernels as the first two layers share before it, so the preamble (embedding,
    input prep) stays out of layer 0.

    Models that alternate layer kinds (sliding-window and full attention) repeat every two
    layers in exact names; when the repeating unit is itself periodic in `coarse` tokens (kernel
    families), it is split into its sub-periods.
    """
    counts = Counter(names)
    best: tuple[tuple[int, float, int], list[int]] | None = None
    for name, count in counts.items():
        if count < 3 or name.startswith(COPY_PREFIXES):
            continue
        positions = [i for i, n in enumerate(names) if n == name]
        segments = Counter(tuple(names[a:b]) for a, b in zip(positions, positions[1:]))
        ((segment, times),) = segments.most_common(1)
        share = round(times / (len(positions) - 1), 2)
        if share < 0.6:
            continue
        key = (count * len(segment), share, -count)
        if best is None or key > best[0]:
            best = (key, positions)
    if best is None:
        return None
    positions = best[1]
    back = 0
    limit = positions[1] - positions[0] - 1
    while back < limit and positions[0] - back - 1 >= 0 and names[positions[0] - back - 1] == names[positions[1] - back - 1]:
        back += 1
    starts = [p - back for p in positions]
    last_len = 0
    prev_len = starts[-1] - starts[-2]
    while last_len < prev_len and starts[-1] + last_len < len(names) and names[starts[-1] + last_len] == names[starts[-2] + last_len]:
        last_len += 1
    if coarse is not None:
        starts, last_len = _split_subperiods(starts, last_len, coarse)
    return starts, last_len


def _split_subperiods(starts: list[int], last_len: int, coarse: list[str]) -> tuple[list[int], int]:
    lengths = Counter(b - a for a, b in zip(starts, starts[1:]))
    unit_len = lengths.most_common(1)[0][0]
    modal = [a for a, b in zip(starts, starts[1:]) if b - a == unit_len]
    for k in (4, 3, 2):
        if unit_len % k:
            continue
        sub = unit_len // k
        if all(coarse[a + i] == coarse[a + i + sub] for a in modal for i in range(unit_len - sub)):
            ends = [*starts[1:], starts[-1] + last_len]
            split = [a + j * sub for a, b in zip(starts, ends) for j in range(k) if a + j * sub < b]
            return split, last_len - (len([j for j in range(k) if j * sub < last_len]) - 1) * sub
    return starts, last_len


def cut_generic(kernels: list[Kernel], sig: Signature, find_layers: bool = True) -> LayerCut:
    """Kernels named by family over the period of the repeating sequence (`find_layers`: look for one)."""
    main = main_stream(kernels)
    main_idx = [i for i, k in enumerate(kernels) if k.stream == main]
    names = [kernels[i].name for i in main_idx]
    slots: list[Slot | None] = [None] * len(kernels)

    def by_family(i: int, section: str, unit: int) -> Slot:
        family = sig.family_of(kernels[i].name)
        if family is None:
            return _unattributed(section, unit)
        return Slot(section, unit, family.group, family.family, family.family, SOURCE_GENERIC, family.family, family.rule)

    coarse = [(sig.family_of(n).family if sig.family_of(n) else n) for n in names]
    period = find_period(names, coarse) if find_layers else None
    if period is None:
        for i in range(len(kernels)):
            slots[i] = by_family(i, SECTION_PRE, -1)
        return LayerCut([s for s in slots if s is not None], 0, "no repeating kernel sequence found")
    starts, last_len = period
    ends = [*starts[1:], starts[-1] + last_len]
    for pos, i in enumerate(main_idx):
        if pos < starts[0]:
            slots[i] = by_family(i, SECTION_PRE, -1)
        elif pos >= ends[-1]:
            slots[i] = by_family(i, SECTION_POST, -1)
        else:
            unit = bisect.bisect_right(starts, pos) - 1
            slots[i] = by_family(i, SECTION_LAYER, unit)
    _place_side(kernels, main, slots, [], SOURCE_GENERIC, name_generic=by_family)
    return LayerCut([s for s in slots if s is not None], len(starts), f"layer period found from {len(starts)} repeats")
