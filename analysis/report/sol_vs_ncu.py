"""The SOL model's verdict on each D4 row next to what Nsight Compute measured for its kernels.

Why: "% of SOL" from the model (SOL us / the row's traced time) rests on the model's byte and FLOP
counts. Nsight Compute measures, per kernel launch, the DRAM bytes moved and how close the kernel
ran to the GPU's own throughput limits. Joining the two per D4 row shows whether the model counts
the right work (model bytes against measured bytes) and whether the row's kernels themselves are
near the hardware limit (ncu's throughput) or the time goes elsewhere (launch gaps, extra kernels).

Kernels are joined by name: a traced kernel row's full name against the ncu launch's name
(demangled by analysis.report.ncu when the export has mangled symbols). A row's figures count only its
kernels that ncu profiled; `profiled_pct` says how much of the row's traced time that covers.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable

import msgspec

from analysis.report.ncu import NcuKernel
from analysis.sol.estimate import D4Sol
from analysis.attribution.rows import SECTION_LAYER, KernelRow


class KernelCheck(msgspec.Struct, frozen=True):
    name: str
    launches_per_layer: float  # in the traced steps
    traced_us_per_layer: float
    ncu_launches: int
    ncu_mean_us: float | None
    sm_pct: float | None  # ncu SM throughput, % of peak (mean over its profiled launches)
    mem_pct: float | None  # ncu memory throughput, % of peak
    dram_pct: float | None  # ncu DRAM throughput, % of peak
    dram_bytes: float | None  # mean DRAM bytes per launch


class RowCheck(msgspec.Struct, frozen=True):
    group: str
    module: str
    kernel: str
    term: str
    bound: str
    measured_us: float  # the D4 row, per layer
    sol_us: float
    model_sol_pct: float | None  # 100 x SOL / measured
    model_hbm_bytes: float | None  # per layer
    model_flops: float | None
    profiled_pct: float  # share of the row's traced kernel time whose kernels ncu profiled
    ncu_sol_pct: float | None  # time-weighted max(SM, memory) throughput % of the profiled kernels
    ncu_dram_pct: float | None  # time-weighted DRAM throughput %
    ncu_dram_bytes_per_layer: float | None  # profiled kernels only: mean bytes per launch x launches per layer
    kernels: list[KernelCheck]


def _norm(name: str) -> str:
    return "".join(name.split())


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _ncu_by_name(kernels: Iterable[NcuKernel]) -> dict[str, list[NcuKernel]]:
    out: dict[str, list[NcuKernel]] = defaultdict(list)
    for k in kernels:
        out[_norm(k.name)].append(k)
        if k.symbol and k.symbol != k.name:
            out[_norm(k.symbol)].append(k)  # traces keep symbols their demangler gave up on
    return out


def _main_stage(rows: list[KernelRow]) -> str | None:
    stages = Counter(r.stage for r in rows if r.section == SECTION_LAYER)
    return stages.most_common(1)[0][0] if stages else None


def row_checks(sol_rows: list[D4Sol], kernel_rows: list[KernelRow], ncu: list[NcuKernel]) -> list[RowCheck]:
    """One check per D4 row that has a SOL term; rows none of whose kernels ncu profiled are kept
    (profiled_pct 0) so the table shows what is missing."""
    stage = _main_stage(kernel_rows)
    layers: dict[tuple, set] = defaultdict(set)  # D4 key -> {(run, rank, step, layer)}
    count: dict[tuple, Counter] = defaultdict(Counter)
    busy: dict[tuple, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in kernel_rows:
        if r.section != SECTION_LAYER or r.stage != stage:
            continue
        key = (r.group, r.module, r.kernel)
        layers[key].add((r.run, r.rank, r.step, r.layer))
        count[key][r.kernel_name] += 1
        busy[key][r.kernel_name] += r.busy_us
    by_name = _ncu_by_name(ncu)
    out: list[RowCheck] = []
    for s in sol_rows:
        if s.term is None or not s.sol_us or s.value_us is None:  # no term, or no work on this rank (bound none)
            continue
        key = (s.group, s.module, s.kernel)
        n_layers = len(layers.get(key, ())) or 1
        checks: list[KernelCheck] = []
        row_busy = sum(busy[key].values())
        covered_busy = 0.0
        weighted_sol = weighted_dram = weight = 0.0
        bytes_per_layer = 0.0
        any_bytes = False
        for name, launches in count[key].most_common():
            launches_per_layer = launches / n_layers
            traced = busy[key][name] / n_layers
            measured = by_name.get(_norm(name), [])
            sm = _mean([k.values["sm_throughput_pct"] for k in measured if "sm_throughput_pct" in k.values])
            mem = _mean([k.values["mem_throughput_pct"] for k in measured if "mem_throughput_pct" in k.values])
            dram = _mean([k.values["dram_throughput_pct"] for k in measured if "dram_throughput_pct" in k.values])
            dbytes = _mean([k.dram_bytes for k in measured if k.dram_bytes is not None])
            dur = _mean([k.values["duration_us"] for k in measured if "duration_us" in k.values])
            checks.append(KernelCheck(name, launches_per_layer, traced, len(measured), dur, sm, mem, dram, dbytes))
            if not measured:
                continue
            covered_busy += busy[key][name]
            if sm is not None or mem is not None:
                weighted_sol += traced * max(sm or 0.0, mem or 0.0)
                weighted_dram += traced * (dram or 0.0)
                weight += traced
            if dbytes is not None:
                bytes_per_layer += dbytes * launches_per_layer
                any_bytes = True
        out.append(RowCheck(
            group=s.group, module=s.module, kernel=s.kernel, term=s.term, bound=s.bound or "",
            measured_us=s.value_us, sol_us=s.sol_us, model_sol_pct=s.sol_pct,
            model_hbm_bytes=s.hbm_bytes, model_flops=s.flops,
            profiled_pct=100.0 * covered_busy / row_busy if row_busy else 0.0,
            ncu_sol_pct=weighted_sol / weight if weight else None,
            ncu_dram_pct=weighted_dram / weight if weight else None,
            ncu_dram_bytes_per_layer=bytes_per_layer if any_bytes else None,
            kernels=checks,
        ))
    return out
