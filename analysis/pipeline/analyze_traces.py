"""`analyze`: one trace set attributed (attribute_ranks.py) and combined into the analysis
(combine.py), with the one-rank kernel table encoded on a second core where there is one."""
from __future__ import annotations



from analysis.tables.d4 import STATS
from analysis.pipeline.forked_encoding import ForkedEncoding
from analysis.pipeline.rank_digest import Digest
from analysis.errors import AnalysisError
from analysis.forked_call import fork_allowed
from analysis.gc_paused import gc_paused
from analysis.analysis_options import AnalysisOptions
from analysis.attribution.overlap import stream_summary
from analysis.pipeline.attribute_ranks import _attribute, _cores, _shown_options
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
    helper = None
    if rows.digest is None and rows.kernel_rows and _cores(options) > 1 and fork_allowed():
        helper = ForkedEncoding(rows.kernel_rows)  # one rank: its kernel table is encoded on the other core
    try:
        analysis = combine_rows(rows.kernel_rows, rows.step_rows, rows.problems, options, sig, spec,
                                total_bytes=rows.total_bytes, failed_files=rows.failed_files, requests=requests,
                                expert_load=load, chains=rows.chains, rank_files=rows.rank_files, digest=rows.digest)
        if helper is not None:
            streams = stream_summary(rows.kernel_rows)  # here: the child's share of the work is the larger
            analysis.digest = Digest(rows=len(rows.kernel_rows), kernel_table=helper.result(), streams=streams,
                                     cells=None, collectives=None, share=None)
        return analysis
    finally:
        if helper is not None:
            helper.close()
