"""Attributed rows into the analysis: the D4 column, the load comparison, the self-checks, SOL, the
collectives' wait / transfer and the step time. The one tail of `analyze` and of a run's nodes
combined (combine_nodes), so both tables are built alike."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from analysis.attribution.comm_split import CommRow, collectives_of, split_collectives
from analysis.ingest.expert_load import load_expert_load
from analysis.ingest.load_records import load_request_chunks
from analysis.tables.comm_table import with_comm
from analysis.tables.d4 import D4Column, build_column, render_markdown
from analysis.pipeline.lazy_rows import LazyRows
from analysis.pipeline.rank_digest import Digest
from analysis.tables.self_check_parts import RankChecks
from analysis.tables.self_checks import CheckRow, failed, run_checks, verdict_line
from analysis.tables.load_compare import compare_with_load
from analysis.tables.step_time import with_step_time
from analysis.errors import AnalysisError, shown_path
from analysis.analysis_options import AnalysisOptions
from analysis.ingest.model_spec import ModelSpec, load_model_spec
from analysis.ingest.rank_checks import check_rank_policy
from analysis.attribution.overlap import StreamSummary, stream_summary
from analysis.attribution.signature import Signature, load_signature
from analysis.sol.estimate import SolSettings
from analysis.attribution.rows import KernelRow, RankProblem, StepRow

if TYPE_CHECKING:
    from analysis.ingest.expert_load import ExpertLoad


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
    digest: Digest | None = None  # what the rank workers made of kernel_rows (analysis/pipeline/rank_digest.py)

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
    failed_files, chains: [rank, step, its chain] as the attribution cut each step, and digest: its
    ranks' digests, where `attribute` made them) into one analysis through combine_rows, the tail
    `analyze` uses. Where every node sent its digest, the tables are combined from the digests (node
    after node, as the rows come) and no kernel row is made here unless something reads one. The
    signature, the model, options.load_records and options.expert_load are loaded here, as `analyze`
    loads them."""
    sig, spec, requests, load = _tail_inputs(signature, model, options)
    digests = [part.get("digest") for part in node_results]
    digest: Digest | None = None
    if node_results and None not in digests:  # every node digested its ranks: no KernelRow read here
        digest = Digest()
        for part_digest in digests:
            digest.merge(part_digest)
        kernel_rows = LazyRows.of_groups(digest.kernel_table, digest.rows)
    else:
        kernel_rows = [r for part in node_results for r in part["kernel_rows"]]
    step_rows = [r for part in node_results for r in part["step_rows"]]
    problems = [p for part in node_results for p in part["problems"]]  # the self-checks add theirs over every node
    failed_files = [f for part in node_results for f in part.get("failed_files", [])]
    # the self-checks read each step's kernels in the order its cut read them (a two-batch-overlapped
    # step's micro-batch order), as `analyze` gives them
    chains = {(rank, step): chain for part in node_results for rank, step, chain in part.get("chains", [])}
    return combine_rows(kernel_rows, step_rows, problems, options, sig, spec, failed_files=failed_files,
                        requests=requests, expert_load=load, chains=chains, digest=digest)


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
    (analysis/pipeline/rank_digest.py), used where it holds as many rows."""
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
    collectives = digest.collectives if digest is not None else collectives_of(kernel_rows)
    comm_rows = split_collectives(kernel_rows, step_rows, collectives)
    d4 = with_comm(d4, comm_rows, step_rows, options.strict, expert_load)
    d4 = with_step_time(d4, step_rows, comm_rows, collectives, options.strict)
    return Analysis(options.run, sig.name, spec.name if spec else None, kernel_rows, step_rows, problems, d4, total_bytes,
                    comm_rows=comm_rows, checks=checks, digest=digest)


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
