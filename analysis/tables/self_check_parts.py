"""What the self-checks read from one rank's rows, reduced to a small picklable part per rank, and
the functions that judge and describe what a part holds.

Why: every self-check but the layer count, the stage labels and the profiler's overhead looks at one
rank's kernels at a time; only its verdict needs every rank. With several ranks, each rank's worker
process reduces its own rows to a RankChecks beside the other workers (from its columns:
analysis/tables/self_check_columns.py), and the parent judges from the parts instead of walking every
rank's rows again on one core (analysis/tables/self_checks.py judges; tests/test_reference_outputs.py
holds the checks.csv of every bundled trace).

A part is made for one stage (the table's) and one --strict: the parent makes it again from the
rows when the table's stage turns out to be another than the one a worker guessed from its rank.
"""
from __future__ import annotations

import functools
import math
import operator
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from analysis.attribution.chain import ANCHOR_CLASSES, main_chain
from analysis.ingest.kernel_classes import class_of_name, class_test
from analysis.attribution.rows import SECTION_LAYER, SECTION_SIDE, KernelRow, StepRow
from analysis.tables.shown_names import shown_names

_MOE_GROUPS = frozenset({"moe", "combine/share overlap"})
_MOE_MODULES = frozenset({"router", "topk", "shared_experts"})
_NOT_ROUTED = frozenset({"dispatch", "combine"})
_SHARED = "shared_experts"
_COMMUNICATION = "communication"
_COLLECTIVE_CLASS = "allreduce"
_ATTENTION_CORE = "attn_core"
_INF = float("inf")
_BY_START = operator.attrgetter("start_us")


@dataclass
class RankChecks:
    """One rank's share of every per-rank self-check, for the table's stage (see the module's doc)."""

    rank: str
    stage: str
    strict: bool
    # layer_kernel_sequence: layers compared, outliers (rank, kind, step, layer), the first outlier's difference
    sequence_layers: int = 0
    sequence_outliers: list[tuple[str, str, int, int]] = field(default_factory=list)
    sequence_first_difference: str = ""
    # layer_time: layers compared; outliers ((rank, kind), place among the rank's used steps, outlier)
    time_layers: int = 0
    time_outliers: list[tuple] = field(default_factory=list)
    # after_layers: used steps, those with nothing after the layers, the first failure's reason ("" if none)
    used_steps: int = 0
    empty_after_steps: int = 0
    after_layers_failure: str = ""
    # attention_cores_in_layers: attention-core kernels, those outside layers, the first one outside
    cores: int = 0
    cores_outside: int = 0
    first_core_outside: str = ""
    # routed_vs_shared_experts: busy us summed over the used steps, and each step's routed / shared ratio
    routed_us: float = 0.0
    shared_us: float = 0.0
    routed_to_shared: list[float] = field(default_factory=list)
    # step_time_shares: busy us of the used steps, summed in row order
    busy_us: float = 0.0
    in_layers_us: float = 0.0
    other_us: float = 0.0
    unattributed_us: float = 0.0
    waiting_us: float = 0.0
    # kernel_durations: kernels looked at, how many are bad, the first three reasons
    duration_kernels: int = 0
    bad_durations: int = 0
    first_bad_durations: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- layer_kernel_sequence


def _main_stream(rows: list[KernelRow]) -> int:
    counts = Counter(r.stream for r in rows)
    return max(counts, key=lambda s: (counts[s], -s))


def _on_chain(rows: list[KernelRow]) -> set[int]:
    """Positions of the rows on the step's chain across streams (analysis/attribution/chain.py),
    as the structural attribution reads it: layers may hop streams in a graph replay. Copies off the
    step's threads (section side) are not the step's and never on its chain."""
    if any(r.section == SECTION_SIDE for r in rows):
        at = [i for i, r in enumerate(rows) if r.section != SECTION_SIDE]
        return {at[j] for j in _on_chain([rows[i] for i in at])}
    if len({r.stream for r in rows}) > 1:
        is_anchor = class_test(ANCHOR_CLASSES)
        return set(main_chain([r.start_us for r in rows], [r.start_us + r.busy_us for r in rows],
                              [r.stream for r in rows], [is_anchor[r.kernel_name] for r in rows]))
    main = _main_stream(rows)
    return {i for i, r in enumerate(rows) if r.stream == main}


@functools.lru_cache(maxsize=4096)
def without_repeats(seq: tuple[str, ...]) -> tuple[str, ...]:
    """The sequence with every block that directly repeats itself kept once: (a b c)(a b c) -> (a b c).
    Why: a loop over the experts that got tokens runs its GEMMs as many times as there were such
    experts, which differs from layer to layer; the layer computes the same."""
    out = list(seq)
    changed = True
    while changed:
        changed = False
        for size in range(1, len(out) // 2 + 1):
            i = 0
            while i + 2 * size <= len(out):
                if out[i:i + size] == out[i + size:i + 2 * size]:
                    del out[i + size:i + 2 * size]
                    changed = True
                else:
                    i += 1
    return tuple(out)


def _trimmed(seq: tuple[str, ...]) -> tuple[str, ...]:
    """A layer's classes without the collectives it ends with: the gather before the model's final norm
    closes the last layer, where the same gather opens every other layer's successor."""
    end = len(seq)
    while end and seq[end - 1] == _COLLECTIVE_CLASS:
        end -= 1
    return seq[:end]


def _first_difference(seq: tuple[str, ...], usual: tuple[str, ...], rows: list[KernelRow]) -> str:
    """Where the layer's classes first differ from its kind's usual ones, naming the kernel there."""
    i = next((i for i, (a, b) in enumerate(zip(seq, usual)) if a != b), min(len(seq), len(usual)))
    got = seq[i] if i < len(seq) else "(end)"
    want = usual[i] if i < len(usual) else "(end)"
    example = next((r for r in sorted(rows, key=_BY_START) if class_of_name(r.kernel_name) == got), None)
    kernel = (f" ({shown_names([example.kernel])[example.kernel]}, {example.busy_us:.1f} us, "
              f"named {example.group} / {example.module})"
              if example is not None else "")
    return f"has {got}{kernel} where the others have {want} (class {i + 1} of {len(usual)})"


def judge_sequences(part: RankChecks, seen: dict, rows_of) -> None:
    """The layers that differ from their kind's usual sequence (`seen`: (kind, previous kind, own step)
    -> sequence -> [(step, layer)]); rows_of(step, layer): that layer's rows on the chain, read only
    for the first outlier's difference."""
    outliers = []
    for (kind, _previous, _own), sequences in seen.items():
        usual = max(sequences, key=lambda q: len(sequences[q]))
        for seq, where in sequences.items():
            if seq != usual:
                outliers.extend((step, layer, kind, seq, usual) for step, layer in where)
    part.sequence_layers = sum(len(w) for seqs in seen.values() for w in seqs.values())
    part.sequence_outliers = [(part.rank, kind, step, layer) for step, layer, kind, _seq, _usual in outliers]
    if outliers:
        step, layer, _kind, seq, usual = min(outliers, key=lambda o: (o[0], o[1]))
        part.sequence_first_difference = _first_difference(seq, usual, rows_of(step, layer))


# ---------------------------------------------------------------- layer_time and after_layers


def step_layer_mixes(s: StepRow, by_step: dict) -> dict[str, list[tuple[int, dict]]]:
    """kind -> [(layer, {(group, module, kernel): busy us})] of one step, by layer: what each layer
    computes, communication left out (a collective's time is mostly waiting for other ranks, which
    differs from layer to layer for reasons outside the layer)."""
    mixes: dict[int, dict[tuple[str, str, str], float]] = {}
    moe: dict[int, bool] = {}
    layer = mix = None  # a layer's rows mostly come together: its mix is looked up once
    for r in by_step.get((s.rank, s.step), []):
        if r.section != SECTION_LAYER:
            continue
        if r.layer != layer:
            layer = r.layer
            mix = mixes.get(layer)
            if mix is None:
                mix = mixes[layer] = defaultdict(float)
                moe[layer] = False
        if not moe[layer] and (r.group in _MOE_GROUPS or r.module in _MOE_MODULES):
            moe[layer] = True
        if r.group != _COMMUNICATION and r.module not in _NOT_ROUTED:
            mix[(r.group, r.module, r.kernel)] += r.busy_us
    out: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for layer in sorted(mixes):
        out["MoE" if moe[layer] else "dense"].append((layer, mixes[layer]))
    return out


def foreign_kernels(mix: dict, others: list[dict]) -> list[tuple[tuple[str, str, str], float]]:
    """Kernels of a layer that most layers of its kind do not run, largest first."""
    counts: Counter = Counter(key for other in others for key in other)
    return sorted(((key, us) for key, us in mix.items() if counts[key] * 2 < len(others)), key=lambda kv: -kv[1])


def describe(items: list[tuple[tuple[str, str, str], float]]) -> str:
    """Kernels a message names, each as a table shows it: short, and two kernels never alike."""
    shown = shown_names(kernel for (_group, _module, kernel), _us in items)
    return ", ".join(f"{shown[kernel]} ({us:.0f} us, named {group} / {module})" for (group, module, kernel), us in items)


_NEAR = 1e-9  # relative: farther than this below the bound, a layer's compute summed in another order is too


def _layer_time(part: RankChecks, s: StepRow, place: int, layer_us: dict[str, list[tuple[int, float]]] | None,
                by_step: dict, limits: dict) -> None:
    """The step's layers whose compute is far above the median of its kind's layers in the step
    (`place`: the step's among the rank's used steps). The check sums each layer's mix of kernels
    (step_layer_mixes); summed row by row instead (`layer_us`) the times of kernels that each take
    0 us or more differ only by rounding (relative 1e-12 at most for a million kernels), so where
    every layer lies clearly below the bound, none is an outlier either way, and only a step with a
    layer near or above it has its mixes made to judge and describe it. `layer_us` None (a layer
    kernel's time negative or not a number): every kind is judged from the mixes."""
    factor, slack = float(limits["max_to_median"]), float(limits["slack_us"])
    mixes = step_layer_mixes(s, by_step) if layer_us is None else None
    for kind, members in (mixes if layer_us is None else layer_us).items():
        if len(members) < 3:  # too few layers of the kind in a step to say what is usual
            continue
        part.time_layers += len(members)
        if mixes is None:
            scaled = factor * statistics.median([us for _layer, us in members])
            bound, scale = scaled + slack, abs(scaled) + abs(slack)
            if all(us < bound - _NEAR * (abs(us) + scale) for _layer, us in members):
                continue
            mixes = step_layer_mixes(s, by_step)
        exact = mixes[kind]
        times = [sum(mix.values()) for _layer, mix in exact]
        median = statistics.median(times)
        last_layer = max(layer for layer, _mix in exact)
        for (layer, mix), t in zip(exact, times):
            if t > factor * median + slack:
                others = [m for other_layer, m in exact if other_layer != layer]
                part.time_outliers.append(((s.rank, kind), place, (s.rank, kind, s.step, layer, t, median,
                                                                    foreign_kernels(mix, others), layer == last_layer)))


def _after_layers(part: RankChecks, empty: list[StepRow], by_step: dict) -> None:
    """The rank's used steps with nothing after their layers (no kernel outside the layers starts at
    or after the first layer kernel), and why that is a failure where it is: their last layer runs
    kernels that the other layers of its kind do not."""
    part.empty_after_steps = len(empty)
    mixes: dict[str, list[tuple[int, int, dict]]] = defaultdict(list)
    for s in empty:
        for kind, members in step_layer_mixes(s, by_step).items():
            mixes[kind] += [(s.step, layer, mix) for layer, mix in members]
    for kind, layers in sorted(mixes.items()):
        last_layer = max(layer for _step, layer, _mix in layers)
        lasts = [mix for _step, layer, mix in layers if layer == last_layer]
        others = [mix for _step, layer, mix in layers if layer != last_layer]
        if not lasts or not others:
            continue
        foreign = foreign_kernels(lasts[0], others)
        if foreign:
            part.after_layers_failure = (
                f"{part.rank}: the last layer ({kind}, layer {last_layer}) holds "
                f"{describe(foreign[:2])} that no other {kind} layer has: "
                "the final norm, the LM head and sampling are likely counted in the last layer")
            return


# ---------------------------------------------------------------- the other per-rank checks


def _far_gap(rows: list, far_us: float, far_ratio: float) -> str:
    """Why a kernel lies far from the rest of its step: an idle gap inside the step longer than far_us
    and than far_ratio times the rest of the step's wall time; "" when there is none. (The real
    traces' longest: 0.46 s, 44 times the rest of a step.)"""
    if len(rows) < 2:
        return ""
    ordered = sorted(rows, key=_BY_START)
    first, end, widest, after = ordered[0].start_us, ordered[0].start_us + ordered[0].busy_us, 0.0, None
    for r in ordered[1:]:
        if r.start_us - end > widest:
            widest, after = r.start_us - end, r
        end = max(end, r.start_us + r.busy_us)
    return _far_gap_said(widest, after, (end - first) - widest, far_us, far_ratio)


def _far_gap_said(widest: float, after, rest: float, far_us: float, far_ratio: float) -> str:
    if widest > far_us and widest > far_ratio * rest:
        return (f"{after.kernel_name[:60]} lies {widest / 1e6:.3g} s from the rest of its step, which runs "
                f"{rest / 1e3:.3g} ms (an event far outside the step)")
    return ""


def bad_duration(rank: str, s: StepRow, nxt: StepRow | None, r: KernelRow, slack: float) -> str:
    """What is wrong with a kernel's duration or start in its step, or "" (`nxt`: the next step)."""
    dur = r.busy_us
    if dur is None or not isinstance(dur, (int, float)) or not math.isfinite(dur):
        return f"{rank} step {s.step}: {r.kernel_name[:60]} has duration {dur!r}"
    if dur < 0:
        return f"{rank} step {s.step}: {r.kernel_name[:60]} has duration {dur:g} us"
    if not math.isfinite(r.start_us):
        return f"{rank} step {s.step}: {r.kernel_name[:60]} has start {r.start_us!r}"
    if nxt is not None and r.start_us >= nxt.start_us:
        return (f"{rank} step {s.step}: {r.kernel_name[:60]} starts {r.start_us - nxt.start_us:.1f} us "
                f"after step {nxt.step} began (outside its step)")
    if nxt is not None and r.start_us + dur > nxt.start_us + slack:
        return (f"{rank} step {s.step}: {r.kernel_name[:60]} ({dur:g} us) runs "
                f"{r.start_us + dur - nxt.start_us:.1f} us into step {nxt.step}")
    return ""
