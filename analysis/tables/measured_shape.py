"""The profiled steps' own batch and KV length, where their labels say, in place of the given ones.

Why: the SOL columns need the batch per rank and the mean KV length of its requests; a scenario or
the command line gives what was planned, while SGLang's detailed annotations (from 0.5.19) write
into each step's label what it ran: bs and the KV lengths summed over its requests (steps.csv
`batch_size`, `kv_tokens`). Per rank the mean over the table's steps that carry both, of the batch
and of kv_tokens / batch_size, then the mean over ranks.
"""
from __future__ import annotations

import statistics
from collections import defaultdict

import msgspec

from analysis.attribution.rows import StepRow
from analysis.sol.estimate import SolSettings


class MeasuredShape(msgspec.Struct):
    batch_per_rank: float
    kv_len: float  # mean KV length per request
    steps: int  # steps that carried both


def measured_shape(step_rows: list[StepRow], used: set[tuple[str, int]]) -> MeasuredShape | None:
    batches: dict[str, list[float]] = defaultdict(list)
    kv: dict[str, list[float]] = defaultdict(list)
    for s in step_rows:
        if (s.rank, s.step) in used and s.batch_size and s.kv_tokens is not None:
            batches[s.rank].append(s.batch_size)
            kv[s.rank].append(s.kv_tokens / s.batch_size)
    if not batches:
        return None
    return MeasuredShape(statistics.fmean(statistics.fmean(v) for v in batches.values()),
                         statistics.fmean(statistics.fmean(v) for v in kv.values()),
                         sum(len(v) for v in batches.values()))


def sol_with_measured(settings: SolSettings, shape: MeasuredShape | None) -> SolSettings:
    """The SOL settings with the measured batch and KV length (rounded to whole requests and tokens)."""
    if shape is None:
        return settings
    deployment = msgspec.structs.replace(settings.deployment, batch_per_rank=max(1, round(shape.batch_per_rank)),
                                         kv_len=round(shape.kv_len))
    return msgspec.structs.replace(settings, deployment=deployment)


def note(column) -> str:
    shape = column.measured_shape
    if shape is None:
        return ""
    text = (f"{column.name}: the profiled steps' own shape (SGLang's detailed annotations in {shape.steps} step labels): "
            f"batch {shape.batch_per_rank:.1f} per rank, KV length {shape.kv_len:.1f} per request")
    if column.sol is not None:
        text += "; the SOL columns use them in place of the given batch and KV length"
    return text
