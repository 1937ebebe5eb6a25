"""`moe-harness analyze`: trace files of one run in, D4 table and CSVs out; or a run directory, analysed
again as its run analysed it (harness/commands/analyze_run_dir.py)."""
from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

from harness.arg_types import positive_float, positive_int, rank_policy
from harness.commands import COMMANDS
from harness.commands.sol_options import DEPLOYMENT_FIELDS, add_sol_options, sol_settings_from
from harness.commands.result_printout import print_result
from harness.output_dir import OutputError, prepare_output


def add_overwrite_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overwrite", action="store_true",
                   help="--out may hold this command's own earlier output, which is replaced (never other files)")


def add_analysis_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--signature", default="generic",
                   help="built-in signature name or a YAML file (default: generic; see --list-signatures)")
    p.add_argument("--model", default=None, help="built-in model name (e.g. deepseek-v3) or a YAML file; checks layer counts")
    p.add_argument("--layers", type=positive_int, default=None,
                   help="decoder layers the model has (checks each step's layer count; overrides --model's)")
    p.add_argument("--strict", action="store_true",
                   help="leave steps whose layer count differs from the expected one out of the table, and fail "
                        "(exit 1, files still written) when a self-check fails (default: keep such steps, flag "
                        "mismatches and failed checks in the notes, problems.csv and checks.csv)")
    p.add_argument("--rank-policy", default="mean", type=rank_policy, help="combine ranks by mean, max, or rank:LABEL (default: mean)")
    from analysis.api import list_builtins

    p.add_argument("--stat", default="mean", choices=list(list_builtins("statistic")),
                   help="statistic over each rank's steps (analysis/data/tables/step_statistics.yaml; default: mean)")
    p.add_argument("--tbo", action="store_true", help="a signature's template with two-batch overlap: two anchors per layer (one per micro-batch); "
                        "the generic analysis finds two-batch overlap from the kernels itself (docs/analysis.md)")
    p.add_argument("--stage", choices=("extend", "decode", "target_verify"), default=None,
                   help="the stage the D4 table describes (default: MTP verify, else decode, else extend: the first "
                        "with usable steps); extend for a prefill window, which may hold decode steps too")
    p.add_argument("--accept-length", type=positive_float, default=None, help="MTP mean accept length (tokens per verify step), for time per accepted token; divides MTP (verify) "
                        "columns only: a plain decode step yields one token")
    p.add_argument("--capture-trace", action="append", default=[], metavar="FILE|DIR",
                   help="CUDA-graph capture trace(s) with module ranges (SGLang graph_capture_profile/, vLLM "
                        "capture_traces/, a file or a folder; repeatable): each replayed kernel is named by the "
                        "module that launched it during capture; one that cannot be used is reported, never skipped")
    p.add_argument("--attribution", default="auto", choices=["auto", "template", "modules"],
                   help="auto: module ranges, then capture trace, then the signature template (default)")
    p.add_argument("--step-gap-us", type=positive_float, default=1000.0, help="idle gap that starts a new step when traces carry no step markers")
    p.add_argument("--jobs", type=positive_int, default=None,
                   help="ranks analysed in parallel, one process each (default: one per core; 1: every rank "
                        "in this process; one rank is always analysed in this process)")
    p.add_argument("--lang", default="en", choices=["en", "zh"], help="table headings in English or Chinese (seed's headings)")
    add_sol_options(p)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze", help=COMMANDS["analyze"],
        description="Analyse PyTorch-profiler traces (.json/.json.gz, one per rank; a directory means its trace "
                    "files) into a per-layer D4 table. A run directory (a folder with the manifest.json that "
                    "harness/run.py writes), given alone, is analysed again from the traces it kept (traces/) with "
                    "the options its run recorded (scenario.yaml, manifest.json: signature, model, rank policy, "
                    "two-batch overlap, expert load, MTP accept length, SOL settings, capture traces where the run "
                    "calibrated, the column name): --out gets the files the run wrote into RUN_DIR/analysis and the "
                    "table is printed with the run's notes under it. With a run directory only --out, --overwrite "
                    "and --jobs may be given; to analyse its traces otherwise, give RUN_DIR/traces.")
    p.add_argument("traces", nargs="*", help="trace files or directories, or one run directory")
    p.add_argument("--out", default=None,
                   help="directory for d4.md, d4.csv, kernels_long.parquet (one row per kernel: docs/exports.md), "
                        "steps.csv, analysis.json and the other tables (a new or empty folder; see --overwrite)")
    add_overwrite_argument(p)
    p.add_argument("--name", default=None, help="column name in the D4 table (default: the first file's name)")
    p.add_argument("--label", action="append", default=[], metavar="FILE=LABEL", help="explicit rank label for a file")
    p.add_argument("--list-signatures", action="store_true", help="list built-in signatures and models, then exit")
    p.add_argument("--expert-load", default=None, metavar="FILE",
                   help="a run's expert_load/expert_load.json: per MoE layer the busiest expert's tokens against "
                        "the mean, beside the dispatch and combine wait / transfer")
    p.add_argument("--load-records", default=None, metavar="FILE",
                   help="a run's load/requests.jsonl: the profiled steps' time per token against the ITL and TPOT the "
                        "load measured before the profile window, the difference named profiler overhead (checked by "
                        "the profiler_overhead self-check)")
    p.add_argument("--window-start-s", type=float, default=None, metavar="S",
                   help="with --load-records: when the profile window opened, in seconds on the load's clock (a run's "
                        "manifest.json profile.window_load_s[0]); default: found from the profiled steps' cadence")
    add_analysis_options(p)
    # None marks an option not given, so a run directory can refuse the ones that would change its analysis
    p.set_defaults(func=run, option_defaults={dest: p.get_default(dest) for dest in RUN_RECORDED},
                   **{dest: None for dest in RUN_RECORDED})


# Options whose value a run directory brings (its recorded analysis) or that change what is written.
RUN_RECORDED = ("signature", "model", "layers", "strict", "rank_policy", "stat", "tbo", "accept_length",
                "capture_trace", "attribution", "step_gap_us", "lang", "name", "label", "expert_load", "hardware",
                *DEPLOYMENT_FIELDS)


def options_given(args) -> list[str]:
    """The RUN_RECORDED options given on the command line (as --flags); the others get their defaults."""
    given = [f"--{dest.replace('_', '-')}" for dest in RUN_RECORDED if getattr(args, dest) is not None]
    for dest, default in args.option_defaults.items():
        if getattr(args, dest) is None:
            setattr(args, dest, default)
    return given


def options_from(args, run_name: str, labels: dict[str, str] | None = None):
    """AnalysisOptions from the command line; SOL shapes come from --model (default deepseek-v3)."""
    from analysis.api import AnalysisOptions

    return AnalysisOptions(run=run_name, rank_policy=args.rank_policy, stat=args.stat, labels=labels,
                           capture_traces=args.capture_trace, accept_length=args.accept_length, tbo=args.tbo, stage=args.stage,
                           jobs=args.jobs, step_gap_us=args.step_gap_us, attribution=args.attribution,
                           sol=sol_settings_from(args, model=args.model), layers=args.layers, strict=args.strict)


def _is_pipe(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def run(args) -> int:
    from analysis.api import AnalysisError, analyze, list_builtins

    given = options_given(args)
    if args.list_signatures:
        print("signatures:")
        for name, evidence in list_builtins("signature").items():
            print(f"  {name}: {evidence}")
        print("models:", ", ".join(list_builtins("model")))
        return 0
    if not args.traces:
        print("moe-harness analyze: give at least one trace file or directory", file=sys.stderr)
        return 2
    from harness.recorded_run import is_run_dir

    if any(is_run_dir(p) for p in args.traces):
        from harness.commands.analyze_run_dir import analyze_run_dir

        return analyze_run_dir(args, given)
    labels = {}
    for item in args.label:
        path, sep, label = item.rpartition("=")
        if not sep:
            print(f"moe-harness analyze: --label wants FILE=LABEL, got {item!r}", file=sys.stderr)
            return 2
        labels[path] = label
    name = args.name or Path(args.traces[0]).name.split(".trace")[0].split(".json")[0]  # shown escaped if not UTF-8
    from analysis.api import check_input

    for flag, value, kind in (("--expert-load", args.expert_load, "expert_load"),
                              ("--load-records", args.load_records, "load_records")):
        if value and not _is_pipe(value):  # a pipe reads once: the analysis reads it, and says what is wrong
            try:
                check_input(kind, value)  # a bad file is the user's input: exit 2 before any trace is read
            except AnalysisError as exc:
                print(f"moe-harness analyze: {flag}: {exc}", file=sys.stderr)
                return 2
    if args.window_start_s is not None and not args.load_records:
        print("moe-harness analyze: --window-start-s needs --load-records", file=sys.stderr)
        return 2
    try:
        out = prepare_output(args.out, "analyze", args.overwrite) if args.out else None
    except OutputError as exc:
        print(f"moe-harness analyze: {exc}", file=sys.stderr)
        return 2
    try:
        options = options_from(args, name, labels)
        options.expert_load = args.expert_load
        options.load_records = args.load_records
        options.window_start_s = args.window_start_s
        result = analyze(args.traces, signature=args.signature, model=args.model,
                         options=options, progress=sys.stderr.isatty())
    except AnalysisError as exc:
        print(f"moe-harness analyze: {exc}", file=sys.stderr)
        return 2
    print_result(result, result.markdown(args.lang))
    if out is not None:
        from analysis.api import write_outputs

        written, files = out.write_or_say(lambda folder: write_outputs(result, folder, args.lang))
        if not written:
            return 2
        print(f"wrote {len(files)} files to {args.out}", file=sys.stderr)
    if args.strict and result.failed_checks:
        names = ", ".join(f"{c.check} ({c.value})" for c in result.failed_checks)
        print(f"moe-harness analyze: --strict: self-check failed: {names}", file=sys.stderr)
        return 1
    return 0

