"""`analyze`: one trace set attributed (attribute_ranks.py) and combined into the analysis
(combine.py)."""
from __future__ import annotations

from analysis.tables.d4 import STATS
from analysis.errors import AnalysisError
from analysis.gc_paused import gc_paused
from analysis.analysis_options import AnalysisOptions
from analysis.pipeline.attribute_ranks import _attribute, _shown_options
from analysis.pipeline.combine import Analysis, _tail_inputs, combine_rows


def analyze(
    paths: list[str],
    signature: str = "generic",
    model: str | None = None,
    options: AnalysisOptions | None = None,
    progress: bool = False,
) -> Analysis:
    """Analyse one trace set (one file per rank). A rank that fails is reported, not fatal.
    The garbage collector is paused throughout (analysis/gc_paused.py)."""
    with gc_paused():
        return _analyze(paths, signature, model, options, progress)


def _analyze(paths: list[str], signature: str, model: str | None, options: AnalysisOptions | None,
             progress: bool) -> Analysis:
    options = _shown_options(options or AnalysisOptions())
    if options.stat not in STATS:
        raise AnalysisError(f"stat must be one of {', '.join(STATS)}, not {options.stat!r}")
    sig, spec, requests, load = _tail_inputs(signature, model, options, check_sol=True)  # fail fast on a bad one
    rows = _attribute(paths, signature, model, options, progress, checked=True, send_rows=False)
    return combine_rows(rows.kernel_rows, rows.step_rows, rows.problems, options, sig, spec,
                        total_bytes=rows.total_bytes, failed_files=rows.failed_files, requests=requests,
                        expert_load=load, chains=rows.chains, rank_files=rows.rank_files, digest=rows.digest)
