"""`moe-harness ncu`: profile a workload's top kernels with Nsight Compute on one GPU.

Two passes over the same workload (the embedded engine's standalone decode by default, or any
command given after `--`), both restricted to launches inside the workload's `decode` NVTX ranges
(the embedded engine pushes one around each decode step; `--nvtx-range ''` turns the filter off):
  1. scan: duration only (`gpu__time_duration.sum`) for a bounded window of launches, to rank
     kernels by total time;
  2. detail: SpeedOfLight, MemoryWorkloadAnalysis, Occupancy and roofline sections plus FLOP and
     DRAM-byte counters, for the top kernels only.
Kernels are named by their mangled symbols in both passes and the detail pass selects them by
those symbols: ncu prints demangled names in a shortened form (`native::` for `at::native::`,
`T3` for parameter types), and a filter built from those printed names selected none of the
`void ...` kernels, the experts' CUTLASS GEMM among them, on an H100 and an H200. The report
demangles the symbols again (analysis/report/demangle.py), into the text torch traces carry.
Both passes run with `--clock-control none` (the GPU keeps its normal clocks, as in serving) and
write `--csv --page raw` exports that `moe-harness report --ncu` reads.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from harness.commands import COMMANDS

SECTIONS = ["SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "SpeedOfLight_RooflineChart",
            "SpeedOfLight_HierarchicalTensorRooflineChart"]
EXTRA_METRICS = ["dram__bytes_read.sum", "dram__bytes_write.sum", "dram__bytes.sum.per_second"]
UNDER_NCU_ENV = "MOE_HARNESS_UNDER_NCU"  # tells the workload to skip its own torch profiler (one CUPTI user)
DEFAULT_NVTX_RANGE = "decode/"  # push/pop range named "decode" (harness/engines/embedded/engine.py)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "ncu", help=COMMANDS["ncu"],
        description="Profile the top kernels of a workload with Nsight Compute (--clock-control none, --csv "
                    "--page raw). Default workload: the embedded engine's standalone decode for --scenario; "
                    "or give any command after `--`.")
    p.add_argument("--scenario", default="demo_gpu", help="scenario for the default embedded workload (default demo_gpu)")
    p.add_argument("--top", type=int, default=20, help="kernels to profile in detail (default 20)")
    p.add_argument("--instances", type=int, default=2, help="launches profiled per top kernel (default 2)")
    p.add_argument("--nvtx-range", default=DEFAULT_NVTX_RANGE,
                   help="NVTX range both passes are limited to (default 'decode/': the embedded engine's decode "
                        "steps); '' profiles every launch")
    p.add_argument("--launch-skip", type=int, default=0,
                   help="launches (inside the NVTX range) skipped before the scan times kernels (default 0)")
    p.add_argument("--scan-launches", type=int, default=1500,
                   help="launches timed in the scan pass (default 1500: about three demo_gpu decode steps)")
    p.add_argument("--max-detail-launches", type=int, default=400,
                   help="cap on launches profiled in the detail pass (default 400)")
    p.add_argument("--out", default=None, help="new output directory (default: ncu-TIME); never overwritten")
    p.add_argument("--ncu-bin", default="ncu", help="Nsight Compute CLI (default: ncu on PATH)")
    p.add_argument("--timeout-s", type=int, default=1800, help="limit per pass in seconds (default 1800)")
    p.add_argument("--dry-run", action="store_true", help="print the two ncu commands and exit")
    p.add_argument("workload", nargs=argparse.REMAINDER, help="-- COMMAND ARGS... (default: embedded standalone)")
    p.set_defaults(func=run)


def default_workload(scenario: str, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "harness.engines.embedded.standalone", "--scenario", scenario, "--out", str(run_dir)]


def _nvtx_args(nvtx_range: str) -> list[str]:
    return ["--nvtx", "--nvtx-include", nvtx_range] if nvtx_range else []


def scan_command(ncu: str, workload: list[str], log: Path, launch_skip: int, launch_count: int,
                 nvtx_range: str = DEFAULT_NVTX_RANGE) -> list[str]:
    return [ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--page", "raw",
            "--print-kernel-base", "mangled", "--metrics", "gpu__time_duration.sum", *_nvtx_args(nvtx_range),
            "--launch-skip", str(launch_skip), "--launch-count", str(launch_count),
            "--log-file", str(log), *workload]


def kernel_name_filter(names: list[str]) -> str:
    """An ncu --kernel-name regex matching exactly these kernel symbols (with --kernel-name-base mangled).

    Mangled symbols are plain identifiers, so the regex needs no escaping beyond the odd `$` or `.`
    of a compiler-generated suffix; names ncu cannot demangle are the same in every base.
    """
    return "regex:^(" + "|".join(re.escape(name) for name in names) + ")$"


def detail_launch_count(scan_order: list[str], names: list[str], instances: int, cap: int) -> tuple[int, dict[str, int]]:
    """Launches the detail pass must profile so each top kernel gets `instances` launches.

    With a name filter ncu counts only matching launches, in the order the scan saw them (same
    workload, same NVTX range), so walking the scan's matching launches until every name has its
    instances gives the count. Returns (count, launches per name within it), at most `cap`.
    """
    wanted, seen, count = set(names), {n: 0 for n in names}, 0
    for name in scan_order:
        if name not in wanted:
            continue
        if count >= cap or all(v >= instances for v in seen.values()):
            break
        seen[name] += 1
        count += 1
    return max(count, 1), seen


def detail_command(ncu: str, workload: list[str], log: Path, names: list[str], launch_count: int,
                   nvtx_range: str = DEFAULT_NVTX_RANGE) -> list[str]:
    from analysis.api import list_builtins

    metrics = list(dict.fromkeys([*list_builtins("ncu_metric"), *EXTRA_METRICS]))
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--page", "raw",
           "--print-kernel-base", "mangled"]
    for section in SECTIONS:
        cmd += ["--section", section]
    # With a name filter ncu counts only matching launches: the NVTX range, not a launch skip, keeps
    # the detail pass on the same decode launches the scan ranked.
    cmd += ["--metrics", ",".join(metrics), "--kernel-name-base", "mangled", "--kernel-name", kernel_name_filter(names),
            *_nvtx_args(nvtx_range), "--launch-skip", "0", "--launch-count", str(launch_count),
            "--log-file", str(log), *workload]
    return cmd


def scan_launches(scan_csv: Path) -> list[tuple[str, float]]:
    """(kernel symbol, duration us) of every launch in a scan export, in launch order."""
    from analysis.api import ncu_launches

    return ncu_launches(scan_csv)


def top_kernel_names(launches: list[tuple[str, float]], top: int) -> list[tuple[str, float, int]]:
    """(name, total us, launches) of the kernels with the most total time among a scan's launches."""
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for name, dur_us in launches:
        total[name] += dur_us
        count[name] += 1
    ranked = sorted(total, key=lambda n: -total[n])[:top]
    return [(n, total[n], count[n]) for n in ranked]


def coverage(detail_csv: Path, names: list[str]) -> dict[str, int]:
    """Profiled launches per requested top kernel in a detail export (0 = not selected)."""
    from analysis.api import ncu_launches

    got = {n: 0 for n in names}
    for symbol, _ in ncu_launches(detail_csv):
        if symbol in got:
            got[symbol] += 1
    return got


def _new_dir(requested: str | None) -> Path:
    if requested:
        out = Path(requested)
        if os.path.lexists(out) and not (out.is_dir() and not out.is_symlink() and not any(out.iterdir())):
            raise SystemExit(f"moe-harness ncu: {out} exists and is not an empty folder; results are never "
                             "written over anything")
        return out
    base = Path(f"ncu-{time.strftime('%Y%m%d-%H%M%S')}")
    out, n = base, 1
    while out.exists():
        n += 1
        out = Path(f"{base}-{n}")
    return out


def _run(cmd: list[str], timeout_s: int, log_path: Path) -> int:
    env = dict(os.environ, **{UNDER_NCU_ENV: "1"})
    with log_path.open("w") as log:
        try:
            return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, env=env).returncode
        except subprocess.TimeoutExpired:
            log.write(f"\n[moe-harness ncu] timed out after {timeout_s} s\n")
            return 124


def run(args: argparse.Namespace) -> int:
    workload = args.workload[1:] if args.workload[:1] == ["--"] else args.workload
    for name in ("top", "instances", "scan_launches", "max_detail_launches"):
        if getattr(args, name) < 1:
            print(f"moe-harness ncu: --{name.replace('_', '-')} must be at least 1", file=sys.stderr)
            return 2
    out = _new_dir(args.out) if not args.dry_run else Path(args.out or "ncu-DRYRUN")
    workload = workload or default_workload(args.scenario, out / "workload_run")
    scan_csv, detail_csv = out / "ncu_scan_raw.csv", out / "ncu_raw.csv"
    scan = scan_command(args.ncu_bin, workload, scan_csv, args.launch_skip, args.scan_launches, args.nvtx_range)
    if args.dry_run:
        print(" ".join(scan))
        print(" ".join(detail_command(args.ncu_bin, workload, detail_csv, ["<top kernel symbols from the scan>"],
                                      args.instances * args.top, args.nvtx_range)))
        return 0
    if shutil.which(args.ncu_bin) is None:
        print(f"moe-harness ncu: Nsight Compute CLI {args.ncu_bin!r} not found (install Nsight Compute or pass --ncu-bin)",
              file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([args.ncu_bin, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    manifest = {"ncu_version": version, "scenario": args.scenario, "workload": workload, "scan_command": scan}
    manifest_path = out / "ncu_command.json"

    def save_manifest() -> None:  # after each pass, so a failure keeps what was learnt
        manifest_path.write_text(json.dumps(manifest, indent=2))

    def run_pass(label: str, cmd: list[str], csv_path: Path, what: str) -> bool:
        print(f"moe-harness ncu: {label} pass ({what}) ...", file=sys.stderr)
        rc = _run(cmd, args.timeout_s, out / f"{label}.log")
        manifest[f"{label}_exit_code"] = rc
        save_manifest()
        if rc != 0 or not csv_path.exists():
            print(f"moe-harness ncu: {label} pass failed (exit {rc}); see {out / f'{label}.log'}", file=sys.stderr)
            return False
        return True

    if not run_pass("scan", scan, scan_csv, f"{args.scan_launches} launches, durations only"):
        return 1
    launches = scan_launches(scan_csv)
    top = top_kernel_names(launches, args.top)
    names = [n for n, _, _ in top]
    launch_count, planned = detail_launch_count([name for name, _ in launches], names, args.instances,
                                                args.max_detail_launches)
    manifest["top_kernels"] = [{"name": n, "total_us": t, "launches": c, "planned_detail_launches": planned[n]}
                               for n, t, c in top]
    detail = detail_command(args.ncu_bin, workload, detail_csv, names, launch_count, args.nvtx_range)
    manifest["detail_command"] = detail
    if not run_pass("detail", detail, detail_csv, f"{len(names)} kernels, {launch_count} launches"):
        return 1
    got = coverage(detail_csv, names)
    manifest["detail_launches_per_kernel"] = got
    save_manifest()
    missing = [n for n in names if got[n] == 0]
    if missing:
        print(f"moe-harness ncu: warning: {len(missing)} of {len(names)} top kernels were not profiled in detail "
              f"(raise --max-detail-launches; see {manifest_path}): " + ", ".join(m[:80] for m in missing), file=sys.stderr)
    print(detail_csv)
    print(f"next: moe-harness report RUN_DIR --ncu {detail_csv} --hardware GPU  (RUN_DIR: a traced run of the same "
          "scenario, e.g. from `moe-harness run`)")
    return 0
