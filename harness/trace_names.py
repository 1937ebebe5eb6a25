"""Trace file names: SGLang's per-rank pattern, shared by every engine so one analysis reads all."""
from __future__ import annotations


def trace_file_name(prefix: str, stage: str = "DECODE", tp_rank: int = 0) -> str:
    """`<prefix>-TP-<rank>-<STAGE>.trace.json.gz`, as SGLang's profiler names each rank's file."""
    return f"{prefix}-TP-{tp_rank}-{stage}.trace.json.gz"
