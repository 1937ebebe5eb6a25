"""`moe-harness ncu`: profile a workload's top kernels with Nsight Compute on one GPU.

Two passes over the same workload (the embedded engine's standalone decode by default, or any
command given after `--`):
  1. scan: duration only (`gpu__time_duration.sum`) for a bounded window of launches, to rank
     kernels by total time;
  2. detail: SpeedOfLight, MemoryWorkloadAnalysis, Occupancy and roofline sections plus FLOP and
     DRAM-byte counters, for the top kernels only, a few instances each.
Both passes run with `--clock-control none` (the GPU keeps its normal clocks, as in serving) and
write `--csv --page raw` exports that `moe-harness report --ncu` reads.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

SECTIONS = ["SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "SpeedOfLight_RooflineChart",
            "SpeedOfLight_HierarchicalTensorRooflineChart"]
EXTRA_METRICS = ["dram__bytes_read.sum", "dram__bytes_write.sum", "dram__bytes.sum.per_second"]
UNDER_NCU_ENV = "MOE_HARNESS_UNDER_NCU"  # tells the workload to skip its own torch profiler (one CUPTI user)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "ncu", help="run a workload under Nsight Compute for its top kernels (needs a GPU and ncu)",
        description="Profile the top kernels of a workload with Nsight Compute (--clock-control none, --csv "
                    "--page raw). Default workload: the embedded engine's standalone decode for --scenario; "
                    "or give any command after `--`.")
    p.add_argument("--scenario", default="demo_gpu", help="scenario for the default embedded workload (default demo_gpu)")
    p.add_argument("--top", type=int, default=20, help="kernels to profile in detail (default 20)")
    p.add_argument("--instances", type=int, default=2, help="launches profiled per top kernel (default 2)")
    p.add_argument("--launch-skip", type=int, default=2000,
                   help="launches skipped before the scan pass times kernels (weight init; default 2000); the detail pass selects decode launches by NVTX range")
    p.add_argument("--scan-launches", type=int, default=3000, help="launches timed in the scan pass (default 3000)")
    p.add_argument("--out", default=None, help="new output directory (default: ncu-TIME); never overwritten")
    p.add_argument("--ncu-bin", default="ncu", help="Nsight Compute CLI (default: ncu on PATH)")
    p.add_argument("--timeout-s", type=int, default=1800, help="limit per pass in seconds (default 1800)")
    p.add_argument("--dry-run", action="store_true", help="print the two ncu commands and exit")
    p.add_argument("workload", nargs=argparse.REMAINDER, help="-- COMMAND ARGS... (default: embedded standalone)")
    p.set_defaults(func=run)


def default_workload(scenario: str, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "harness.engines.embedded.standalone", "--scenario", scenario, "--out", str(run_dir)]


def scan_command(ncu: str, workload: list[str], log: Path, launch_skip: int, launch_count: int) -> list[str]:
    return [ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--page", "raw",
            "--print-kernel-base", "demangled", "--metrics", "gpu__time_duration.sum", "--launch-skip", str(launch_skip), "--launch-count", str(launch_count),
            "--log-file", str(log), *workload]


NAME_PREFIX_CHARS = 120


def kernel_name_filter(names: list[str]) -> str:
    """An ncu --kernel-name regex for these demangled names.

    Long template names (CUTLASS grouped GEMMs run to thousands of characters) are matched by a
    prefix, and a leading "void " is optional: ncu prints it but matches names without it, so on the
    first H100/H200 runs no "void ..." kernel (the experts' grouped GEMM among them) was selected.
    """
    parts = []
    for name in names:
        # ncu prints "void f<...>(...)" but matches the name without its return type.
        bare = name[5:] if name.startswith("void ") else name
        body = re.escape(bare) if len(bare) <= NAME_PREFIX_CHARS else re.escape(bare[:NAME_PREFIX_CHARS]) + ".*"
        parts.append("(void )?" + body)
    return "regex:^(" + "|".join(parts) + ")$"


def detail_command(ncu: str, workload: list[str], log: Path, names: list[str], instances: int) -> list[str]:
    from analysis.ncu import load_metric_config

    metrics = list(dict.fromkeys([*load_metric_config().flop_metrics, *EXTRA_METRICS]))
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--page", "raw",
           "--print-kernel-base", "demangled"]
    for section in SECTIONS:
        cmd += ["--section", section]
    # With a name filter ncu counts only matching launches, so the decode NVTX range (pushed by the
    # embedded engine around each decode step) selects decode launches instead of a launch skip.
    cmd += ["--metrics", ",".join(metrics), "--kernel-name-base", "demangled", "--kernel-name", kernel_name_filter(names),
            "--nvtx", "--nvtx-include", "decode/",
            "--launch-skip", "0", "--launch-count", str(max(1, instances * len(names))),
            "--log-file", str(log), *workload]
    return cmd


def top_kernel_names(scan_csv: Path, top: int) -> list[tuple[str, float, int]]:
    """(name, total us, launches) of the kernels with the most total time in a scan export."""
    from analysis.ncu import read_ncu_csv

    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for k in read_ncu_csv(scan_csv):
        total[k.name] += k.values.get("duration_us", 0.0)
        count[k.name] += 1
    ranked = sorted(total, key=lambda n: -total[n])[:top]
    return [(n, total[n], count[n]) for n in ranked]


def _new_dir(requested: str | None) -> Path:
    if requested:
        out = Path(requested)
        if out.exists() and any(out.iterdir()):
            raise SystemExit(f"moe-harness ncu: {out} exists and is not empty; results are never overwritten")
        return out
    base = Path(f"ncu-{time.strftime('%Y%m%d-%H%M%S')}")
    out, n = base, 1
    while out.exists():
        n += 1
        out = Path(f"{base}-{n}")
    return out


def _run(cmd: list[str], timeout_s: int, log_path: Path) -> int:
    import os

    env = dict(os.environ, **{UNDER_NCU_ENV: "1"})
    with log_path.open("w") as log:
        try:
            return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, env=env).returncode
        except subprocess.TimeoutExpired:
            log.write(f"\n[moe-harness ncu] timed out after {timeout_s} s\n")
            return 124


def run(args: argparse.Namespace) -> int:
    workload = args.workload[1:] if args.workload[:1] == ["--"] else args.workload
    out = _new_dir(args.out) if not args.dry_run else Path(args.out or "ncu-DRYRUN")
    workload = workload or default_workload(args.scenario, out / "workload_run")
    scan_csv, detail_csv = out / "ncu_scan_raw.csv", out / "ncu_raw.csv"
    scan = scan_command(args.ncu_bin, workload, scan_csv, args.launch_skip, args.scan_launches)
    if args.dry_run:
        print(" ".join(scan))
        print(" ".join(detail_command(args.ncu_bin, workload, detail_csv, ["<top kernel names from the scan>"],
                                      args.instances)))
        return 0
    if shutil.which(args.ncu_bin) is None:
        print(f"moe-harness ncu: Nsight Compute CLI {args.ncu_bin!r} not found (install Nsight Compute or pass --ncu-bin)",
              file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([args.ncu_bin, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    manifest = {"ncu_version": version, "scenario": args.scenario, "workload": workload, "scan_command": scan}
    rc = _run(scan, args.timeout_s, out / "scan.log")
    if rc != 0 or not scan_csv.exists():
        print(f"moe-harness ncu: scan pass failed (exit {rc}); see {out / 'scan.log'}", file=sys.stderr)
        return 1
    top = top_kernel_names(scan_csv, args.top)
    manifest["top_kernels"] = [{"name": n, "total_us": t, "launches": c} for n, t, c in top]
    detail = detail_command(args.ncu_bin, workload, detail_csv, [n for n, _, _ in top], args.instances)
    manifest["detail_command"] = detail
    rc = _run(detail, args.timeout_s, out / "detail.log")
    manifest["detail_exit_code"] = rc
    (out / "ncu_command.json").write_text(json.dumps(manifest, indent=2))
    if rc != 0 or not detail_csv.exists():
        print(f"moe-harness ncu: detail pass failed (exit {rc}); see {out / 'detail.log'}", file=sys.stderr)
        return 1
    print(detail_csv)
    print(f"next: moe-harness report {out / 'workload_run'} --ncu {detail_csv} --hardware h200")
    return 0
