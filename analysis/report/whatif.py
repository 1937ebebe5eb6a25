"""What-if (Amdahl): the step time if one D4 row ran k times faster, or at its speed of light.

Why: the biggest gap to SOL is not always where optimisation pays; a row that is 5% of the step
can at best save 5%. The saving is layers x (row time - new row time), taken off the step, which
assumes the row is on the critical path (true for main-stream rows; a row hidden under another
stream saves less, so use exposed time there).
"""
from __future__ import annotations

import msgspec

from analysis.errors import AnalysisError


class WhatIfError(AnalysisError):
    pass


class WhatIf(msgspec.Struct, frozen=True):
    group: str
    module: str
    kernel: str
    row_us: float  # measured, per layer
    new_row_us: float
    layers: float  # layers per step the row repeats over
    step_ms: float
    new_step_ms: float
    saving_ms: float
    step_speedup: float  # step_ms / new_step_ms


def what_if(step_ms: float, row_us: float, layers: float, *, speedup: float | None = None,
            target_us: float | None = None, group: str = "", module: str = "", kernel: str = "") -> WhatIf:
    """Exactly one of speedup (k: the row runs k times faster) or target_us (e.g. its SOL)."""
    if (speedup is None) == (target_us is None):
        raise WhatIfError("what_if needs exactly one of speedup or target_us")
    if speedup is not None and speedup <= 0:
        raise WhatIfError(f"speedup must be positive, got {speedup}")
    if step_ms <= 0 or row_us < 0 or layers < 0:
        raise WhatIfError(f"need step_ms > 0, row_us >= 0, layers >= 0 (got {step_ms}, {row_us}, {layers})")
    new_row = row_us / speedup if speedup is not None else min(row_us, float(target_us))
    saving_ms = layers * (row_us - new_row) / 1000.0
    if saving_ms > step_ms:
        raise WhatIfError(
            f"row {group}/{module} ({layers} x {row_us} us) is longer than the step ({step_ms} ms): "
            "layer count or units are wrong"
        )
    new_step = step_ms - saving_ms
    return WhatIf(group, module, kernel, row_us, new_row, layers, step_ms, new_step, saving_ms,
                  step_ms / new_step if new_step > 0 else float("inf"))


def what_if_at_sol(sol_rows: list, step_ms: float, layers_of, limit: int = 10) -> list[WhatIf]:
    """For every row with a SOL (analysis.sol.estimate.D4Sol), the step at SOL; largest saving first.

    layers_of(row) -> how many layers the row's per-layer value repeats over.
    """
    out = []
    for row in sol_rows:
        if row.sol_us is None or not row.value_us:
            continue
        out.append(what_if(step_ms, row.value_us, layers_of(row), target_us=row.sol_us,
                           group=row.group, module=row.module, kernel=row.kernel))
    out.sort(key=lambda w: -w.saving_ms)
    return out[:limit]


def what_if_speedup(rows: list[tuple[str, str, str, float, float]], step_ms: float, speedup: float,
                    limit: int = 10) -> tuple[list[WhatIf], list[str]]:
    """Each (group, module, kernel, row_us, layers) row alone `speedup` times faster; largest saving first.

    For reports without SOL: the ranking still shows where a faster kernel pays. Rows whose
    layers x time exceed the step are left out and named in the returned notes.
    """
    out, notes = [], []
    for group, module, kernel, row_us, layers in rows:
        if not row_us:
            continue
        try:
            out.append(what_if(step_ms, row_us, layers, speedup=speedup, group=group, module=module, kernel=kernel))
        except WhatIfError as exc:
            notes.append(str(exc))
    out.sort(key=lambda w: -w.saving_ms)
    return out[:limit], notes
