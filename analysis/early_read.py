"""`analyze` (analysis/pipeline.py), with a one-rank trace's second half read from before the
pipeline is imported: the door's `analyze` (analysis/api.py).

Why: importing the pipeline (the attribution, the tables, the checks: about 0.07 s) came before the
load, on one core while the other waited; the child that reads the file's second half
(analysis/ingest/second_half.py) needs only the loader. Started first, it reads while the pipeline
is imported, and the load takes it over (analysis/ingest/early_half.py). Only where the pipeline's
own load would start that child: one trace file (or a folder of one) and a second core (--jobs not
1); where fork is unsafe (a Ray worker's threads) no child is started, as in the load.
"""
from __future__ import annotations

from analysis.analysis_options import AnalysisOptions
from analysis.errors import AnalysisError
from analysis.forked_call import cores_for
from analysis.trace_paths import expand_paths


def analyze(paths: list[str], signature: str = "generic", model: str | None = None,
            options: AnalysisOptions | None = None, progress: bool = False):
    """pipeline.analyze of these traces (an Analysis), one rank's second half read from now on."""
    started = _read_early(paths, options.jobs if options is not None else None)
    try:
        from analysis.pipeline import analyze as analyze_traces

        return analyze_traces(paths, signature, model, options, progress)
    finally:
        if started:
            from analysis.ingest import early_half

            early_half.close_all()  # a reader the load did not take (an error before it, a changed file)


def _read_early(paths: list[str], jobs: int | None) -> bool:
    """Start the reader of the one trace these paths name, where a second core may read it; True where
    one may have started."""
    if len(paths) != 1 or cores_for(jobs) < 2:
        return False
    try:
        files = expand_paths(paths)
    except (AnalysisError, OSError):  # the pipeline says why, as it always has
        return False
    if len(files) != 1:
        return False
    from analysis.ingest.trace_loader import start_reading_early

    start_reading_early(files[0])
    return True
