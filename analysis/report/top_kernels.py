"""Top kernels by total GPU time, per stage, with library family and a readable name.

Input is either the long per-kernel table (KernelRow, which knows each kernel's stage and step)
or raw traces (RankTrace: one stage per file, from its name, else "all"). Kernels are grouped by
their full name, so two template variants of one kernel stay apart, as in a hand-written report.
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable

import msgspec

from analysis.ingest.kernel_names import kernel_family, readable_name
from analysis.attribution.rows import KernelRow
from analysis.ingest.trace_model import RankTrace

ALL_STAGES = "all"


class KernelSample(msgspec.Struct, frozen=True, gc=False):
    stage: str
    name: str
    dur_us: float
    step_key: str  # rank/step the launch belongs to, to count launches per step


class TopKernel(msgspec.Struct, frozen=True):
    stage: str
    rank: int  # 1 = most total time within the stage
    readable: str
    family: str
    total_us: float
    share_pct: float  # of the stage's summed kernel time
    count: int
    per_step: float  # launches per profiled step (per rank)
    mean_us: float
    median_us: float
    name: str  # full signature


class FamilyShare(msgspec.Struct, frozen=True):
    stage: str
    family: str
    total_us: float
    share_pct: float
    kernels: int  # distinct kernel names


class TopKernelsResult(msgspec.Struct):
    top: dict[str, list[TopKernel]]  # stage -> rows, ranked
    families: dict[str, list[FamilyShare]]
    stage_total_us: dict[str, float]
    stage_steps: dict[str, int]


def samples_from_rows(rows: Iterable[KernelRow]) -> list[KernelSample]:
    return [KernelSample(r.stage or "unknown", r.kernel_name, r.busy_us, f"{r.run}/{r.rank}/{r.step}") for r in rows]


def samples_from_traces(traces: Iterable[RankTrace]) -> list[KernelSample]:
    """Each trace is one step window; its stage comes from the file name (DECODE -> decode)."""
    out = []
    for trace in traces:
        stage = (trace.rank.stage or ALL_STAGES).lower()
        key = f"{trace.path}/{trace.rank.label}"
        out.extend(KernelSample(stage, k.name, k.dur_us, key) for k in trace.kernels)
    return out


def top_kernels(samples: Iterable[KernelSample], top_n: int = 20) -> TopKernelsResult:
    by_stage: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    steps: dict[str, set[str]] = defaultdict(set)
    for s in samples:
        by_stage[s.stage][s.name].append(s.dur_us)
        steps[s.stage].add(s.step_key)
    result = TopKernelsResult(top={}, families={}, stage_total_us={}, stage_steps={})
    for stage in sorted(by_stage):
        per_name = by_stage[stage]
        total = sum(sum(d) for d in per_name.values())
        n_steps = max(1, len(steps[stage]))
        ranked = sorted(per_name.items(), key=lambda item: (-sum(item[1]), item[0]))
        rows = []
        readable_seen: dict[str, int] = {}
        for position, (name, durs) in enumerate(ranked[:top_n], start=1):
            readable = readable_name(name)
            readable_seen[readable] = readable_seen.get(readable, 0) + 1
            if readable_seen[readable] > 1:  # two variants of one kernel: keep names unique
                readable = f"{readable} #{readable_seen[readable]}"
            sum_us = sum(durs)
            rows.append(TopKernel(
                stage=stage, rank=position, readable=readable, family=kernel_family(name), total_us=sum_us,
                share_pct=100.0 * sum_us / total if total else 0.0, count=len(durs), per_step=len(durs) / n_steps,
                mean_us=sum_us / len(durs), median_us=statistics.median(durs), name=name,
            ))
        fam_total: dict[str, float] = defaultdict(float)
        fam_names: dict[str, int] = defaultdict(int)
        for name, durs in per_name.items():
            fam = kernel_family(name)
            fam_total[fam] += sum(durs)
            fam_names[fam] += 1
        result.top[stage] = rows
        result.families[stage] = [
            FamilyShare(stage, fam, t, 100.0 * t / total if total else 0.0, fam_names[fam])
            for fam, t in sorted(fam_total.items(), key=lambda item: -item[1])
        ]
        result.stage_total_us[stage] = total
        result.stage_steps[stage] = n_steps
    return result
