"""The tool's side of the accuracy suite: `moe-harness analyze` on a trace with its ranges
stripped (as a CUDA-graph replay shows it) and no signature, as shares of the steps' busy time.
"""
from __future__ import annotations

from dataclasses import dataclass

from analysis.attribution.rank.agreement import shares, strip_ranges
from analysis.attribution.rank.attribute import RankOptions, attribute_rank
from analysis.attribution.signature import load_signature
from analysis.ingest.trace_loader import load_trace


@dataclass
class Found:
    groups: dict[str, float]
    rows: dict[tuple[str, str], float]
    steps: int
    layers: list[int]
    moe_layers: list[int | None]
    stages: list[str]
    kernel_rows: list  # the analysis' KernelRows and StepRows, for the mutation tests
    step_rows: list


def found_of(path: str, signature: str = "generic") -> Found:
    sig = load_signature(signature)
    rows, steps = attribute_rank(strip_ranges(load_trace(path)), sig, None,
                                 RankOptions(attribution="auto" if sig.generic else "template"))
    s = shares(rows, steps)
    return Found(s.groups, s.modules, s.steps, s.layers, s.moe_layers, [st.stage for st in steps], rows, steps)
