"""When is a decode loop steady? When the last few step times agree.

Why a spread rule: the first steps pay for allocator growth, lazy initialisation and caches;
profiling them would describe start-up, not serving.
"""
from __future__ import annotations

import statistics


def relative_spread(window_ms: list[float]) -> float:
    """(max - min) / median of the window."""
    median = statistics.median(window_ms)
    return (max(window_ms) - min(window_ms)) / median if median > 0 else float("inf")


def is_steady(step_ms: list[float], warmup_steps: int, window: int, max_rel_spread: float) -> bool:
    """True once `warmup_steps` are done and the last `window` steps spread by at most `max_rel_spread`."""
    if len(step_ms) < warmup_steps + window:
        return False
    return relative_spread(step_ms[-window:]) <= max_rel_spread


class NotSteadyError(RuntimeError):
    def __init__(self, step_ms: list[float], window: int, max_rel_spread: float):
        last = step_ms[-window:]
        super().__init__(
            f"decode never reached steady state within {len(step_ms)} steps: the last {window} step times "
            f"({', '.join(f'{x:.2f}' for x in last)} ms) spread by {relative_spread(last):.2f} of their median, "
            f"above workload.steady_rel_spread = {max_rel_spread}; raise it or workload.max_warmup_steps"
        )
