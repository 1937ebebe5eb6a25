"""Self-checks run on every analysis: the table says when it is likely wrong.

Why: the attribution finds layers and names kernels by rules; where a trace breaks a rule (another
stack, kernels out of order, a graph replayed over many streams) it still produces a table, and a
table that looks fine. These checks test what must hold whatever the stack: the layer count, layers
of one kind alike, every attention core inside a layer, routed experts against the shared expert,
where the step's time went, step labels, kernel durations, the profiler's own cost against the
load. Each gives one CheckRow (checks.csv); thresholds are data (self_checks.yaml), documented in
docs/analysis.md. What a check reads from each rank's rows is reduced per rank first
(self_check_parts.py), in the rank's worker process where there is one; the checks here judge.
"""
from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

import msgspec

from analysis.ingest.kernel_classes import class_of_name
from analysis.attribution.rows import KernelRow, StepRow, usable_statuses
from analysis.attribution.stages import DRAFT_STAGES, UNKNOWN
from analysis.attribution.steps import KNOWN_STAGES
from analysis.io.data_files import read_yaml_file
from analysis.ingest.model_spec import ModelSpec
from analysis.tables.d4 import D4Column
from analysis.tables.self_check_parts import RankChecks, describe

THRESHOLDS_FILE = Path(__file__).with_name("self_checks.yaml")
PASS, FAIL, NOT_APPLICABLE = "pass", "fail", "n/a"
# Checks of the measurement, not of the attribution: failing, they say the steps were perturbed, not
# that kernels were named wrongly.
MEASUREMENT_CHECKS = frozenset({"profiler_overhead"})
_UNKNOWN_STAGE = ("steps without a stage label may hold more than one pass (a training step's forward and backward "
                  "layers differ)")


class CheckRow(msgspec.Struct):
    """One self-check: what was measured against what was expected, and the verdict."""

    check: str
    scope: str  # what it looked at: "TP0 decode", "all ranks, stage decode"
    value: str
    expected: str
    verdict: str  # pass | fail | n/a
    why: str = ""


@functools.lru_cache(maxsize=1)
def thresholds() -> dict[str, dict]:
    """self_checks.yaml: each check's thresholds (read_yaml_file: an unreadable file names itself)."""
    return read_yaml_file(THRESHOLDS_FILE, dict[str, dict])


def run_checks(kernel_rows: list[KernelRow], step_rows: list[StepRow], column: D4Column,
               model: ModelSpec | None = None, layers: int | None = None, strict: bool = False,
               chains: dict[tuple[str, int], list[int]] | None = None,
               parts: dict[str, RankChecks] | None = None) -> list[CheckRow]:
    """Every check, in a fixed order; `column` names the stage and the steps the table used.
    `chains`: per (rank, step), its chain across streams where the attribution already read it
    from the same kernels (positions in the step's rows); other steps' chains are read here.
    `parts`: rank -> what its worker already reduced from its rows (self_check_parts.py); a rank
    without one, or with one made for another stage or --strict, is reduced here from its rows."""
    limits = thresholds()
    stage = column.stage
    ranks: dict[str, list[StepRow]] = {}  # rank -> its steps, ranks in the order of their first step
    for s in step_rows:
        ranks.setdefault(s.rank, []).append(s)
    parts = dict(parts or {})
    missing = {r for r in ranks if (p := parts.get(r)) is None or p.stage != stage or p.strict != strict}
    if missing:
        from analysis.attribution.comm_split import rows_by_rank
        from analysis.tables.self_check_columns import rank_checks_of_rows  # numpy: kernel_columns.py says why

        by_rank = rows_by_rank(kernel_rows)
        for rank in missing:
            parts[rank] = rank_checks_of_rows(rank, ranks[rank], by_rank.get(rank, []), stage, strict, chains or {},
                                              limits)
    ordered = [parts[r] for r in ranks]
    used = _used_steps(step_rows, column, strict)
    checks = [*_layer_count(step_rows, stage, model, layers)]
    checks.append(_layer_sequence(ordered, stage, limits["layer_sequence"]))
    checks.append(_layer_time(ordered, stage, limits["layer_time"]))
    checks.append(_after_layers(ordered, stage))
    checks.append(_attention_cores(ordered))
    checks.append(_expert_sizes(ordered, stage, model, limits["expert_sizes"]))
    checks.append(_step_time(ordered, len(used), stage, limits["step_time"]))
    checks.append(_stage_labels(step_rows))
    checks.append(_durations(ordered))
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
    usable = usable_statuses(strict)
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
            source = "--layers" if layers is not None and st not in DRAFT_STAGES else (
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


def _layer_sequence(parts: list[RankChecks], stage: str, limits: dict) -> CheckRow:
    """Layers of one kind carry the same sequence of kernel classes; the outliers are named."""
    allowed = int(limits["max_outlier_layers"])
    scope = f"stage {stage}"
    if stage == UNKNOWN:
        return CheckRow("layer_kernel_sequence", scope, "not compared", "layers alike", NOT_APPLICABLE, _UNKNOWN_STAGE)
    total = sum(p.sequence_layers for p in parts)
    if not total:
        return CheckRow("layer_kernel_sequence", scope, "no layers", "layers", NOT_APPLICABLE, "no step holds layers")
    outliers = sorted((o for p in parts for o in p.sequence_outliers), key=lambda o: (o[0], o[2], o[3]))
    value = f"{len(outliers)} of {total} layers differ from their kind's usual sequence"
    expected = f"at most {allowed}"
    if len(outliers) <= allowed:
        return CheckRow("layer_kernel_sequence", scope, value, expected, PASS)
    rank, kind, step, layer = outliers[0]
    diff = next(p.sequence_first_difference for p in parts if p.rank == rank)
    named = ", ".join(f"{o[0]} step {o[2]} layer {o[3]}" for o in outliers[:5])
    why = (f"outlier layers: {named}{' ...' if len(outliers) > 5 else ''}; {rank} step {step} {kind} layer {layer} "
           f"{diff} (a layer border or a role is likely misplaced)")
    return CheckRow("layer_kernel_sequence", scope, value, expected, FAIL, why)


def _layer_time(parts: list[RankChecks], stage: str, limits: dict) -> CheckRow:
    """A layer whose compute (communication left out) is far above the median of its kind's layers,
    with the kernels that make it so: a layer border in the wrong place (the LM head counted in the
    last layer) shows here before anywhere else."""
    factor, slack = float(limits["max_to_median"]), float(limits["slack_us"])
    scope = f"stage {stage}"
    if stage == UNKNOWN:
        return CheckRow("layer_time", scope, "not compared", "layers alike", NOT_APPLICABLE, _UNKNOWN_STAGE)
    # ((rank, kind), the step's place among its rank's used steps, the outlier): sorted as (rank, kind)
    # then step; stable, so a step's layers stay in layer order
    found = sorted((f for p in parts for f in p.time_outliers), key=lambda f: (f[0], f[1]))
    outliers = [outlier for _kind, _place, outlier in found]
    total = sum(p.time_layers for p in parts)
    if not total:
        return CheckRow("layer_time", scope, "no kind with 3 layers in a step", "layers alike", NOT_APPLICABLE,
                        "too few layers of one kind to compare")
    value = f"{len(outliers)} of {total} layers above {factor:g}x their kind's median (+{slack:g} us)"
    if not outliers:
        return CheckRow("layer_time", scope, value, "none", PASS)
    rank, kind, step, layer, t, median, foreign, is_last = max(outliers, key=lambda o: o[4] - o[5])
    cause = (f"; it holds {describe(foreign[:2])} that no other {kind} layer has"
             if foreign else "")
    hint = (": the final norm and LM head counted in the last layer?" if foreign and is_last and
            any(class_of_name(k[2]) in ("gemm", "router_gemm") for k, _us in foreign[:2]) else "")
    why = (f"{rank} step {step} {kind} layer {layer} computes for {t:.0f} us against the median {median:.0f} us of "
           f"its kind{cause}{hint}")
    return CheckRow("layer_time", scope, value, "none", FAIL, why)


def _after_layers(parts: list[RankChecks], stage: str) -> CheckRow:
    """A decode step always ends with the final norm, the LM head and sampling: `after layers` empty in
    the steps while their last layer runs kernels that the other layers of its kind do not is its own
    failure (the tail counted in the last layer)."""
    scope = f"stage {stage}"
    if stage == UNKNOWN:
        return CheckRow("after_layers", scope, "not compared", "kernels after the layers", NOT_APPLICABLE,
                        _UNKNOWN_STAGE)
    used = sum(p.used_steps for p in parts)
    empty = sum(p.empty_after_steps for p in parts)
    value = f"after layers empty in {empty} of {used} steps"
    if not used:
        return CheckRow("after_layers", scope, "no steps", "kernels after the layers", NOT_APPLICABLE, "no steps")
    if not empty:
        return CheckRow("after_layers", scope, value, "none empty", PASS)
    failure = next((p.after_layers_failure for p in sorted(parts, key=lambda p: p.rank) if p.after_layers_failure), "")
    if failure:
        return CheckRow("after_layers", scope, value, "none empty while the last layer runs extra kernels", FAIL,
                        failure)
    return CheckRow("after_layers", scope, value, "none empty while the last layer runs extra kernels", PASS,
                    "no kernel after the layers, but the last layer runs what the others run (a trace cut at the "
                    "layers' end)")


def _attention_cores(parts: list[RankChecks]) -> CheckRow:
    """Every attention-core kernel of a step sits inside a found layer: one outside is a layer the
    cut missed (or folded into its neighbour's)."""
    total = sum(p.cores for p in parts)
    outside = sum(p.cores_outside for p in parts)
    scope = "all steps"
    if not total:
        return CheckRow("attention_cores_in_layers", scope, "no attention-core kernels", "none outside layers",
                        NOT_APPLICABLE, "no kernel is classed as an attention core (kernel_classes.yaml)")
    value = f"{outside} of {total} outside layers"
    if not outside:
        return CheckRow("attention_cores_in_layers", scope, value, "0 outside layers", PASS)
    why = next(p.first_core_outside for p in parts if p.cores_outside)
    return CheckRow("attention_cores_in_layers", scope, value, "0 outside layers", FAIL, why)


def _expert_sizes(parts: list[RankChecks], stage: str, model: ModelSpec | None, limits: dict) -> CheckRow:
    """Routed experts against the shared expert, per MoE layer: the ratio of each step, judged by its
    best step. A misnamed expert is misnamed in every step; a kernel stretched by contention (an
    eager step whose shared-expert kernels waited on an all-reduce spinning beside them, seen on two
    H100s) is not, so one unperturbed step clears it. The sums are reported beside it."""
    routed = shared = 0.0
    ratios: list[float] = []
    for p in parts:
        routed += p.routed_us
        shared += p.shared_us
        ratios += p.routed_to_shared
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


def _step_time(parts: list[RankChecks], steps: int, stage: str, limits: dict) -> CheckRow:
    """Where the table's steps spent their busy time: in layers, in `other` rows, unattributed."""
    busy = in_layers = other = unattributed = waiting = 0.0
    for p in parts:  # each rank's sums in row order, then rank after rank
        busy += p.busy_us
        in_layers += p.in_layers_us
        other += p.other_us
        unattributed += p.unattributed_us
        waiting += p.waiting_us
    scope = f"stage {stage}, {steps} steps"
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
    unknown = {st: n for st, n in stages.items() if st not in KNOWN_STAGES and st != UNKNOWN}
    value = ", ".join(f"{st} {n}" for st, n in sorted(stages.items()))
    expected = "every step's label a known stage"
    if unknown:
        named = ", ".join(f"{st.upper()} ({n} steps)" for st, n in sorted(unknown.items()))
        return CheckRow("stage_labels", "all steps", value, expected, FAIL,
                        f"labels the analysis does not know: {named}; add them to "
                        "analysis/data/rules/step_labels.yaml")
    if set(stages) == {UNKNOWN}:
        return CheckRow("stage_labels", "all steps", value, expected, NOT_APPLICABLE,
                        "no step labels in the trace or its file name")
    return CheckRow("stage_labels", "all steps", value, expected, PASS)


def _durations(parts: list[RankChecks]) -> CheckRow:
    """Kernel durations present, finite, not negative, and inside their step: not running into the
    rank's next step nor starting after it began, and not far from the rest of the step (an event
    moved far in time made a 6 ms step last 200 s, with every check passing)."""
    total = sum(p.duration_kernels for p in parts)
    bad = sum(p.bad_durations for p in parts)
    first = [why for p in parts for why in p.first_bad_durations][:3]
    scope = "all kernels"
    if not total:
        return CheckRow("kernel_durations", scope, "no kernels", "durations", NOT_APPLICABLE, "no kernels")
    value = f"{bad} of {total} kernels with a bad duration"
    expected = "durations present, finite, >= 0, inside the step"
    if not bad:
        return CheckRow("kernel_durations", scope, value, expected, PASS)
    return CheckRow("kernel_durations", scope, value, expected, FAIL, "; ".join(first) + (" ..." if bad > 3 else ""))


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
