"""Known gaps injected into a real trace: its timeline stretched at a point, on the raw events.

Why: a real trace has no answer key for its idle time, but the change an injection makes has one.
`stretch` opens `delay_us` of extra time at a point of a rank's timeline: every event that starts
at or after the point moves later by it, and an event running across the point lasts that much
longer. GPU events (kernels, copies, GPU annotations) are cut at `gpu_us`, CPU events (launch calls,
annotations, Python ranges) at `cpu_us`, so a launch and its kernel can move together (a host that
launched late) or only the kernel can grow (a collective waiting for a late peer). Reads and writes
the JSON directly: nothing here uses the analysis.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"})


def read_events(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def write_events(doc: dict, path: Path) -> Path:
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    return path


def stretch(doc: dict, gpu_us: float, cpu_us: float, delay_us: float) -> None:
    """Open delay_us at gpu_us on the GPU timeline and at cpu_us on the CPU timeline (in place)."""
    for ev in doc["traceEvents"]:
        if ev.get("ph") != "X" or not isinstance(ev.get("ts"), (int, float)):
            continue
        point = gpu_us if ev.get("cat") in GPU_CATS else cpu_us
        start, dur = float(ev["ts"]), float(ev.get("dur") or 0.0)
        if start >= point:
            ev["ts"] = start + delay_us
        elif start + dur > point:
            ev["dur"] = dur + delay_us


def kernels(doc: dict) -> list[dict]:
    """The trace's kernels by start."""
    return sorted((ev for ev in doc["traceEvents"] if ev.get("ph") == "X" and ev.get("cat") == "kernel"),
                  key=lambda ev: ev["ts"])


def launches(doc: dict) -> dict[int, dict]:
    """Launch calls by correlation id."""
    return {ev["args"]["correlation"]: ev for ev in doc["traceEvents"]
            if ev.get("ph") == "X" and ev.get("cat") in ("cuda_runtime", "cuda_driver")
            and isinstance(ev.get("args"), dict) and "correlation" in ev["args"]}


def step_windows(doc: dict, label_prefix: str = "step[") -> list[tuple[float, float]]:
    """The GPU step annotations' (start, end), merged where one step is annotated on several streams."""
    spans = sorted((float(ev["ts"]), float(ev["ts"]) + float(ev["dur"])) for ev in doc["traceEvents"]
                   if ev.get("ph") == "X" and ev.get("cat") == "gpu_user_annotation"
                   and str(ev.get("name", "")).startswith(label_prefix))
    merged: list[list[float]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]
