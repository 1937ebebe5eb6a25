"""Self-checks run on every analysis: the table says when it is likely wrong.

Why: the attribution finds layers and names kernels by rules; where a trace breaks a rule (another
stack, kernels out of order, a graph replayed over many streams) it still produces a table, and a
table that looks fine. These checks test what must hold whatever the stack: the layer count, layers
of one kind alike, every attention core inside a layer, routed experts against the shared expert,
where the step's time went, step labels, kernel durations, the profiler's own cost against the
load. Each gives one CheckRow
(checks.csv); thresholds are data (self_checks.yaml), documented in docs/analysis.md.
"""
from __future__ import annotations

import functools
import math
import statistics
import operator
from collections import Counter, defaultdict
from pathlib import Path

import msgspec
import yaml

from analysis.attribution.chain import ANCHOR_CLASSES, main_chain
from analysis.attribution.kernel_classes import class_of_name, class_test
from analysis.attribution.rows import SECTION_LAYER, UNATTRIBUTED, KernelRow, StepRow
from analysis.attribution.steps import KNOWN_STAGES
from analysis.data_files import load_yaml
from analysis.errors import AnalysisError
from analysis.ingest.model_spec import ModelSpec
from analysis.tables.d4 import D4Column

THRESHOLDS_FILE = Path(__file__).with_name("self_checks.yaml")
PASS, FAIL, NOT_APPLICABLE = "pass", "fail", "n/a"
_MOE_GROUPS = frozenset({"moe", "combine/share overlap"})
_MOE_MODULES = frozenset({"router", "topk", "shared_experts"})
_NOT_ROUTED = frozenset({"dispatch", "combine"})
_SHARED = "shared_experts"
_COMMUNICATION = "communication"
_COLLECTIVE_CLASS = "allreduce"
# Checks of the measurement, not of the attribution: failing, they say the steps were perturbed, not
# that kernels were named wrongly.
MEASUREMENT_CHECKS = frozenset({"profiler_overhead"})
_UNKNOWN_STAGE = ("steps without a stage label may hold more than one pass (a training step's forward and backward "
                  "layers differ)")
_ATTENTION_CORE = "attn_core"
_INF = float("inf")


class CheckRow(msgspec.Struct):
    """One self-check: what was measured against what was expected, and the verdict."""

    check: str
    scope: str  # what it looked at: "TP0 decode", "all ranks, stage decode"
    value: str
    expected: str
    verdict: str  # pass | fail | n/a
    why: str = ""


@functools.lru_cache(maxsize=1)
def thresholds() -> dict:
    try:
        data = load_yaml(THRESHOLDS_FILE.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise AnalysisError(f"self-check thresholds {THRESHOLDS_FILE}: cannot read: {exc}") from exc
    return data


def run_checks(kernel_rows: list[KernelRow], step_rows: list[StepRow], column: D4Column,
               model: ModelSpec | None = None, layers: int | None = None, strict: bool = False,
               chains: dict[tuple[str, int], list[int]] | None = None) -> list[CheckRow]:
    """Every check, in a fixed order; `column` names the stage and the steps the table used.
    `chains`: per (rank, step), its chain across streams where the attribution already read it
    from the same kernels (positions in the step's rows); other steps' chains are read here."""
    limits = thresholds()
    stage = column.stage
    table_steps = [s for s in step_rows if s.stage == stage]
    used = _used_steps(step_rows, column, strict)
    by_step: dict[tuple[str, int], list[KernelRow]] = defaultdict(list)
    rank = step = bucket = None  # rows come step by step: each step's list is looked up once
    for row in kernel_rows:
        if row.step != step or row.rank != rank:
            rank, step = row.rank, row.step
            bucket = by_step[(rank, step)]
        bucket.append(row)
    checks = [*_layer_count(step_rows, stage, model, layers)]
    checks.append(_layer_sequence(table_steps, by_step, stage, limits["layer_sequence"], chains or {}))
    checks.append(_layer_time(used, by_step, stage, limits["layer_time"]))
    checks.append(_after_layers(used, by_step, stage, limits["layer_time"]))
    checks.append(_attention_cores(step_rows, by_step))
    checks.append(_expert_sizes(used, by_step, stage, model, limits["expert_sizes"]))
    checks.append(_step_time(used, by_step, stage, limits["step_time"]))
    checks.append(_stage_labels(step_rows))
    checks.append(_durations(step_rows, by_step, limits["durations"]))
    checks.append(_profiler_overhead(column, limits["profiler_overhead"]))
    return checks


def failed(checks: list[CheckRow]) -> list[CheckRow]:
    return [c for c in checks if c.verdict == FAIL]


def verdict_line(checks: list[CheckRow]) -> str:
    """One line for the table's notes: how many checks passed, and which failed with what."""
    bad = failed(checks)
    passed = sum(c.verdict == PASS for c in checks)
    skipped = sum(c.verdict == NOT_APPLICABLE for c in checks)
    head = f"self-checks: {passed} passed, {len(bad)} failed, {skipped} not applicable"
    if not bad:
        return head + " (checks.csv)"
    about_attribution = any(c.check not in MEASUREMENT_CHECKS for c in bad)
    return head + ": " + "; ".join(f"{c.check} ({c.scope}): {c.value}, expected {c.expected}" for c in bad) + \
        (" (checks.csv; the table may be wrong)" if about_attribution else
         " (checks.csv; the attribution passed its checks, but the profiled steps ran slower than the unprofiled "
         "ones: the table describes the system as the profiler slowed it)")


# ---------------------------------------------------------------- the checks


def _used_steps(step_rows: list[StepRow], column: D4Column, strict: bool) -> list[StepRow]:
    """The steps the table was built from (its stage and usable status, as build_column chose)."""
    usable = ("ok",) if strict else ("ok", "layer_count_mismatch")
    return [s for s in step_rows if s.stage == column.stage and s.status in usable]


def _layer_count(step_rows: list[StepRow], stage: str, model: ModelSpec | None, layers: int | None) -> list[CheckRow]:
    """Against the expected count where one is known (--layers, the model file), else constant
    over steps and ranks; one row for the table's stage and one per other stage with layers."""
    rows = []
    stages = [stage] + sorted({s.stage for s in step_rows if s.stage != stage and s.layers_found})
    for st in stages:
        steps = [s for s in step_rows if s.stage == st]
        if not steps:
            continue
        found = Counter(s.layers_found for s in steps)
        value = ", ".join(f"{n} layers in {c} step(s)" for n, c in sorted(found.items()))
        expected = {s.layers_expected for s in steps if s.layers_expected is not None}
        scope = f"stage {st}, {len(steps)} steps, {len({s.rank for s in steps})} rank(s)"
        if expected:
            source = "--layers" if layers is not None and st not in ("draft", "draft_extend") else (
                f"model {model.name}" if model is not None else "expected")
            off = [s for s in steps if s.layers_expected is not None and s.layers_found != s.layers_expected]
            wrong_split = [s for s in steps if s.status == "layer_count_mismatch" and s not in off]
            bad = off + wrong_split
            want = "/".join(str(n) for n in sorted(expected))
            why = ""
            if bad:
                first = bad[0]
                why = f"{len(bad)} step(s) off, first {first.rank} step {first.step}: {first.note.split('; ')[-1]}"
            rows.append(CheckRow("layer_count", scope, value, f"{want} ({source})", FAIL if bad else PASS, why))
        else:
            rows.append(CheckRow(
                "layer_count", scope, value, "the same count in every step and rank (no --layers or --model)",
                FAIL if len(found) > 1 else PASS,
                "" if len(found) <= 1 else "steps of one stage ran the same model, so they hold as many layers; "
                "give --layers or --model to say which count is right"))
    if not rows:
        rows.append(CheckRow("layer_count", "all steps", "no steps", "layers", NOT_APPLICABLE, "no steps"))
    return rows


def _main_stream(rows: list[KernelRow]) -> int:
    counts = Counter(r.stream for r in rows)
    return max(counts, key=lambda s: (counts[s], -s))


def _layer_kind(rows: list[KernelRow]) -> str:
    return "MoE" if any(r.group in _MOE_GROUPS or r.module in _MOE_MODULES for r in rows) else "dense"


def _on_chain(rows: list[KernelRow]) -> set[int]:
    """Positions of the rows on the step's chain across streams (analysis/attribution/chain.py),
    as the structural attribution reads it: layers may hop streams in a graph replay."""
    if len({r.stream for r in rows}) > 1:
        is_anchor = class_test(ANCHOR_CLASSES)
        return set(main_chain([r.start_us for r in rows], [r.start_us + r.busy_us for r in rows],
                              [r.stream for r in rows], [is_anchor[r.kernel_name] for r in rows]))
    main = _main_stream(rows)
    return {i for i, r in enumerate(rows) if r.stream == main}


_BY_START = operator.attrgetter("start_us")


def _class_sequence(rows: list[KernelRow], ignore: frozenset[str]) -> tuple[str, ...]:
    """The kernel classes of one layer's chain rows in order. Shared-expert kernels are left out:
    they run beside the router and the routed experts, so where they fall is a matter of timing."""
    return _classes_of_names(tuple([r.kernel_name for r in sorted(rows, key=_BY_START) if r.module != _SHARED]), ignore)


@functools.lru_cache(maxsize=4096)
def _classes_of_names(names: tuple[str, ...], ignore: frozenset[str]) -> tuple[str, ...]:
    """_class_sequence of the names (cached: the layers of a decode run repeat a few sequences)."""
    return _without_repeats(tuple(c for c in map(class_of_name, names) if c not in ignore))


@functools.lru_cache(maxsize=4096)
def _without_repeats(seq: tuple[str, ...]) -> tuple[str, ...]:
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


def _layer_sequence(steps: list[StepRow], by_step: dict, stage: str, limits: dict,
                    chains: dict[tuple[str, int], list[int]]) -> CheckRow:
    """Layers of one kind carry the same sequence of kernel classes; the outliers are named."""
    ignore = frozenset(limits.get("ignore_classes") or ())
    allowed = int(limits["max_outlier_layers"])
    # (rank, kind) -> sequence -> [(step, layer)]
    seen: dict[tuple[str, str, str], dict[tuple[str, ...], list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
    where_rows: dict[tuple[str, int, int], list[KernelRow]] = {}
    for s in steps:
        rows = by_step.get((s.rank, s.step), [])
        known = chains.get((s.rank, s.step))
        chain = set(known) if known is not None else (_on_chain(rows) if rows else set())
        layer_rows: dict[int, list[KernelRow]] = {}
        kinds: dict[int, list[KernelRow]] = {}
        layer = members = on_chain = None  # a layer's rows mostly come together: look its lists up once
        for i, r in enumerate(rows):
            if r.section == SECTION_LAYER:
                if r.layer != layer:
                    layer = r.layer
                    members = kinds.get(layer)
                    if members is None:
                        members = kinds[layer] = []
                        on_chain = layer_rows[layer] = []
                    else:
                        on_chain = layer_rows[layer]
                members.append(r)
                if i in chain:
                    on_chain.append(r)
        previous = "none"
        for layer in sorted(kinds):
            kind = _layer_kind(kinds[layer])
            # a layer's prologue depends on the layer before it (after a MoE layer the tokens are
            # gathered from the expert-parallel ranks first): layers compare with those of the same
            # kind after the same kind
            key = (s.rank, kind, previous)
            seen[key][_trimmed(_class_sequence(layer_rows[layer], ignore))].append((s.step, layer))
            where_rows[(s.rank, s.step, layer)] = layer_rows[layer]
            previous = kind
    scope = f"stage {stage}"
    if stage == "unknown":
        return CheckRow("layer_kernel_sequence", scope, "not compared", "layers alike", NOT_APPLICABLE, _UNKNOWN_STAGE)
    if not seen:
        return CheckRow("layer_kernel_sequence", scope, "no layers", "layers", NOT_APPLICABLE, "no step holds layers")
    outliers = []
    for (rank, kind, _previous), sequences in sorted(seen.items()):
        usual = max(sequences, key=lambda q: len(sequences[q]))
        for seq, where in sequences.items():
            if seq != usual:
                outliers.extend((rank, kind, step, layer, seq, usual) for step, layer in where)
    total = sum(len(w) for seqs in seen.values() for w in seqs.values())
    value = f"{len(outliers)} of {total} layers differ from their kind's usual sequence"
    expected = f"at most {allowed}"
    if len(outliers) <= allowed:
        return CheckRow("layer_kernel_sequence", scope, value, expected, PASS)
    rank, kind, step, layer, seq, usual = sorted(outliers, key=lambda o: (o[0], o[2], o[3]))[0]
    diff = _first_difference(seq, usual, where_rows.get((rank, step, layer), []))
    named = ", ".join(f"{o[0]} step {o[2]} layer {o[3]}" for o in sorted(outliers, key=lambda o: (o[0], o[2], o[3]))[:5])
    why = (f"outlier layers: {named}{' ...' if len(outliers) > 5 else ''}; {rank} step {step} {kind} layer {layer} "
           f"{diff} (a layer border or a role is likely misplaced)")
    return CheckRow("layer_kernel_sequence", scope, value, expected, FAIL, why)


def _step_layer_mixes(s: StepRow, by_step: dict) -> dict[str, list[tuple[int, dict]]]:
    """kind -> [(layer, {(group, module, kernel): busy us})] of one step, by layer: what each layer
    computes, communication left out (a collective's time is mostly waiting for other ranks, which
    differs from layer to layer for reasons outside the layer)."""
    layers: dict[int, list[KernelRow]] = defaultdict(list)
    for r in by_step.get((s.rank, s.step), []):
        if r.section == SECTION_LAYER:
            layers[r.layer].append(r)
    out: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for layer, rows in sorted(layers.items()):
        mix: dict[tuple[str, str, str], float] = defaultdict(float)
        for r in rows:
            if r.group != _COMMUNICATION and r.module not in _NOT_ROUTED:
                mix[(r.group, r.module, r.kernel)] += r.busy_us
        out[_layer_kind(rows)].append((layer, mix))
    return out


def _layer_mixes(used: list[StepRow], by_step: dict) -> dict[tuple[str, str], list[tuple[int, int, dict]]]:
    """(rank, kind) -> [(step, layer, mix)] of the steps (_step_layer_mixes), in their order."""
    out: dict[tuple[str, str], list[tuple[int, int, dict]]] = defaultdict(list)
    for s in used:
        for kind, members in _step_layer_mixes(s, by_step).items():
            out[(s.rank, kind)] += [(s.step, layer, mix) for layer, mix in members]
    return out


def _foreign_kernels(mix: dict, others: list[dict]) -> list[tuple[tuple[str, str, str], float]]:
    """Kernels of a layer that most layers of its kind do not run, largest first."""
    counts: Counter = Counter(key for other in others for key in other)
    return sorted(((key, us) for key, us in mix.items() if counts[key] * 2 < len(others)), key=lambda kv: -kv[1])


def _describe(key: tuple[str, str, str], us: float) -> str:
    group, module, kernel = key
    return f"{kernel[:60]} ({us:.0f} us, named {group} / {module})"


def _layer_time(used: list[StepRow], by_step: dict, stage: str, limits: dict) -> CheckRow:
    """A layer whose compute (communication left out) is far above the median of its kind's layers,
    with the kernels that make it so: a layer border in the wrong place (the LM head counted in the
    last layer) shows here before anywhere else."""
    factor, slack = float(limits["max_to_median"]), float(limits["slack_us"])
    scope = f"stage {stage}"
    if stage == "unknown":
        return CheckRow("layer_time", scope, "not compared", "layers alike", NOT_APPLICABLE, _UNKNOWN_STAGE)
    found = []  # ((rank, kind), the step's place in `used`, the outlier): sorted as (rank, kind) then step
    total = 0
    for place, s in enumerate(used):  # one step's layers at a time: never every layer's mix at once
        for kind, members in _step_layer_mixes(s, by_step).items():
            if len(members) < 3:  # too few layers of the kind in a step to say what is usual
                continue
            times = [sum(mix.values()) for _layer, mix in members]
            median = statistics.median(times)
            total += len(members)
            last_layer = max(layer for layer, _mix in members)
            for (layer, mix), t in zip(members, times):
                if t > factor * median + slack:
                    others = [m for other_layer, m in members if other_layer != layer]
                    found.append(((s.rank, kind), place, (s.rank, kind, s.step, layer, t, median,
                                                          _foreign_kernels(mix, others), layer == last_layer)))
    found.sort(key=lambda f: (f[0], f[1]))  # stable: a step's layers stay in layer order
    outliers = [outlier for _kind, _place, outlier in found]
    if not total:
        return CheckRow("layer_time", scope, "no kind with 3 layers in a step", "layers alike", NOT_APPLICABLE,
                        "too few layers of one kind to compare")
    value = f"{len(outliers)} of {total} layers above {factor:g}x their kind's median (+{slack:g} us)"
    if not outliers:
        return CheckRow("layer_time", scope, value, "none", PASS)
    rank, kind, step, layer, t, median, foreign, is_last = max(outliers, key=lambda o: o[4] - o[5])
    cause = (f"; it holds {', '.join(_describe(k, us) for k, us in foreign[:2])} that no other {kind} layer has"
             if foreign else "")
    hint = (": the final norm and LM head counted in the last layer?" if foreign and is_last and
            any(class_of_name(k[2]) in ("gemm", "router_gemm") for k, _us in foreign[:2]) else "")
    why = (f"{rank} step {step} {kind} layer {layer} computes for {t:.0f} us against the median {median:.0f} us of "
           f"its kind{cause}{hint}")
    return CheckRow("layer_time", scope, value, "none", FAIL, why)


def _after_layers(used: list[StepRow], by_step: dict, stage: str, limits: dict) -> CheckRow:
    """A decode step always ends with the final norm, the LM head and sampling: `after layers` empty in
    the steps while their last layer runs kernels that the other layers of its kind do not is its own
    failure (the tail counted in the last layer)."""
    scope = f"stage {stage}"
    if stage == "unknown":
        return CheckRow("after_layers", scope, "not compared", "kernels after the layers", NOT_APPLICABLE,
                        _UNKNOWN_STAGE)
    empty = [s for s in used if not _after_last_layer(by_step.get((s.rank, s.step), []))]
    value = f"after layers empty in {len(empty)} of {len(used)} steps"
    if not used:
        return CheckRow("after_layers", scope, "no steps", "kernels after the layers", NOT_APPLICABLE, "no steps")
    if not empty:
        return CheckRow("after_layers", scope, value, "none empty", PASS)
    mixes = _layer_mixes(empty, by_step)
    for (rank, kind), layers in sorted(mixes.items()):
        last_layer = max(layer for _step, layer, _mix in layers)
        lasts = [mix for _step, layer, mix in layers if layer == last_layer]
        others = [mix for _step, layer, mix in layers if layer != last_layer]
        if not lasts or not others:
            continue
        foreign = _foreign_kernels(lasts[0], others)
        if foreign:
            return CheckRow("after_layers", scope, value, "none empty while the last layer runs extra kernels", FAIL,
                            f"{rank}: the last layer ({kind}, layer {last_layer}) holds "
                            f"{', '.join(_describe(k, us) for k, us in foreign[:2])} that no other {kind} layer has: "
                            "the final norm, the LM head and sampling are likely counted in the last layer")
    return CheckRow("after_layers", scope, value, "none empty while the last layer runs extra kernels", PASS,
                    "no kernel after the layers, but the last layer runs what the others run (a trace cut at the "
                    "layers' end)")


def _after_last_layer(rows: list[KernelRow]) -> bool:
    """A kernel outside the layers starts at or after the earliest start of a layer kernel (the bound
    is found once per step; it was found again for every such kernel)."""
    starts = [r.start_us for r in rows if r.section == SECTION_LAYER]
    first = min(starts) if starts else _INF
    return any(r.section != SECTION_LAYER and r.start_us >= first for r in rows)


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
    kernel = (f" ({example.kernel[:60]}, {example.busy_us:.1f} us, named {example.group} / {example.module})"
              if example is not None else "")
    return f"has {got}{kernel} where the others have {want} (class {i + 1} of {len(usual)})"


def _attention_cores(step_rows: list[StepRow], by_step: dict) -> CheckRow:
    """Every attention-core kernel of a step sits inside a found layer: one outside is a layer the
    cut missed (or folded into its neighbour's)."""
    outside: list[tuple[str, int, KernelRow]] = []
    total = 0
    is_core = class_test(frozenset({_ATTENTION_CORE}))
    for s in step_rows:
        for r in by_step.get((s.rank, s.step), []):
            if not is_core[r.kernel_name]:
                continue
            total += 1
            if r.section != SECTION_LAYER:
                outside.append((s.rank, s.step, r))
    scope = "all steps"
    if not total:
        return CheckRow("attention_cores_in_layers", scope, "no attention-core kernels", "none outside layers",
                        NOT_APPLICABLE, "no kernel is classed as an attention core (kernel_classes.yaml)")
    value = f"{len(outside)} of {total} outside layers"
    if not outside:
        return CheckRow("attention_cores_in_layers", scope, value, "0 outside layers", PASS)
    rank, step, r = outside[0]
    why = f"first: {rank} step {step}, {r.section} section, {r.kernel_name[:80]}"
    return CheckRow("attention_cores_in_layers", scope, value, "0 outside layers", FAIL, why)


def _expert_sizes(used: list[StepRow], by_step: dict, stage: str, model: ModelSpec | None, limits: dict) -> CheckRow:
    """Routed experts against the shared expert, per MoE layer: the ratio of each step, judged by its
    best step. A misnamed expert is misnamed in every step; a kernel stretched by contention (an
    eager step whose shared-expert kernels waited on an all-reduce spinning beside them, seen on two
    H100s) is not, so one unperturbed step clears it. The sums are reported beside it."""
    routed = shared = 0.0
    ratios: list[float] = []
    for s in used:
        step_routed = step_shared = 0.0
        for r in by_step.get((s.rank, s.step), []):
            if r.section != SECTION_LAYER:
                continue
            if r.module == _SHARED:
                step_shared += r.busy_us
            elif r.group == "moe" and r.module not in _NOT_ROUTED:
                step_routed += r.busy_us
        routed += step_routed
        shared += step_shared
        if step_shared:
            ratios.append(step_routed / step_shared)
    scope = f"stage {stage}"
    shapes = (model.shapes or {}) if model is not None else {}
    per_token, shared_n = shapes.get("num_experts_per_tok"), shapes.get("n_shared_experts")
    if not shared:
        return CheckRow("routed_vs_shared_experts", scope, "no shared-expert kernels", "routed >= shared",
                        NOT_APPLICABLE, "nothing named shared_experts")
    if per_token is not None and shared_n is not None:
        if per_token < shared_n:
            return CheckRow("routed_vs_shared_experts", scope, f"routed {routed:.0f} us, shared {shared:.0f} us",
                            "routed >= shared", NOT_APPLICABLE,
                            f"model {model.name}: {per_token} experts per token < {shared_n} shared experts")
        ratio = float(limits["min_routed_to_shared"])
        source = f"model {model.name}: {per_token} experts per token >= {shared_n} shared"
    else:
        ratio = float(limits["min_routed_to_shared_without_model"])
        source = "no model shapes: only a wholesale swap is flagged"
    typical = max(ratios)
    value = f"routed {routed:.0f} us, shared {shared:.0f} us (best step ratio {typical:.2f})"
    expected = f"ratio >= {ratio:g} ({source})"
    if typical >= ratio:
        return CheckRow("routed_vs_shared_experts", scope, value, expected, PASS)
    return CheckRow("routed_vs_shared_experts", scope, value, expected, FAIL,
                    "the routed experts' kernels are likely named shared_experts (side-stream work taken for the "
                    "shared expert), or the experts were not found")


def _step_time(used: list[StepRow], by_step: dict, stage: str, limits: dict) -> CheckRow:
    """Where the table's steps spent their busy time: in layers, in `other` rows, unattributed."""
    busy = in_layers = other = unattributed = waiting = 0.0
    for s in used:
        for r in by_step.get((s.rank, s.step), []):
            busy += r.busy_us
            if r.section != SECTION_LAYER and r.group == _COMMUNICATION:
                waiting += r.busy_us  # a collective before or after the layers absorbs the ranks' skew
            if r.group == UNATTRIBUTED:
                unattributed += r.busy_us
            if r.section == SECTION_LAYER:
                in_layers += r.busy_us
                if r.group == "other":
                    other += r.busy_us
    scope = f"stage {stage}, {len(used)} steps"
    if not busy:
        return CheckRow("step_time_shares", scope, "no busy time", "time in layers", NOT_APPLICABLE, "no kernels")
    computing = busy - waiting or busy
    pct = {k: 100 * v / computing for k, v in (("layers", in_layers), ("other", other), ("unattributed", unattributed))}
    value = (f"layers {pct['layers']:.1f}%, other {pct['other']:.1f}%, unattributed {pct['unattributed']:.1f}%"
             + (f" of the busy time less {100 * waiting / busy:.1f}% in collectives outside the layers" if waiting else ""))
    expected = (f"layers >= {limits['min_layers_pct']}%, other <= {limits['max_other_pct']}%, "
                f"unattributed <= {limits['max_unattributed_pct']}%")
    bad = []
    if pct["layers"] < limits["min_layers_pct"]:
        bad.append("little time inside the found layers (layers missed, or steps cut wrongly)")
    if pct["other"] > limits["max_other_pct"]:
        bad.append("much layer time in `other` (kernels no role explains)")
    if pct["unattributed"] > limits["max_unattributed_pct"]:
        bad.append("much time unattributed (the signature does not fit the trace)")
    return CheckRow("step_time_shares", scope, value, expected, FAIL if bad else PASS, "; ".join(bad))


def _stage_labels(step_rows: list[StepRow]) -> CheckRow:
    """Every step's label names a stage the analysis knows (SGLang renames them between releases)."""
    stages = Counter(s.stage for s in step_rows)
    unknown = {st: n for st, n in stages.items() if st not in KNOWN_STAGES and st != "unknown"}
    value = ", ".join(f"{st} {n}" for st, n in sorted(stages.items()))
    expected = "every step's label a known stage"
    if unknown:
        named = ", ".join(f"{st.upper()} ({n} steps)" for st, n in sorted(unknown.items()))
        return CheckRow("stage_labels", "all steps", value, expected, FAIL,
                        f"labels the analysis does not know: {named}; add them to "
                        "analysis/data/rules/step_labels.yaml")
    if set(stages) == {"unknown"}:
        return CheckRow("stage_labels", "all steps", value, expected, NOT_APPLICABLE,
                        "no step labels in the trace or its file name")
    return CheckRow("stage_labels", "all steps", value, expected, PASS)


def _far_gap(rows: list, far_us: float, far_ratio: float) -> str:
    """Why a kernel lies far from the rest of its step: an idle gap inside the step longer than far_us
    and than far_ratio times the rest of the step's wall time; "" when there is none. (The real
    traces' longest: 0.46 s, 44 times the rest of a step.)"""
    if len(rows) < 2:
        return ""
    ordered = sorted(rows, key=lambda r: r.start_us)
    first, end, widest, after = ordered[0].start_us, ordered[0].start_us + ordered[0].busy_us, 0.0, None
    for r in ordered[1:]:
        if r.start_us - end > widest:
            widest, after = r.start_us - end, r
        end = max(end, r.start_us + r.busy_us)
    rest = (end - first) - widest
    if widest > far_us and widest > far_ratio * rest:
        return (f"{after.kernel_name[:60]} lies {widest / 1e6:.3g} s from the rest of its step, which runs "
                f"{rest / 1e3:.3g} ms (an event far outside the step)")
    return ""


def _durations(step_rows: list[StepRow], by_step: dict, limits: dict) -> CheckRow:
    """Kernel durations present, finite, not negative, and inside their step: not running into the
    rank's next step nor starting after it began, and not far from the rest of the step (an event
    moved far in time made a 6 ms step last 200 s, with every check passing)."""
    slack = float(limits["slack_us"])
    far_us, far_ratio = float(limits["far_gap_s"]) * 1e6, float(limits["far_gap_ratio"])
    bad: list[str] = []
    total = 0
    by_rank: dict[str, list[StepRow]] = defaultdict(list)
    for s in step_rows:
        by_rank[s.rank].append(s)
    for rank, steps in by_rank.items():
        steps = sorted(steps, key=lambda s: s.start_us)
        for s, nxt in zip(steps, [*steps[1:], None]):
            rows = by_step.get((s.rank, s.step), [])
            total += len(rows)
            # fast path: a float duration >= 0, a finite start, and the kernel ends before the next step
            # starts (or starts after it); anything else goes through the checks below, which name it
            limit, next_start = (nxt.start_us + slack, nxt.start_us) if nxt is not None else (_INF, _INF)
            for r in rows:
                dur = r.busy_us
                start = r.start_us
                if dur.__class__ is float and 0.0 <= dur < _INF and -_INF < start < _INF and start + dur <= limit:
                    continue
                if dur is None or not isinstance(dur, (int, float)) or not math.isfinite(dur):
                    bad.append(f"{rank} step {s.step}: {r.kernel_name[:60]} has duration {dur!r}")
                elif dur < 0:
                    bad.append(f"{rank} step {s.step}: {r.kernel_name[:60]} has duration {dur:g} us")
                elif not math.isfinite(r.start_us):
                    bad.append(f"{rank} step {s.step}: {r.kernel_name[:60]} has start {r.start_us!r}")
                elif nxt is not None and r.start_us >= nxt.start_us:
                    bad.append(f"{rank} step {s.step}: {r.kernel_name[:60]} starts {r.start_us - nxt.start_us:.1f} us "
                               f"after step {nxt.step} began (outside its step)")
                elif nxt is not None and r.start_us + dur > nxt.start_us + slack:
                    bad.append(f"{rank} step {s.step}: {r.kernel_name[:60]} ({dur:g} us) runs "
                               f"{r.start_us + dur - nxt.start_us:.1f} us into step {nxt.step}")
            gap = _far_gap(rows, far_us, far_ratio)
            if gap:
                bad.append(f"{rank} step {s.step}: {gap}")
    scope = "all kernels"
    if not total:
        return CheckRow("kernel_durations", scope, "no kernels", "durations", NOT_APPLICABLE, "no kernels")
    value = f"{len(bad)} of {total} kernels with a bad duration"
    expected = "durations present, finite, >= 0, inside the step"
    if not bad:
        return CheckRow("kernel_durations", scope, value, expected, PASS)
    return CheckRow("kernel_durations", scope, value, expected, FAIL,
                    "; ".join(bad[:3]) + (" ..." if len(bad) > 3 else ""))


def _profiler_overhead(column: D4Column, limits: dict) -> CheckRow:
    """The profiled steps' time per token against the load's median ITL before the profile window
    (analysis/tables/load_compare.py): far slower, and the table describes a perturbed system."""
    limit = float(limits["max_profiled_to_load"])
    scope = f"stage {column.stage}, profiled steps against the load"
    expected = f"profiled per token <= {limit:g}x the load's ITL p50"
    load = column.load
    if load is None or load.ratio is None:
        why = "no load records given (--load-records)" if load is None else (load.note or "no figure to compare")
        return CheckRow("profiler_overhead", scope, "not compared", expected, NOT_APPLICABLE, why)
    value = (f"{load.profiled_ms_per_token:.2f} ms per token profiled, {load.load_itl_p50_ms:.2f} ms ITL p50 "
             f"before the window: {load.ratio:.2f}x")
    if load.ratio <= limit:
        return CheckRow("profiler_overhead", scope, value, expected, PASS)
    return CheckRow("profiler_overhead", scope, value, expected, FAIL,
                    f"the profiler added {load.overhead_ms:.2f} ms per token: the table describes a perturbed system "
                    "(the step time rows show where: host-bound idle grows first); profile without stacks "
                    "(profile.with_stack: false) or read the rows as the profiled system's")
