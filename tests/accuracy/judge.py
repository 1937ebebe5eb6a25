"""One suite case judged: the truth (tests/accuracy/truth.py) and the tool (tests/accuracy/tool.py),
reduced to what the comparison needs, so the suite's tests and the report share one reading."""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from . import table as T
from .tool import found_of
from .truth import transfer, truth_of


@dataclass(frozen=True)
class Judged:
    truth_groups: dict
    truth_rows: dict
    truth_steps: int
    truth_layers: list
    truth_moe_layers: list
    unnamed_pct: float
    found_groups: dict
    found_rows: dict
    found_steps: int
    found_layers: list
    found_moe_layers: list
    found_stages: list

    @property
    def found_layered(self) -> list:
        """Layer counts of the found steps that hold layers: without ranges, SGLang's `draft`
        annotation cuts a step of its own around a few sampling kernels (no forward, no layer)."""
        return [n for n in self.found_layers if n]

    def group_gaps(self) -> dict[str, float]:
        """Found minus truth per D4 group, in points of the steps' busy time."""
        return {g: round(self.found_groups.get(g, 0.0) - self.truth_groups.get(g, 0.0), 2) for g in T.GROUPS}

    def row_gaps(self, names=None) -> dict[str, float]:
        """Found minus truth per compared row (table.COMPARED_ROWS; `names`: those only), in points."""
        return {n: round(sum(self.found_rows.get(k, 0.0) for k in T.COMPARED_ROWS[n])
                         - sum(self.truth_rows.get(k, 0.0) for k in T.COMPARED_ROWS[n]), 2)
                for n in (names if names is not None else T.COMPARED_ROWS)}

    @property
    def found_layerless_stages(self) -> list:
        """The stages of the found steps without a layer: only `draft` may be one (see found_layered)."""
        return [stage for n, stage in zip(self.found_layers, self.found_stages) if not n]


def module_names(meta: Path | None) -> dict | None:
    """The qualified module names a corpus recording wrote beside its trace (Class_N -> name)."""
    if meta is None or not meta.exists():
        return None
    return json.loads(meta.read_text()).get("module_names")


@functools.lru_cache(maxsize=None)
def judge(path: str, truth_path: str | None = None, meta: str | None = None, truth_meta: str | None = None) -> Judged:
    """The tool on `path` (ranges stripped, no signature) and the truth of `truth_path` (default:
    `path` itself; a CUDA-graph replay's eager twin otherwise)."""
    if truth_path:
        t = transfer(truth_of(truth_path, module_names(Path(truth_meta) if truth_meta else None)), path)
    else:
        t = truth_of(path, module_names(Path(meta) if meta else None))
    f = found_of(path)
    return Judged(t.group_shares(), t.row_shares(), t.steps, t.layers, t.moe_layers, t.unnamed_pct,
                  f.groups, f.rows, f.steps, f.layers, f.moe_layers, f.stages)


def judge_case(case) -> Judged:
    truth_meta = None
    if case.truth is not None and case.meta is not None:  # the twin's meta: the eager recording's
        truth_meta = case.meta.parent / case.meta.name.replace("-graph-", "-eager-")
    return judge(str(case.path), str(case.truth) if case.truth else None, str(case.meta) if case.meta else None,
                 str(truth_meta) if truth_meta else None)
