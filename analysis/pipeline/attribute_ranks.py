"""Trace files in, attributed rows out: each rank loaded and attributed, in this process or in a worker
process per rank (which also digests its rows for the tables), before any table is built. A rank that
fails is reported, never fatal; the same trace given twice under two names is refused."""
from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple


from analysis.attribution.kernel_columns import KernelColumns
from analysis.attribution.rank.attribute import ATTRIBUTION_MODES, RankOptions, attribute_rank_columns
from analysis.attribution.capture import capture_files, capture_rank, load_capture
from analysis.pipeline.lazy_rows import LazyRows
from analysis.pipeline.rank_digest import Digest, RankDigest, digest_rank
from analysis.errors import AnalysisError, TraceLoadError, shown_path
from analysis.gc_paused import gc_paused
from analysis.trace_paths import expand_paths
from analysis.analysis_options import AnalysisOptions
from analysis.ingest.model_spec import load_model_spec
from analysis.attribution.module_attribution import build_capture_map
from analysis.ingest.rank_id import rank_id_for
from analysis.ingest.rank_checks import check_numbers, check_rank_identity
from analysis.attribution.signature import load_signature
from analysis.attribution.rows import KernelRow, RankProblem, StepRow
from analysis.ingest.trace_loader import load_trace



class _RankResult(NamedTuple):
    """One rank, loaded and attributed (what a worker process sends back)."""
    kernel_rows: KernelColumns | None  # None: a worker that did not send them (its digest holds them)
    step_rows: list[StepRow]
    json_bytes: int
    label: str
    notes: list[str]
    chains: dict[int, Sequence[int]]  # step -> its chain (int32 arrays)
    content_key: str
    digest: RankDigest | None = None  # what the rank's columns give the tables (rank_digest.py)


def _analyze_one(*args) -> _RankResult:
    """Load and attribute one rank, in this process or in a worker process beside the other ranks'
    workers. args: _load_and_attribute's, then --strict, the preferred table stage, keep_columns (False
    leaves the columns out of the result: a worker's digest holds them as the encoded kernel table,
    analysis/pipeline/lazy_rows.py) and make_digest (the tables' share, analysis/pipeline/rank_digest.py:
    only `analyze` builds tables; a caller that takes the rows builds its own)."""
    *rank_args, strict, prefer_stage, keep_columns, make_digest = args
    with gc_paused():
        value = _load_and_attribute(*rank_args)
        digest = (digest_rank(value.label, value.kernel_rows, value.step_rows, value.chains, strict, prefer_stage)
                  if make_digest else None)
        return value._replace(kernel_rows=value.kernel_rows if keep_columns else None, digest=digest)


def _load_and_attribute(path: str, label: str | None, index: int, sig_ref: str, model_ref: str | None,
                        rank_options: RankOptions, capture_refs: list[str]):
    sig = load_signature(sig_ref)
    model = load_model_spec(model_ref) if model_ref else None
    rank = rank_id_for(path, label, index)
    capture, captures = None, None
    if capture_refs and sig.module_ranges is not None:  # the signature's own map, names aligned
        files = capture_files(capture_refs)
        own = _capture_files_for_rank(files, rank, index)
        if not own:
            raise AnalysisError(f"{path}: no capture trace for rank {rank.label} among {', '.join(f.name for f in files)}")
        named = any(capture_rank(f) is not None for f in own)  # else the i-th file stands for the i-th rank
        capture = build_capture_map(load_trace(str(own[0] if named else own[min(index, len(own) - 1)])),
                                    sig.module_ranges)
    elif capture_refs:
        captures = [load_capture(f) for f in _capture_files_for_rank(capture_files(capture_refs), rank, index)]
    trace = load_trace(path, rank=rank)
    options = dataclasses.replace(rank_options, notes=[], chains={}, release_kernels=True)
    columns, step_rows = attribute_rank_columns(trace, sig, model, options, capture, captures)
    return _RankResult(columns, step_rows, trace.json_bytes, trace.rank.label, options.notes, options.chains,
                       trace.content_key)


def _capture_files_for_rank(files: list[Path], rank, index: int) -> list[Path]:
    """The capture traces of this rank (by the rank in their file names), or all of them when no
    name says; chosen before any is read, so each rank reads only its own."""
    number = rank.tp if rank.tp is not None else index
    ranks = [capture_rank(f) for f in files]
    own = [f for f, r in zip(files, ranks) if r == number]
    return own if own or any(r is not None for r in ranks) else files


def _available_cores() -> int:
    """The cores this process may run on: how many rank workers run at once where --jobs does not say."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@dataclass
class AttributedRows:
    """Every rank's attributed rows, before any table: what a node hands on to be combined."""
    kernel_rows: list[KernelRow]
    step_rows: list[StepRow]
    problems: list[RankProblem]  # per rank and per step; the self-checks add theirs when the rows are combined
    total_bytes: int = 0
    failed_files: list[str] = field(default_factory=list)  # "path: why" of each rank that could not be analysed
    chains: dict[tuple[str, int], Sequence[int]] = field(default_factory=dict)  # (rank, step) -> its chain
    rank_files: dict[str, str] = field(default_factory=dict)  # rank label -> its trace file
    digest: Digest | None = None  # what every rank made of its rows for the tables (`analyze` only: send_rows False)


def attribute(paths: list[str], signature: str = "generic", model: str | None = None,
              options: AnalysisOptions | None = None, progress: bool = False, digests: bool = False) -> AttributedRows:
    """Load and attribute one trace set (one file per rank) without building the tables: a run's node
    does this for its own ranks, and `combine_rows` builds the table over every node's ranks.
    `digests`: each rank's digest made where it was attributed, and the rows held as the digests'
    encoded kernel table (a run's node hands both on, and the table is combined from the digests, as
    `analyze` combines its ranks'); else each rank's rows as columns and no digest."""
    with gc_paused():
        rows = _attribute(paths, signature, model, _shown_options(options or AnalysisOptions()), progress,
                          send_rows=not digests)
    if digests and rows.digest is not None:  # every rank digested (send_rows False makes one for each)
        rows.kernel_rows = LazyRows.of_groups(rows.digest.kernel_table, rows.digest.rows)
    return rows


def learn_signature_from(trace_path: str, base: str, name: str, description: str,
                         steps: set[int] | None = None) -> dict:
    """A signature (a YAML-ready dict) learned from a trace file's module ranges under a base
    signature named by reference (analysis/attribution/rank/learn_signature.py)."""
    from analysis.attribution.rank.learn_signature import learn_signature

    return learn_signature(load_trace(trace_path), load_signature(base), name, description, steps)


def _shown_options(options: AnalysisOptions) -> AnalysisOptions:
    """Names that came from file names or the command line reach every table: bytes that are not
    UTF-8 there (a file name from another system) are shown as escapes, never a failed write."""
    return dataclasses.replace(options, run=shown_path(options.run),
                               labels={k: shown_path(v) for k, v in (options.labels or {}).items()} or None)


def _attribute(paths: list[str], signature: str, model: str | None, options: AnalysisOptions,
               progress: bool, checked: bool = False, send_rows: bool = True) -> AttributedRows:
    """`checked`: the caller has read the signature and model already. `send_rows` False (`analyze`,
    which builds the tables): every rank makes its digest, and rank workers keep their rows in their
    digests' encoded kernel table, decoded only where read. True: the rows come back as each rank's
    columns and no digest is made (the caller, a run's node, hands the rows on)."""
    if options.attribution not in ATTRIBUTION_MODES:
        raise AnalysisError(f"attribution must be one of {', '.join(ATTRIBUTION_MODES)}, not {options.attribution!r}")
    if not checked:  # fail fast on a bad signature or model, before any trace is read
        load_signature(signature)
        if model:
            load_model_spec(model)
    files = expand_paths(paths)
    if not files:
        raise AnalysisError("no trace files given")
    if options.layers is not None and options.layers < 1:
        raise AnalysisError(f"layers must be a positive number of decoder layers, not {options.layers}")
    check_numbers(options)
    check_rank_identity(files, options.labels or {})
    rank_options = RankOptions(run=options.run, tbo=options.tbo, step_gap_us=options.step_gap_us,
                               attribution=options.attribution, layers=options.layers)
    labels = options.labels or {}
    jobs = options.jobs or min(len(files), _available_cores())
    chains: dict[tuple[str, int], Sequence[int]] = {}  # (rank, step) -> its chain, from the structural cut
    parts: list[KernelColumns] = []  # each rank's kernel rows, as columns
    step_rows: list[StepRow] = []
    problems: list[RankProblem] = []
    total_bytes = 0
    args = [(f, labels.get(f), i, signature, model, rank_options, options.capture_traces, options.strict, options.stage)
            for i, f in enumerate(files)]
    results: dict[int, tuple] = {}
    with _progress(progress, len(files)) as advance:
        if jobs <= 1 or len(files) == 1:
            for i, a in enumerate(args):
                results[i] = _guarded(_analyze_one, (*a, True, not send_rows))  # in this process: the columns stay here
                advance()
        else:  # imported here: a one-rank run does not pay for the process pool's imports
            from concurrent.futures import ProcessPoolExecutor, as_completed

            import analysis.numeric  # noqa: F401 - once here, not once in every forked worker

            with ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = {pool.submit(_guarded, _analyze_one, (*a, send_rows, not send_rows)): i
                           for i, a in enumerate(args)}
                for fut in as_completed(futures):
                    results[futures[fut]] = fut.result()
                    advance()
    _refuse_the_same_trace_twice(files, results)
    digest: Digest | None = Digest()
    for i in sorted(results):
        ok, value = results[i]
        if ok:
            k_rows, s_rows, nbytes, label, notes, rank_chains, _, rank_digest = value
            if rank_digest is None:
                digest = None
            elif digest is not None:
                digest.add(label, rank_digest)
            chains.update({(label, step): chain for step, chain in rank_chains.items()})
            if k_rows is not None:
                parts.append(k_rows)
            step_rows.extend(s_rows)
            total_bytes += nbytes
            problems.extend(RankProblem(path=shown_path(files[i]), rank=label, message=shown_path(note)) for note in notes)
        else:
            problems.append(RankProblem(path=shown_path(files[i]), rank=rank_id_for(files[i], labels.get(files[i]), i).label,
                                        message=shown_path(value)))
    for s in step_rows:
        if s.status != "ok":
            problems.append(RankProblem(path="", rank=s.rank, message=f"step {s.step} ({s.stage}): {s.status}: {s.note}"))
    if not step_rows:
        details = "; ".join(f"{p.path}: {p.message}" for p in problems) or "no steps found"
        raise AnalysisError(f"no rank could be analysed: {details}")
    if parts or digest is None:
        kernel_rows = LazyRows.of_columns(parts)
    else:  # the workers kept their rows: their digests' kernel table holds them
        kernel_rows = LazyRows.of_groups(digest.kernel_table, digest.rows)
    return AttributedRows(
        kernel_rows, step_rows, problems, total_bytes,
        failed_files=[shown_path(f"{files[i]}: {value}") for i, (ok, value) in sorted(results.items()) if not ok],
        chains=chains, rank_files={rank_id_for(f, labels.get(f), i).label: f for i, f in enumerate(files)},
        digest=digest)


def _refuse_the_same_trace_twice(files: list[str], results: dict[int, tuple]) -> None:
    """Two files holding the same kernels at the same times (RankTrace.content_key) are one rank
    given twice under two names, byte for byte or re-encoded: never two ranks summed."""
    seen: dict[str, int] = {}
    for i in sorted(results):
        ok, value = results[i]
        if not ok:
            continue
        first = seen.setdefault(value.content_key, i)
        if first != i:
            raise AnalysisError(f"{shown_path(files[first])} and {shown_path(files[i])} hold the same trace (the same "
                                "kernels at the same times) under two rank names: one rank's trace given twice; give "
                                "it once")


def _guarded(fn, args):
    try:
        return True, fn(*args)
    except TraceLoadError as exc:
        return False, exc.problem
    except AnalysisError as exc:
        return False, str(exc)


@contextlib.contextmanager
def _progress(enabled: bool, total: int):
    """A rich progress bar on stderr over ranks (yields: one rank done), or nothing. Redrawn when a rank
    is done, by no thread of its own: the rank workers are forked from this process, and a thread
    running there would be copied half-way through whatever it held."""
    if not enabled or not total:
        yield lambda: None
        return
    from rich.progress import Progress

    with Progress(transient=True, auto_refresh=False) as bar:
        task = bar.add_task(f"analysing {total} rank trace(s)", total=total)
        bar.refresh()
        yield lambda: (bar.advance(task), bar.refresh())
