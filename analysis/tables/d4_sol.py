"""Speed-of-light columns for a D4 column: each row's SOL us, percent of SOL and bound.

Why a separate step: the D4 column is built from traces alone; SOL needs what the traces do not
say (hardware, batch per rank, KV length, parallelism), so it is added only when those are given.
Rows are matched to SOL terms by analysis/sol/sol_module_map.yaml (analysis.sol.estimate.sol_for_d4_rows);
rows without a term (quantisation, top-k, sum rows) keep empty SOL cells. The SOL model counts a
decode step (each request one new token, or 1 + MTP draft tokens, against its KV length): a prefill
(extend) table keeps every SOL cell empty and its note says why (derived_notes.sol_notes), where
its figures would compare a prompt's kernels with one token's work and read far below 100%.
"""
from __future__ import annotations

import msgspec

from analysis.attribution.stages import EXTEND
from analysis.tables.d4 import D4Column
from analysis.errors import AnalysisError
from analysis.sol.model_shapes import load_model_shapes
from analysis.sol.estimate import SolSettings, sol_for_d4_rows
from analysis.tables.measured_shape import sol_with_measured


def with_sol(column: D4Column, settings: SolSettings) -> D4Column:
    """A copy of `column` whose layer rows carry SOL figures for `settings`, with the batch and KV
    length the profiled steps' labels carry in place of the given ones where they carry them."""
    if column.stage == EXTEND:
        return msgspec.structs.replace(column, sol=settings)  # the cells stay empty; the note says why
    settings = sol_with_measured(settings, column.measured_shape)
    try:
        shapes = load_model_shapes(settings.model)
    except AnalysisError as exc:
        raise AnalysisError(f"SOL columns need model shapes (the SOL model covers DeepSeek-V3-style models "
                            f"with a `shapes:` file: deepseek-v3, deepseek-v3-wide4): {exc}") from None
    sols = sol_for_d4_rows(column.rows, settings.deployment, settings.hardware, model=shapes)
    rows = [
        msgspec.structs.replace(row, sol_us=s.sol_us, sol_pct=s.sol_pct, bound=s.bound, sol_term=s.term)
        for row, s in zip(column.rows, sols)
    ]
    return msgspec.structs.replace(column, rows=rows, sol=settings)
