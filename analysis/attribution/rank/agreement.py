"""How far an attribution from kernels alone is from the trace's own module ranges.

Why: the attribution that matters is the one users get on traces without ranges (CUDA-graph
replays); a trace that has ranges is its own ground truth. Strip the ranges, attribute the kernels
(by structure, or by a signature), and compare per D4 group and module, as shares of step busy
time. Used to check a shipped signature against a calibration trace (`moe-harness calibrate`) and by
the accuracy suite (tests/test_accuracy_suite.py, docs/accuracy.md).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import msgspec

from analysis.attribution.rank.attribute import RankOptions, attribute_rank
from analysis.errors import AnalysisError
from analysis.attribution.signature import Signature, load_signature
from analysis.attribution.rows import SECTION_LAYER, KernelRow, StepRow
from analysis.ingest.trace_loader import load_trace
from analysis.ingest.trace_model import RankTrace

# The groups the comparison reports (shares of step busy time); "outside" is the time before and
# after the layers (embedding, LM head, sampling).
GROUPS = ("attention", "gate", "moe", "combine/share overlap", "mlp", "communication", "other", "outside")


def strip_ranges(trace: RankTrace) -> RankTrace:
    """The same trace as a CUDA-graph replay would show it: no nn.Module or python-function ranges."""
    return msgspec.structs.replace(trace, module_ranges=[], function_ranges=[])


@dataclass
class Shares:
    """Busy time per group and per (group, module), in percent of the steps' busy time."""

    groups: dict[str, float]
    modules: dict[tuple[str, str], float]
    steps: int
    layers: list[int]
    moe_layers: list[int | None]
    segmented_by: list[str]

    @property
    def layered(self) -> list[int]:
        """Layer counts of the steps that hold layers. Why: without ranges, an annotation can cut a
        step of its own around a few kernels outside any forward (SGLang's `draft` with one MTP step);
        with ranges those kernels join the next forward. Both views agree on every layered step."""
        return [n for n in self.layers if n]


def shares(kernel_rows: list[KernelRow], step_rows: list[StepRow]) -> Shares:
    busy = sum(s.busy_us for s in step_rows) or 1.0
    groups: Counter = Counter()
    modules: Counter = Counter()
    for r in kernel_rows:
        group = r.group if r.section == SECTION_LAYER else "outside"
        groups[group] += r.busy_us
        modules[(group, r.module)] += r.busy_us
    return Shares({g: 100 * v / busy for g, v in groups.items()}, {m: 100 * v / busy for m, v in modules.items()},
                  len(step_rows), [s.layers_found for s in step_rows], [s.moe_layers_found for s in step_rows],
                  [s.segmented_by for s in step_rows])


@dataclass
class Agreement:
    """Truth (the ranges) against the attribution from kernels alone, for one trace."""

    trace: str
    truth: Shares
    found: Shares
    how: str  # what named the kernels without ranges: structure, signature NAME, ...
    notes: list[str] = field(default_factory=list)

    def group_gap_pp(self, group: str) -> float:
        return self.found.groups.get(group, 0.0) - self.truth.groups.get(group, 0.0)

    @property
    def worst_group(self) -> tuple[str, float]:
        group = max(GROUPS, key=lambda g: abs(self.group_gap_pp(g)))
        return group, self.group_gap_pp(group)

    def module_gaps_pp(self) -> dict[tuple[str, str], float]:
        keys = sorted(set(self.truth.modules) | set(self.found.modules))  # sorted: ties print in one order every run
        return {k: self.found.modules.get(k, 0.0) - self.truth.modules.get(k, 0.0) for k in keys}

    @property
    def layers_agree(self) -> bool:
        """Same layer count, dense and MoE, in every step that holds layers (graph replays: as many
        steps as the truth)."""
        moe = lambda s: [m for n, m in zip(s.layers, s.moe_layers) if n]  # noqa: E731
        return (self.truth.layered == self.found.layered and  # None: the attribution cannot tell (templates)
                all(a is None or b is None or a == b for a, b in zip(moe(self.truth), moe(self.found))))


def _attribute(trace: RankTrace, sig: Signature, attribution: str):
    return attribute_rank(trace, sig, None, RankOptions(attribution=attribution))


class RangeTruth:
    """A trace's own nn.Module ranges as the truth, loaded and attributed once, against which
    attributions from kernels alone (one per signature) are compared."""

    def __init__(self, path: str):
        self.path = path
        trace = load_trace(path)
        if not trace.module_ranges:
            raise AnalysisError(f"{path}: no nn.Module ranges to compare with (record with with_stack=True)")
        self.truth = _attribute(trace, load_signature("generic"), "modules")
        self.stripped = strip_ranges(trace)

    def against(self, sig: Signature) -> Agreement:
        rows, steps = _attribute(self.stripped, sig, "template" if not sig.generic else "auto")
        truth_rows, truth_steps = self.truth
        how = "structure" if sig.generic else f"signature {sig.name}"
        notes = []
        if any(s.segmented_by == "gap" for s in steps):
            notes.append("steps without markers were cut by gaps and the layer structure")
        return Agreement(self.path, shares(truth_rows, truth_steps), shares(rows, steps), how, notes)


