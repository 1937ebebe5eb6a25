"""What an analysis may be asked to do differently (AnalysisOptions), apart from the pipeline.

Why a module of its own: the harness builds an analysis' options (from a scenario, a run's manifest)
where it needs no pipeline, and options that lived in the pipeline would import it first.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analysis.sol.estimate import SolSettings

DEFAULT_STEP_GAP_US = 1000.0  # idle gap that starts a new step where a trace has no step markers


@dataclass
class AnalysisOptions:
    run: str = "run"
    rank_policy: str = "mean"  # mean | max | rank:LABEL
    stat: str = "mean"  # mean | median | p90
    labels: dict[str, str] | None = None  # explicit rank label per path
    capture_traces: list[str] = field(default_factory=list)
    accept_length: float | None = None
    tbo: bool = False
    stage: str | None = None  # the stage the D4 table describes (extend, decode, target_verify); None: the
    # first of verify, decode, extend with usable steps (analysis/tables/d4.py main_stage)
    jobs: int | None = None
    step_gap_us: float = DEFAULT_STEP_GAP_US
    attribution: str = "auto"
    sol: SolSettings | None = None  # hardware + deployment: adds SOL columns to the D4 table
    layers: int | None = None  # expected decoder layers per step; overrides the model file's count
    strict: bool = False  # True: steps whose layer count differs from the expected one stay out of the table
    expert_load: str | None = None  # expert_load.json of the run (analysis/ingest/expert_load.py)
    load_records: str | None = None  # the run's load/requests.jsonl: profiled steps against the load (load_compare.py)
    window_start_s: float | None = None  # the profile window's start on the load's clock, where the run recorded it
