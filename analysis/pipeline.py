"""The analysis pipeline: trace files in, tables and D4 column out (analyze; for a run across nodes
attribute, then combine_rows); writing and reading analysis dirs. The harness reaches it through
analysis/api.py."""
from __future__ import annotations

import csv
import dataclasses
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from analysis.attribution.rank.attribute import ATTRIBUTION_MODES, RankOptions, attribute_rank
from analysis.attribution.capture import capture_files, capture_rank, load_capture
from analysis.attribution.comm_split import CommRow, collectives_of, split_collectives
from analysis.ingest.expert_load import load_expert_load
from analysis.ingest.load_records import load_request_chunks
from analysis.tables.comm_table import with_comm
from analysis.tables.d4 import STATS, D4Column, build_column, render_markdown, write_table_csv
from analysis.tables.d4_cells import flat_stats, nested_stats
from analysis.tables.d4_detail import write_detail
from analysis.tables.encoded_rows import EncodedRows
from analysis.tables.forked_encoding import ForkedEncoding
from analysis.tables.kernel_table import KERNEL_TABLE, write_kernel_table
from analysis.io.parquet_writer import RowGroup
from analysis.tables.rank_digest import Digest, RankDigest
from analysis.tables.self_check_parts import RankChecks
from analysis.tables.self_checks import CheckRow, failed, run_checks, verdict_line
from analysis.tables.load_compare import compare_with_load
from analysis.tables.step_time import with_step_time
from analysis.errors import AnalysisError, TraceLoadError, shown_path
from analysis.io.atomic_files import write_atomically
from analysis.io.input_files import DOCUMENT_LIMIT_BYTES, read_input
from analysis.forked_call import cores_for, fork_allowed
from analysis.gc_paused import gc_paused
from analysis.trace_paths import TRACE_SUFFIXES, expand_paths
from analysis.analysis_options import AnalysisOptions
from analysis.ingest.model_spec import ModelSpec, load_model_spec
from analysis.attribution.module_attribution import build_capture_map
from analysis.ingest.rank_id import rank_id_for
from analysis.ingest.rank_checks import check_numbers, check_rank_identity, check_rank_policy
from analysis.attribution.overlap import StreamSummary, stream_summary
from analysis.attribution.signature import Signature, load_signature
from analysis.sol.estimate import SolSettings
from analysis.attribution.rows import KernelRow, RankProblem, StepRow
from analysis.ingest.trace_loader import load_trace

if TYPE_CHECKING:
    from analysis.ingest.expert_load import ExpertLoad
    from analysis.report.report_pipeline import ReportSource

ANALYSIS_FILE = "analysis.json"


@dataclass
class Analysis:
    run: str
    signature: str
    model: str | None
    kernel_rows: list[KernelRow]
    step_rows: list[StepRow]
    problems: list[RankProblem]
    d4: D4Column
    json_bytes: int = 0
    comm_rows: list[CommRow] = field(default_factory=list)  # comm.csv: collectives split into wait / transfer
    checks: list[CheckRow] = field(default_factory=list)  # the self-checks (checks.csv)
    digest: Digest | None = None  # what the rank workers made of kernel_rows (analysis/tables/rank_digest.py)

    @property
    def failed_checks(self) -> list[CheckRow]:
        return failed(self.checks)

    @property
    def digest_of_rows(self) -> Digest | None:
        """The workers' digest, where it was made of kernel_rows as they are now (a caller may filter them)."""
        return self.digest if self.digest is not None and self.digest.holds(self.kernel_rows) else None

    def markdown(self, lang: str = "en") -> str:
        """The D4 table as markdown (en or zh), as d4.md holds it."""
        return render_markdown([self.d4], lang)

    def check_profiled_batch(self, expected: tuple[int, int] | None):
        """The profiled decode / verify steps' batch sizes against the expected (fewest, most) requests
        per scheduler (analysis/tables/profiled_batch.py); the steps outside it join the problems.
        Returns the check (its summary and note)."""
        from analysis.tables.profiled_batch import check_profiled_batch

        check = check_profiled_batch(self.step_rows, expected)
        self.problems.extend(RankProblem(path="", rank=rank, message=f"profiled batch: {message}")
                             for rank, message in check.problems())
        return check

    @functools.cached_property
    def streams(self) -> list[StreamSummary]:
        """Busy and exposed time per (rank, stream): streams.csv and the printout, summed once."""
        digest = self.digest_of_rows
        return digest.streams if digest is not None else stream_summary(self.kernel_rows)


class _RankResult(NamedTuple):
    """One rank, loaded and attributed (what a worker process sends back)."""
    kernel_rows: list[KernelRow]  # RowColumns on the way back from a worker
    step_rows: list[StepRow]
    json_bytes: int
    label: str
    notes: list[str]
    chains: dict[int, list[int]]
    content_key: str
    digest: RankDigest | None = None  # what a worker made of the rows for the tables (workers only)


def _analyze_one(path: str, label: str | None, index: int, sig_ref: str, model_ref: str | None,
                 rank_options: RankOptions, capture_refs: list[str]) -> _RankResult:
    """Load and attribute one rank (runs in a worker process when several ranks are given)."""
    with gc_paused():
        return _load_and_attribute(path, label, index, sig_ref, model_ref, rank_options, capture_refs)


def _analyze_one_in_worker(*args) -> _RankResult:
    """_analyze_one in a worker process, which also makes the rank's digest there, beside the other
    ranks' workers (analysis/tables/rank_digest.py). The rows go back as columns
    (analysis/attribution/row_columns.py), cheaper to pickle, or, with send_rows False, not at all:
    the digest's encoded kernel table holds them (analysis/tables/encoded_rows.py).
    args: _analyze_one's, then --strict, the preferred table stage and send_rows."""
    from analysis.attribution.row_columns import RowColumns
    from analysis.tables.rank_digest import digest_rank

    *rank_args, strict, prefer_stage, send_rows = args
    with gc_paused():
        value = _load_and_attribute(*rank_args)
        digest = digest_rank(value.label, value.kernel_rows, value.step_rows, value.chains, strict, prefer_stage)
        return value._replace(kernel_rows=RowColumns(value.kernel_rows) if send_rows else None, digest=digest)


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
    trace = load_trace(path, rank=rank, second_core=rank_options.helpers)  # one rank: both cores read it
    options = dataclasses.replace(rank_options, notes=[], chains={}, release_kernels=True)
    kernel_rows, step_rows = attribute_rank(trace, sig, model, options, capture, captures)
    return _RankResult(kernel_rows, step_rows, trace.json_bytes, trace.rank.label, options.notes, options.chains,
                       trace.content_key)


def _capture_files_for_rank(files: list[Path], rank, index: int) -> list[Path]:
    """The capture traces of this rank (by the rank in their file names), or all of them when no
    name says; chosen before any is read, so each rank reads only its own."""
    number = rank.tp if rank.tp is not None else index
    ranks = [capture_rank(f) for f in files]
    own = [f for f, r in zip(files, ranks) if r == number]
    return own if own or any(r is not None for r in ranks) else files


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


def _cores(options: AnalysisOptions) -> int:
    """Processes the analysis may use: --jobs, else the cores this process may run on."""
    return cores_for(options.jobs)


@dataclass
class AttributedRows:
    """Every rank's attributed rows, before any table: what a node hands on to be combined."""
    kernel_rows: list[KernelRow]
    step_rows: list[StepRow]
    problems: list[RankProblem]  # per rank and per step; the self-checks add theirs when the rows are combined
    total_bytes: int = 0
    failed_files: list[str] = field(default_factory=list)  # "path: why" of each rank that could not be analysed
    chains: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # (rank, step) -> its chain
    rank_files: dict[str, str] = field(default_factory=dict)  # rank label -> its trace file
    digest: Digest | None = None  # what the rank workers made of the rows, when every rank had one


def attribute(paths: list[str], signature: str = "generic", model: str | None = None,
              options: AnalysisOptions | None = None, progress: bool = False) -> AttributedRows:
    """Load and attribute one trace set (one file per rank) without building the tables: a run's node
    does this for its own ranks, and `combine_rows` builds the table over every node's rows."""
    with gc_paused():
        return _attribute(paths, signature, model, _shown_options(options or AnalysisOptions()), progress)


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
    """`checked`: the caller has read the signature and model already. `send_rows` False: rank
    workers keep their rows in their digests' encoded kernel table, decoded only where read."""
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
                               attribution=options.attribution, layers=options.layers,
                               helpers=len(files) == 1 and _cores(options) > 1)  # one rank: a second core names steps
    labels = options.labels or {}
    jobs = options.jobs or min(len(files), _cores(options))
    chains: dict[tuple[str, int], list[int]] = {}  # (rank, step) -> its chain, from the structural cut
    kernel_rows: list[KernelRow] = []
    step_rows: list[StepRow] = []
    problems: list[RankProblem] = []
    total_bytes = 0
    args = [(f, labels.get(f), i, signature, model, rank_options, options.capture_traces) for i, f in enumerate(files)]
    results: dict[int, tuple] = {}
    with _progress(progress, len(files)) as advance:
        if jobs <= 1 or len(files) == 1:
            for i, a in enumerate(args):
                results[i] = _guarded(_analyze_one, a)
                advance()
        else:  # imported here: a one-rank run does not pay for the process pool's imports
            from concurrent.futures import ProcessPoolExecutor, as_completed

            with ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = {pool.submit(_guarded, _analyze_one_in_worker, (*a, options.strict, options.stage, send_rows)): i
                           for i, a in enumerate(args)}
                for fut in as_completed(futures):
                    ok, value = fut.result()
                    if ok and value.kernel_rows is not None:
                        value = value._replace(kernel_rows=value.kernel_rows.take_rows())
                    results[futures[fut]] = (ok, value)
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
                kernel_rows.extend(k_rows)
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
    if not send_rows and digest is not None and digest.rows and not kernel_rows:
        kernel_rows = EncodedRows(digest.kernel_table, digest.rows)
    return AttributedRows(
        kernel_rows, step_rows, problems, total_bytes,
        failed_files=[shown_path(f"{files[i]}: {value}") for i, (ok, value) in sorted(results.items()) if not ok],
        chains=chains, rank_files={rank_id_for(f, labels.get(f), i).label: f for i, f in enumerate(files)},
        digest=digest)


def _tail_inputs(signature: str, model: str | None, options: AnalysisOptions, check_sol: bool = False):
    """What the pipeline's tail reads besides the rows, by reference: (the signature, the model spec
    or None, the load's request log or None, the expert load or None); `analyze` reads them before
    any trace (and with check_sol its SOL settings are checked, after the model), `combine_nodes`
    before joining the nodes' rows."""
    sig: Signature = load_signature(signature)
    spec: ModelSpec | None = load_model_spec(model) if model else None
    if check_sol and options.sol is not None:
        _check_sol(options.sol)
    load = load_expert_load(options.expert_load) if options.expert_load else None
    requests = load_request_chunks(options.load_records) if options.load_records else None
    return sig, spec, requests, load


def combine_nodes(node_results: list[dict], options: AnalysisOptions, signature: str,
                  model: str | None = None) -> Analysis:
    """Rows attributed node by node (`attribute`'s, one dict per node: kernel_rows, step_rows, problems,
    failed_files) into one analysis through combine_rows, the tail `analyze` uses; the signature, the
    model, options.load_records and options.expert_load are loaded here, as `analyze` loads them."""
    sig, spec, requests, load = _tail_inputs(signature, model, options)
    kernel_rows = [r for part in node_results for r in part["kernel_rows"]]
    step_rows = [r for part in node_results for r in part["step_rows"]]
    problems = [p for part in node_results for p in part["problems"]]  # the self-checks add theirs over every node
    failed_files = [f for part in node_results for f in part.get("failed_files", [])]
    return combine_rows(kernel_rows, step_rows, problems, options, sig, spec, failed_files=failed_files,
                        requests=requests, expert_load=load)


def combine_rows(kernel_rows: list[KernelRow], step_rows: list[StepRow], problems: list[RankProblem],
                 options: AnalysisOptions, sig: Signature, spec: ModelSpec | None, total_bytes: int = 0,
                 failed_files: list[str] | None = None, requests=None, expert_load: ExpertLoad | None = None,
                 chains: dict[tuple[str, int], list[int]] | None = None,
                 rank_files: dict[str, str] | None = None, digest: Digest | None = None) -> Analysis:
    """Attributed rows (one process's ranks, or every node's) into the analysis: the D4 column, the
    load comparison, the self-checks, SOL, the collectives' wait / transfer and the step time. The one
    tail of `analyze` and of a run's nodes combined, so both tables are built alike.
    `problems` gains the failed self-checks; `chains` (per rank and step, from the attribution)
    spares the checks reading them again; `digest`: what rank workers already made of the rows
    (analysis/tables/rank_digest.py), used where it holds as many rows."""
    if digest is not None and not digest.holds(kernel_rows):
        digest = None
    check_rank_policy(options.rank_policy, {s.rank for s in step_rows})
    d4 = build_column(kernel_rows, step_rows, name=options.run, stat=options.stat, rank_policy=options.rank_policy,
                      accept_length=options.accept_length, row_order=sig.template_order(), signature=sig.name,
                      signature_evidence=sig.evidence,
                      model=spec.name if spec else None, strict=options.strict,
                      cells=digest.cells if digest is not None else None,
                      share=digest.share if digest is not None else None, prefer_stage=options.stage)
    d4.failed_files = list(failed_files or [])
    if not d4.steps_used:
        raise AnalysisError(_no_usable_steps(step_rows, d4.stage, options.strict, sig))
    if requests is not None:
        d4.load = compare_with_load(d4, step_rows, requests, options.window_start_s, options.strict)
    d4, checks = apply_self_checks(kernel_rows, step_rows, d4, spec, options.layers, options.strict, problems, chains,
                                   rank_files, digest.checks if digest is not None else None)
    if options.sol is not None:
        from analysis.tables.d4_sol import with_sol

        d4 = with_sol(d4, options.sol)
    # each rank's collectives before the split, made once: the split and the step time's waits read them
    collectives = digest.collectives if digest is not None else None
    if collectives is None:
        collectives = collectives_of(kernel_rows)
    comm_rows = split_collectives(kernel_rows, step_rows, collectives)
    d4 = with_comm(d4, comm_rows, step_rows, options.strict, expert_load)
    d4 = with_step_time(d4, step_rows, comm_rows, collectives, options.strict)
    return Analysis(options.run, sig.name, spec.name if spec else None, kernel_rows, step_rows, problems, d4, total_bytes,
                    comm_rows=comm_rows, checks=checks, digest=digest)


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


SELF_CHECK_PROBLEM = "self-check "  # how a failed check's line in problems.csv begins


def apply_self_checks(kernel_rows: list[KernelRow], step_rows: list[StepRow], d4: D4Column, spec: ModelSpec | None,
                      layers: int | None, strict: bool, problems: list[RankProblem],
                      chains: dict[tuple[str, int], list[int]] | None = None,
                      rank_files: dict[str, str] | None = None,
                      check_parts: dict[str, RankChecks] | None = None) -> tuple[D4Column, list[CheckRow]]:
    """Run the self-checks on a built column: its verdict line set, each failed check added to problems,
    naming the files of the ranks it mentions (rank_files: rank label -> trace file)."""
    checks = run_checks(kernel_rows, step_rows, d4, spec, layers, strict, chains, check_parts)
    d4 = msgspec.structs.replace(d4, checks=verdict_line(checks), failed_checks=[c.check for c in failed(checks)])
    for c in failed(checks):
        said = f"{c.scope} {c.value} {c.why}"
        files = [shown_path(f) for label, f in (rank_files or {}).items()
                 if re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", said)]
        problems.append(RankProblem(path=", ".join(files), rank=c.scope,
                                    message=f"{SELF_CHECK_PROBLEM}{c.check} failed: {c.value}, expected {c.expected}"
                                            + (f"; {c.why}" if c.why else "")))
    return d4, checks


def _no_usable_steps(step_rows: list[StepRow], stage: str, strict: bool, sig: Signature) -> str:
    """Why no step could make the table (instead of a table of zeros)."""
    steps = [s for s in step_rows if s.stage == stage]
    statuses = {st: sum(1 for s in steps if s.status == st) for st in sorted({s.status for s in steps})}
    if statuses.get("no_layers") == len(steps):
        if not sig.generic:
            anchor = sig.layer[sig.anchor_index]
            return (f"no layers found in any of the {len(steps)} {stage} steps: signature {sig.name}'s anchor "
                    f"{anchor.module} / {anchor.kernel} (match {anchor.match!r}) matches no kernel of the trace; "
                    "try the default (no --signature) or a signature of this stack")
        return f"no layers found in any of the {len(steps)} {stage} steps: no attention core or repeating layer pattern"
    mismatched = [s for s in steps if s.status == "layer_count_mismatch"]
    if strict and mismatched:
        found = "/".join(str(n) for n in sorted({s.layers_found for s in mismatched}))
        expected = "/".join(str(n) for n in sorted({s.layers_expected for s in mismatched if s.layers_expected}))
        return (f"--strict left out all {len(steps)} {stage} steps: their layer count differs from the expected one "
                f"(found {found}, expected {expected}; {mismatched[0].note.split('; ')[-1]}); check --layers / --model, "
                "or drop --strict to see the table with the mismatch flagged")
    return f"no usable {stage} step: " + ", ".join(f"{n} {st}" for st, n in statuses.items())


def _check_sol(settings: SolSettings) -> None:
    """Bad hardware, shapes or deployment fail before any trace is parsed."""
    from analysis.sol.hardware import load_hardware
    from analysis.sol.model_shapes import load_model_shapes

    load_hardware(settings.hardware)
    try:
        load_model_shapes(settings.model)
    except AnalysisError as exc:
        raise AnalysisError(f"SOL columns need model shapes (the SOL model covers DeepSeek-V3-style models "
                            f"with a `shapes:` file: deepseek-v3, deepseek-v3-wide4): {exc}") from None
    settings.deployment.validate()


def _guarded(fn, args):
    try:
        return True, fn(*args)
    except TraceLoadError as exc:
        return False, exc.problem
    except AnalysisError as exc:
        return False, str(exc)


class _progress:
    """A rich progress bar on stderr over ranks, or nothing. Redrawn when a rank is done, by no thread
    of its own: a running thread would keep a rank's helper process from being forked (forked_call.py)."""

    def __init__(self, enabled: bool, total: int):
        self.enabled = enabled and total > 0
        self.total = total

    def __enter__(self):
        if not self.enabled:
            return lambda: None
        from rich.progress import Progress

        self._bar = Progress(transient=True, auto_refresh=False)
        self._bar.__enter__()
        task = self._bar.add_task(f"analysing {self.total} rank trace(s)", total=self.total)
        self._bar.refresh()

        def advance() -> None:
            self._bar.advance(task)
            self._bar.refresh()
        return advance

    def __exit__(self, *exc):
        if self.enabled:
            self._bar.__exit__(*exc)
        return False


# ---------------------------------------------------------------- writing / reading


def _write_structs(path: Path, rows: list, cls) -> None:
    fields = list(cls.__struct_fields__)

    def write(fh):
        out = csv.writer(fh)
        out.writerow(fields)
        for row in rows:
            out.writerow([getattr(row, f) if getattr(row, f) is not None else "" for f in fields])

    write_atomically(path, write, binary=False)


def write_kernel_table_file(path: Path, rows: list[KernelRow], encoded: list[RowGroup] | None = None) -> None:
    """kernels_long.parquet of these rows (as write_outputs writes it); `encoded`: the same rows
    already encoded (Analysis.digest_of_rows)."""
    write_atomically(Path(path), lambda fh: write_kernel_table(fh, rows, encoded))


def write_outputs(analysis: Analysis, out_dir: str | Path, lang: str = "en") -> dict[str, Path]:
    """d4.md, d4.csv, d4_detail.csv, kernels_long.parquet, steps.csv, streams.csv, problems.csv, comm.csv,
    checks.csv, analysis.json."""
    out = Path(out_dir)
    names = ("d4.md", "d4.csv", "d4_detail.csv", KERNEL_TABLE, "steps.csv", "streams.csv", "problems.csv",
             "comm.csv", "checks.csv", ANALYSIS_FILE)
    files = {name: out / name for name in names}
    _write_structs(files["comm.csv"], analysis.comm_rows, CommRow)
    _write_structs(files["streams.csv"], analysis.streams, StreamSummary)
    digest = analysis.digest_of_rows
    write_kernel_table_file(files[KERNEL_TABLE], analysis.kernel_rows, digest.kernel_table if digest is not None else None)
    _write_structs(files["steps.csv"], analysis.step_rows, StepRow)
    _write_structs(files["problems.csv"], analysis.problems, RankProblem)
    _write_structs(files["checks.csv"], analysis.checks, CheckRow)
    write_table_csv(files["d4.csv"], [analysis.d4], lang)
    write_atomically(files["d4.md"], lambda fh: fh.write(render_markdown([analysis.d4], lang)), binary=False)

    write_atomically(files["d4_detail.csv"], lambda fh: write_detail(fh, analysis.d4), binary=False)
    summary = {"run": analysis.run, "signature": analysis.signature, "model": analysis.model, "d4": analysis.d4,
               "problems": analysis.problems, "steps": len(analysis.step_rows),
               "checks": {"verdict": verdict_line(analysis.checks), "failed": [c.check for c in analysis.failed_checks],
                          "rows": analysis.checks}}
    text = msgspec.json.format(msgspec.json.encode(flat_stats(msgspec.to_builtins(summary))).decode(), indent=2)
    write_atomically(files[ANALYSIS_FILE], lambda fh: fh.write(text), binary=False)
    return files


class _Saved(msgspec.Struct):
    run: str
    signature: str
    model: str | None
    d4: D4Column


def load_column(analysis_dir: str | Path) -> D4Column:
    """The D4 column saved by write_outputs, for `compare`."""
    path = Path(analysis_dir) / ANALYSIS_FILE
    if not path.exists():
        raise AnalysisError(f"{shown_path(analysis_dir)}: not an analysis directory (no {ANALYSIS_FILE})")
    try:
        saved = msgspec.json.decode(read_input(path, DOCUMENT_LIMIT_BYTES, "an analysis.json"))
        return msgspec.convert(nested_stats(saved), _Saved).d4
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise AnalysisError(f"{shown_path(path)}: unreadable analysis file: {exc}") from None
    except RecursionError:
        raise AnalysisError(f"{shown_path(path)}: unreadable analysis file: nested too deeply") from None


def saved_rows(analysis_dir: str | Path, like: D4Column) -> tuple[list[KernelRow], list[StepRow], str, D4Column] | None:
    """An analysis folder's kernel and step rows (its kernel table and steps.csv), where it has both:
    (kernel rows, step rows, the table's path, the D4 column built again from them with `like`'s
    statistic and rank policy); None without them."""
    from analysis.tables.kernel_table import kernel_table_in, read_kernel_rows
    from analysis.tables.struct_csv import read_struct_csv

    table, steps_csv = kernel_table_in(analysis_dir), Path(analysis_dir) / "steps.csv"
    if table is None or not steps_csv.is_file():
        return None
    kernel_rows, step_rows = read_kernel_rows(table), read_struct_csv(steps_csv, StepRow)
    return kernel_rows, step_rows, str(table), column_from_rows(kernel_rows, step_rows, like)


def column_from_rows(kernel_rows: list[KernelRow], step_rows: list[StepRow], like: D4Column) -> D4Column:
    """The D4 column (kernel, MTP and wait / transfer rows) built again from saved rows with a saved
    column's statistic and rank policy: what an older analysis needs for its per-step spreads."""
    column = build_column(kernel_rows, step_rows, name=like.name, stat=like.stat, rank_policy=like.rank_policy,
                          accept_length=like.accept_length, prefer_stage=like.stage)
    return with_comm(column, split_collectives(kernel_rows, step_rows), step_rows)


def report_reads(folder: str | Path) -> list[Path] | None:
    """The analysis files a report reads from a folder (its kernel table, and d4_detail.csv and
    analysis.json where present), for a caller to check before; None when the folder has no kernel
    table, so it is not an analysis folder the report can read."""
    from analysis.tables.kernel_table import kernel_table_in

    table = kernel_table_in(folder)
    if table is None:
        return None
    return [table, *(p for p in (Path(folder) / "d4_detail.csv", Path(folder) / ANALYSIS_FILE) if p.exists())]


def report_source(paths: list[Path], signature: str) -> ReportSource:
    """What `report` reads: one analysis folder's tables (report_reads), or trace files (the files
    given, or those under one folder) analysed with the signature. A bad input is an AnalysisError
    naming it."""
    from analysis.report.report_pipeline import source_from_analysis_dir

    paths = [Path(p) for p in paths]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise AnalysisError(f"no such file or directory: {', '.join(missing)}")
    if len(paths) == 1 and paths[0].is_dir():
        if report_reads(paths[0]) is not None:
            return source_from_analysis_dir(paths[0])
        traces = sorted(p for p in paths[0].rglob("*") if p.name.endswith(TRACE_SUFFIXES) and p.is_file())
        if not traces:
            raise AnalysisError(f"{paths[0]}: neither {KERNEL_TABLE} (or analysis/{KERNEL_TABLE}, or an older "
                                "analysis's kernels_long.csv) nor trace files inside")
        paths = traces
    bad = [str(p) for p in paths if not p.name.endswith(TRACE_SUFFIXES)]
    if bad:
        raise AnalysisError(f"not trace files (.json/.json.gz): {', '.join(bad)}")
    return report_source_from_traces(paths, signature)


def report_source_from_traces(paths: list[Path], signature: str) -> ReportSource:
    """What `report` reads from trace files (analysis/report/report_pipeline.py): the traces analysed
    (steps, D4 rows); if no rank can be analysed, every kernel of each file counts."""
    from analysis.report.report_pipeline import ReportSource
    from analysis.report.top_kernels import samples_from_rows, samples_from_traces

    got = ReportSource()
    try:
        result = analyze([str(p) for p in paths], signature=signature, options=AnalysisOptions(run="report", jobs=1))
    except AnalysisError as exc:
        got.notes.append(f"The traces could not be analysed into steps ({exc}); every kernel in each file counts, "
                         "its stage from the file name, and there are no D4 rows.")
    else:
        got.kernel_rows = result.kernel_rows
        got.samples = samples_from_rows(result.kernel_rows)
        got.sources = [str(p) for p in paths if str(p) not in {pr.path for pr in result.problems}]
        got.d4_rows = [{"group": r.group, "module": r.module, "kernel": r.kernel, "value_us": r.value_us,
                        "layers": r.layers} for r in result.d4.rows]
        got.step_ms = result.d4.step_ms or None
        got.notes.append(f"Analysed here with the `{signature}` signature: {len(result.step_rows)} steps, "
                         f"stage {result.d4.stage}, step {result.d4.step_ms:.2f} ms (`moe-harness analyze` gives the D4 table).")
        got.notes += [f"Skipped {pr.path or pr.rank}: {pr.message}" for pr in result.problems]
        return got
    loaded = []
    for p in paths:
        try:
            loaded.append(load_trace(str(p)))
            got.sources.append(str(p))
        except TraceLoadError as exc:  # e.g. a .json side file in a trace directory
            got.notes.append(f"Skipped {exc}")
    if not loaded:
        raise AnalysisError("no readable trace among the inputs: " + "; ".join(got.notes))
    got.samples = samples_from_traces(loaded)
    return got


