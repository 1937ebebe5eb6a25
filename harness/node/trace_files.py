"""Finding a profiler's per-rank trace files on a node, without Ray.

File names follow SGLang's per-rank pattern, which every engine's traces share (harness/trace_names.py).
The node actor (actor.py) and the Ray-free single-node driver share this: a rank's trace
counts once its size is non-zero and unchanged over one poll, because the profiler writes the final
name progressively (gzip stream), and with profile_by_stage it also writes EXTEND files when new
requests are prefilled while the profiler runs.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable


class TraceWaitError(RuntimeError):
    """Some rank's trace never appeared; the message names the ranks and the folder."""


def matches(name: str, label: str, stage: str | None) -> bool:
    """Does a trace file name belong to one rank label (TP-t[-DP-d][-PP-p][-EP-e]) and, if given, one stage?"""
    if stage is not None:
        return name.endswith(f"-{label}-{stage}.trace.json.gz")
    return f"-{label}-" in name or name.endswith(f"-{label}.trace.json.gz")


def wait_for_traces(trace_dir: str, rank_labels: list[str], prefix: str, timeout_s: float,
                    stage: str | None = None, alive: Callable[[], bool] = lambda: True,
                    poll_s: float = 0.2) -> list[str]:
    """Paths of the trace files, one per rank label, in label order; raises TraceWaitError when some
    never appear within timeout_s or when `alive()` turns false (the server died) first."""
    deadline = time.monotonic() + timeout_s
    found: dict[str, str] = {}
    last_size: dict[str, int] = {}
    while time.monotonic() < deadline:
        for path in Path(trace_dir).glob(f"{prefix}-*.trace.json.gz"):
            for label in rank_labels:
                if not matches(path.name, label, stage):
                    continue
                try:
                    size = path.stat().st_size
                except FileNotFoundError:
                    continue
                if size > 0 and last_size.get(str(path)) == size:
                    found[label] = str(path)
                last_size[str(path)] = size
        if len(found) == len(rank_labels):
            return [found[label] for label in rank_labels]
        if not alive():
            break
        time.sleep(poll_s)
    missing = [label for label in rank_labels if label not in found]
    raise TraceWaitError(f"no trace for rank(s) {', '.join(missing)} in {trace_dir} after {timeout_s:.0f} s "
                         f"(prefix {prefix!r})")
