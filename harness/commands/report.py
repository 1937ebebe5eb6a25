"""`moe-harness report`: the kernel-level report (top kernels, SOL, what-if, Nsight Compute).

Input is an analysis directory (kernels_long.csv, with d4_detail.csv and analysis.json when the
analysis wrote them) or trace files (top kernels only). Writes kernel_report.md, its PNGs, and a
self-contained kernel_report.html.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

from analysis.errors import AnalysisError

TRACE_SUFFIXES = (".json", ".json.gz")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="write the kernel-level report (top kernels, speed of light, what-if, Nsight Compute)",
        description="Kernel report from an analysis directory (kernels_long.csv [+ d4_detail.csv, analysis.json]) "
                    "or from trace files (top kernels only). SOL columns need --batch-per-rank and --kv-len.")
    p.add_argument("inputs", nargs="+", help="an analysis directory, or trace files (.json / .json.gz)")
    p.add_argument("--out", default=None,
                   help="output directory (default: the analysis directory; for traces a new kernel-report-TIME directory)")
    p.add_argument("--top", type=int, default=20, help="kernels per stage (default: 20)")
    p.add_argument("--ncu", default=None, metavar="CSV", help="Nsight Compute export (ncu --csv --page raw)")
    p.add_argument("--hardware", default=None, help="h800, h100, h200, b200 or a YAML file (needed for SOL and roofline)")
    p.add_argument("--model", default="deepseek-v3", help="model shapes for SOL (default: deepseek-v3)")
    p.add_argument("--batch-per-rank", type=int, default=None, help="requests per attention rank (enables SOL)")
    p.add_argument("--kv-len", type=int, default=None, help="mean KV-cache length in tokens (enables SOL)")
    p.add_argument("--tp", type=int, default=1, help="attention tensor parallelism (default 1)")
    p.add_argument("--dp", type=int, default=1, help="attention data parallelism (default 1)")
    p.add_argument("--ep", type=int, default=1, help="expert parallelism (default 1)")
    p.add_argument("--mtp-draft-tokens", type=int, default=0, help="MTP draft tokens verified per request (default 0)")
    p.add_argument("--weight-dtype", default="fp8", choices=["fp8", "bf16"])
    p.add_argument("--kv-dtype", default="bf16", choices=["fp8", "bf16"])
    p.add_argument("--ncu-dtype", default="bf16", choices=["fp8", "bf16"], help="compute peak for the roofline (default bf16)")
    p.set_defaults(func=run)


def _read_d4_detail(path: Path) -> list[dict]:
    rows = []
    with path.open(newline="") as handle:
        for line_no, rec in enumerate(csv.DictReader(handle), start=2):
            try:
                rows.append({"group": rec["group"], "module": rec["module"], "kernel": rec["kernel"],
                             "value_us": float(rec["value_us"]), "layers": float(rec.get("layers") or 0)})
            except (KeyError, ValueError) as exc:
                raise AnalysisError(f"{path}: line {line_no}: bad D4 row ({exc})") from None
    return rows


def _step_ms(analysis_dir: Path) -> float | None:
    path = analysis_dir / "analysis.json"
    if not path.exists():
        return None
    try:
        value = json.loads(path.read_text()).get("d4", {}).get("step_ms")
    except (OSError, ValueError) as exc:
        raise AnalysisError(f"{path}: unreadable: {exc}") from None
    return float(value) if value else None


def _new_out_dir() -> Path:
    base = Path(f"kernel-report-{time.strftime('%Y%m%d-%H%M%S')}")
    out, n = base, 1
    while out.exists():
        n += 1
        out = Path(f"{base}-{n}")
    return out


def build(args) -> tuple[list, Path, str]:
    from analysis.hardware import load_hardware
    from analysis.kernel_report import ReportInputs, build_report
    from analysis.kernel_rows_csv import read_kernel_rows
    from analysis.ncu import classify, read_ncu_csv
    from analysis.sol import Deployment, layer_sol, sol_for_d4_rows
    from analysis.top_kernels import samples_from_rows, samples_from_traces, top_kernels
    from analysis.trace_loader import load_trace
    from analysis.whatif import what_if_at_sol

    paths = [Path(p) for p in args.inputs]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise AnalysisError(f"no such file or directory: {', '.join(missing)}")
    analysis_dir = paths[0] if len(paths) == 1 and paths[0].is_dir() else None
    notes, d4_rows, step_ms = [], None, None
    if analysis_dir is not None:
        long_csv = analysis_dir / "kernels_long.csv"
        if long_csv.exists():
            samples = samples_from_rows(read_kernel_rows(long_csv))
            if (analysis_dir / "d4_detail.csv").exists():
                d4_rows = _read_d4_detail(analysis_dir / "d4_detail.csv")
            step_ms = _step_ms(analysis_dir)
            sources = [str(long_csv)]
        else:
            traces = sorted(p for p in analysis_dir.rglob("*") if p.name.endswith(TRACE_SUFFIXES))
            if not traces:
                raise AnalysisError(f"{analysis_dir}: neither kernels_long.csv nor trace files inside")
            paths, analysis_dir = traces, None
    if analysis_dir is None:
        bad = [str(p) for p in paths if not p.name.endswith(TRACE_SUFFIXES)]
        if bad:
            raise AnalysisError(f"not trace files (.json/.json.gz): {', '.join(bad)}")
        from analysis.errors import TraceLoadError

        loaded, sources = [], []
        for p in paths:
            try:
                loaded.append(load_trace(str(p)))
                sources.append(str(p))
            except TraceLoadError as exc:  # e.g. a .json side file in a trace directory
                notes.append(f"Skipped {exc}")
        if not loaded:
            raise AnalysisError("no readable trace among the inputs: " + "; ".join(notes))
        samples = samples_from_traces(loaded)
        notes.append("From raw traces: every kernel in each file counts (no step or layer attribution); the stage "
                     "comes from the file name. Run `moe-harness analyze` first for per-stage steps and D4 rows.")
    top = top_kernels(samples, top_n=args.top)
    hardware = load_hardware(args.hardware) if args.hardware else None
    inputs = ReportInputs(title="Kernel report", sources=sources, top=top, hardware=hardware, step_ms=step_ms,
                          ncu_dtype=args.ncu_dtype, notes=notes)
    if d4_rows is not None and hardware is not None and args.batch_per_rank and args.kv_len is not None:
        deployment = Deployment(batch_per_rank=args.batch_per_rank, kv_len=args.kv_len, tp=args.tp, dp=args.dp,
                                ep=args.ep, mtp_draft_tokens=args.mtp_draft_tokens, weight_dtype=args.weight_dtype,
                                kv_dtype=args.kv_dtype)
        inputs.deployment = deployment
        inputs.sol_rows = sol_for_d4_rows(d4_rows, deployment, hardware, model=args.model)
        inputs.step_sol = layer_sol(args.model, deployment, hardware)
        layers = {(r["group"], r["module"], r["kernel"]): r["layers"] for r in d4_rows}
        if step_ms:
            inputs.what_ifs = what_if_at_sol(inputs.sol_rows, step_ms,
                                             lambda row: max(1.0, layers.get((row.group, row.module, row.kernel), 1.0)))
    if args.ncu:
        if hardware is None:
            raise AnalysisError("--ncu needs --hardware (the roofline's peaks)")
        inputs.ncu = classify(read_ncu_csv(args.ncu), hardware, args.ncu_dtype)
        inputs.sources.append(args.ncu)
    out = Path(args.out) if args.out else (analysis_dir if analysis_dir is not None else _new_out_dir())
    return build_report(inputs), out, inputs.title


def run(args: argparse.Namespace) -> int:
    from analysis.kernel_report import write_report

    try:
        blocks, out, title = build(args)
        files = write_report(blocks, out, title)
    except AnalysisError as exc:
        print(f"moe-harness report: {exc}", file=sys.stderr)
        return 2
    for path in files.values():
        print(path)
    return 0
