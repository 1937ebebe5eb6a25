"""Trace ingest benchmark: our loader against HolisticTraceAnalysis on the same files, side by side.

Every measurement runs in a fresh Python process, so imports, interpreter start and memory are
those of a real run. The parent times the whole child process (wall seconds, from spawn to exit)
and reads the child's peak resident memory from the kernel (wait4 rusage ru_maxrss); the child
also reports the seconds spent inside the load call alone. Throughput is MB (1e6 bytes) of
uncompressed JSON per second; memory is peak RSS as a multiple of the uncompressed JSON size.

Cases, for the largest real trace and for a generated large trace (benchmarks/make_large_trace.py):
  ours-json   analysis.ingest.trace_loader.load_trace on the uncompressed .json
  hta-json    HolisticTraceAnalysis 0.5 hta.common.trace_parser.parse_trace_dataframe (default config)
  ours-gz     load_trace on the .json.gz
  zlib-gz     zlib decompression of the same .json.gz alone (output discarded): the gzip floor
  isal-gz     the same with ISA-L (python package isal), which the loader uses when it is installed
  analyze-json   the whole analysis (analysis.api.analyze, generic signature) of the generated trace
  ours-Nxjson    N ranks (copies of the generated trace) loaded in parallel (process pool over load_trace)
  analyze-Nxjson the whole analysis of the N ranks (analyze runs ranks in parallel worker processes)

Usage:
    python benchmarks/ingest_bench.py WORK_DIR [--size-mb 400] [--ranks 2] [--repeat 3] [--skip-hta] [--out FILE]
    python benchmarks/ingest_bench.py WORK_DIR --before OTHER_CHECKOUT [--repeat 7] [--out FILE] [--no-bytecode-cache]
      (the analyze case only, this checkout against another, interleaved: docs/performance.md)
WORK_DIR (outside the repository) receives the generated and decompressed files; remove it after.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

# the repository root, worked out here: the child (one load, timed as the loader's baseline) imports
# nothing the loader does not need (benchmarks.real_traces brings urllib, tarfile and the test helpers)
REPO_ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO_ROOT))

CHILD_TIMEOUT_S = 900
_CHECKOUT_ENV = "MOE_BENCH_CHECKOUT"  # set for a child that runs another checkout's analysis code
_ZLIB_READ_BYTES = 64 * 1024


# ---------------------------------------------------------------- child side: one load, one process


def _rss_now_kb() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _peak_rss_kb() -> int:
    """VmHWM: the peak RSS of this process image alone (ru_maxrss would also count the parent's
    RSS inherited at fork, which Linux carries across exec)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _child_ours(paths: list[str]) -> dict:
    from analysis.ingest.trace_loader import load_trace

    before = _rss_now_kb()
    start = time.perf_counter()
    trace = load_trace(paths[0])
    return {"load_s": time.perf_counter() - start, "rss_before_kb": before, "kernels": len(trace.kernels)}


def _child_hta(paths: list[str]) -> dict:
    import logging

    from hta.common.trace_parser import parse_trace_dataframe
    from hta.configs.parser_config import ParserConfig

    logging.getLogger("hta").setLevel(logging.ERROR)
    before = _rss_now_kb()
    start = time.perf_counter()
    _meta, frame, _symbols = parse_trace_dataframe(paths[0], ParserConfig.get_default_cfg())
    kernels = int((frame["cat"] == _symbols.sym_index.get("kernel", -1)).sum()) if "cat" in frame else -1
    return {"load_s": time.perf_counter() - start, "rss_before_kb": before, "kernels": kernels}


def _child_inflate(paths: list[str], library) -> dict:
    before = _rss_now_kb()
    start = time.perf_counter()
    inflater = library.decompressobj(wbits=47)
    produced = 0
    with open(paths[0], "rb", buffering=0) as fh:
        while raw := fh.read(_ZLIB_READ_BYTES):
            produced += len(inflater.decompress(raw))
    return {"load_s": time.perf_counter() - start, "rss_before_kb": before, "kernels": 0, "inflated": produced}


def _child_zlib(paths: list[str]) -> dict:
    return _child_inflate(paths, zlib)


def _child_isal(paths: list[str]) -> dict:
    from isal import isal_zlib

    return _child_inflate(paths, isal_zlib)


def _load_for_pool(path: str):
    from analysis.ingest.trace_loader import load_trace

    return load_trace(path)


def _child_parallel(paths: list[str]) -> dict:
    """Pure ingest of N ranks: a process pool over load_trace, the traces returned to the parent."""
    from concurrent.futures import ProcessPoolExecutor

    before = _rss_now_kb()
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=len(paths)) as pool:
        traces = list(pool.map(_load_for_pool, paths))
    elapsed = time.perf_counter() - start
    workers_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    kernels = sum(len(t.kernels) for t in traces)
    return {"load_s": elapsed, "rss_before_kb": before, "kernels": kernels, "workers": len(paths),
            "worker_peak_kb": workers_kb, "how": "ProcessPoolExecutor over load_trace"}


def _child_analyze(paths: list[str]) -> dict:
    """The whole analysis (load, steps, layers, attribution, D4) through analysis.api.analyze,
    which analyses ranks in parallel worker processes when given several."""
    from analysis.api import AnalysisOptions, analyze

    before = _rss_now_kb()
    start = time.perf_counter()
    result = analyze([str(p) for p in paths], signature="generic", options=AnalysisOptions(jobs=len(paths)))
    elapsed = time.perf_counter() - start
    report = {"load_s": elapsed, "rss_before_kb": before, "kernels": len(result.kernel_rows)}
    if len(paths) > 1:
        report.update(workers=len(paths), worker_peak_kb=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                      how="analysis.api.analyze(jobs=N), generic signature")
    return report


_CHILDREN = {
    "ours": _child_ours, "hta": _child_hta, "zlib": _child_zlib, "isal": _child_isal, "parallel": _child_parallel,
    "analyze": _child_analyze,
}


def _isal_installed() -> bool:
    try:
        import isal  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------- parent side


def _run_child(kind: str, paths: list[Path], checkout: Path | None = None, bytecode: Path | bool | None = None) -> dict:
    """Run one measurement in a fresh process; whole-process wall time and the kernel's peak RSS.
    `checkout`: another copy of the project whose analysis code the child runs (--before).
    `bytecode`: a folder where the child keeps the project's compiled modules (as an installed
    package has them); False: compile every module in the run; None: the environment's own setting."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        env = dict(os.environ, PYTHONPATH=str(checkout or REPO_ROOT))
        if checkout is not None:
            env[_CHECKOUT_ENV] = str(checkout)
        if bytecode is False:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        elif isinstance(bytecode, Path):
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(bytecode)
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", kind, *map(str, paths)],
            stdout=out, stderr=err, env=env, cwd=REPO_ROOT,
        )
        deadline = start + CHILD_TIMEOUT_S
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                _pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        wall_s = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"{kind} on {paths[0]} failed (exit {proc.returncode}):\n{err.read()[-3000:]}")
        report = json.loads(out.read().strip().splitlines()[-1])
    report["process_s"] = wall_s
    report["ru_maxrss_kb"] = usage.ru_maxrss  # includes the RSS inherited at fork; kept for reference
    # Parallel case: the parent process plus every worker at its peak (an upper bound).
    report["peak_rss_kb"] = report["child_peak_kb"] + report.get("worker_peak_kb", 0) * report.get("workers", 0)
    return report


def _row(case: str, trace: str, json_bytes: int, report: dict) -> dict:
    peak_bytes = report["peak_rss_kb"] * 1024
    load_growth = peak_bytes - report["rss_before_kb"] * 1024 * (1 + report.get("workers", 0))
    return {
        "case": case,
        "trace": trace,
        "json_mb": json_bytes / 1e6,
        "process_s": report["process_s"],
        "process_mb_s": json_bytes / 1e6 / report["process_s"],
        "load_s": report["load_s"],
        "load_mb_s": json_bytes / 1e6 / report["load_s"],
        "peak_rss_mb": peak_bytes / 1e6,
        "peak_rss_x_json": peak_bytes / json_bytes,
        "load_rss_x_json": load_growth / json_bytes,
        "kernels": report["kernels"],
        **({"parallel_path": report["how"]} if "how" in report else {}),
    }


def _uncompressed(gz_path: Path, work_dir: Path) -> Path:
    plain = work_dir / gz_path.name[: -len(".gz")]
    if not plain.exists():
        with gzip.open(gz_path, "rb") as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst, 16 * 1024 * 1024)
    return plain


def _largest_real_trace(work_dir: Path) -> tuple[Path, Path | None]:
    """The largest real trace by uncompressed size, as (.json, .json.gz or None)."""
    from benchmarks.real_traces import real_trace_files, real_traces_dir

    root = real_traces_dir()
    if root is None:
        raise SystemExit("real traces not found: set MOE_HARNESS_REAL_TRACES")
    best: tuple[int, Path, Path | None] | None = None
    for path in real_trace_files(root):
        if path.name.endswith(".gz"):
            plain = _uncompressed(path, work_dir)
            candidate = (plain.stat().st_size, plain, path)
        else:
            candidate = (path.stat().st_size, path, None)
        if best is None or candidate[0] > best[0]:
            best = candidate
    assert best is not None, f"no trace files under {root}"
    for path in work_dir.iterdir():  # keep only the chosen decompressed copy
        if path.name.endswith(".json") and path != best[1] and not path.name.startswith("synthetic-"):
            path.unlink()
    return best[1], best[2]


def _generated_trace(work_dir: Path, size_mb: float) -> tuple[Path, Path]:
    from benchmarks.make_large_trace import DEFAULT_SOURCE, write_large_trace

    json_path, gz_path = write_large_trace(DEFAULT_SOURCE, work_dir, size_mb, write_gzip=True)
    return json_path, gz_path


def _rank_copies(json_path: Path, ranks: int, work_dir: Path, size_mb: float) -> list[Path]:
    """N rank files: the generated trace, and for each further rank the same steps on a clock of its
    own (make_large_trace's rank: the analysis refuses one trace given twice under two names)."""
    from benchmarks.make_large_trace import DEFAULT_SOURCE, write_large_trace

    copies = [json_path]
    for rank in range(1, ranks):
        name = json_path.name.replace("-TP-0-", f"-TP-{rank}-")
        path = work_dir / name
        if not path.exists():
            path = write_large_trace(DEFAULT_SOURCE, work_dir, size_mb, write_gzip=False, rank=rank)[0]
        copies.append(path)
    return copies


def _best_of(kind: str, paths: list[Path], repeat: int) -> dict:
    """The fastest of `repeat` fresh-process runs (the machine may be shared; the minimum is the
    least disturbed run). Peak memory is taken from the same run."""
    reports = [_run_child(kind, paths) for _ in range(repeat)]
    return min(reports, key=lambda r: r["process_s"])


def run_benchmark(work_dir: Path, size_mb: float, ranks: int, skip_hta: bool, repeat: int = 1) -> list[dict]:
    rows: list[dict] = []
    real_json, real_gz = _largest_real_trace(work_dir)
    gen_json, gen_gz = _generated_trace(work_dir, size_mb)
    for label, plain, packed in (("real:" + real_json.name, real_json, real_gz), ("generated", gen_json, gen_gz)):
        size = plain.stat().st_size
        cases = [("ours-json", "ours", [plain])]
        if not skip_hta:
            cases.append(("hta-json", "hta", [plain]))
        if packed is not None:
            cases += [("ours-gz", "ours", [packed]), ("zlib-gz", "zlib", [packed])]
            if _isal_installed():
                cases.append(("isal-gz", "isal", [packed]))
        for case, kind, paths in cases:
            print(f"running {case} on {label} ...", file=sys.stderr, flush=True)
            rows.append(_row(case, label, size, _best_of(kind, paths, repeat)))
    copies = _rank_copies(gen_json, ranks, work_dir, size_mb)
    size = gen_json.stat().st_size
    for case, kind, paths, nbytes in (
        ("analyze-json", "analyze", [gen_json], size),
        (f"ours-{ranks}xjson", "parallel", copies, size * ranks),
        (f"analyze-{ranks}xjson", "analyze", copies, size * ranks),
    ):
        print(f"running {case} on generated ...", file=sys.stderr, flush=True)
        rows.append(_row(case, "generated", nbytes, _best_of(kind, paths, repeat)))
    return rows


def _print_table(rows: list[dict]) -> None:
    header = f"{'trace':<34} {'case':<14} {'JSON MB':>8} {'proc s':>7} {'MB/s':>7} {'load s':>7} {'load MB/s':>9} {'peak MB':>8} {'peak/JSON':>9} {'load/JSON':>9}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['trace'][:34]:<34} {r['case']:<14} {r['json_mb']:>8.1f} {r['process_s']:>7.2f} {r['process_mb_s']:>7.0f} "
            f"{r['load_s']:>7.2f} {r['load_mb_s']:>9.0f} {r['peak_rss_mb']:>8.0f} {r['peak_rss_x_json']:>8.2f}x {r['load_rss_x_json']:>8.2f}x"
        )
    for r in rows:
        if "parallel_path" in r:
            print(f"{r['case']}: {r['parallel_path']}")
    from analysis.ingest.trace_loader import INFLATER

    print(f"loader inflates gzip with: {INFLATER}; load average now: {os.getloadavg()[0]:.2f}")


def _side_by_side(work_dir: Path, size_mb: float, before: Path, repeat: int, out: Path | None,
                  bytecode: bool = True) -> int:
    """The analyze case on the generated trace, before and after in turn, `repeat` times each: the
    same machine in the same minutes, so the ratio is fair even where the machine is noisy.

    `bytecode`: each side keeps its compiled modules in a cache of its own under work_dir, filled
    by one uncounted run first, as an installed package has them; False compiles every module in
    every run (PYTHONDONTWRITEBYTECODE=1 for every child)."""
    if not (before / "analysis" / "api.py").is_file():
        print(f"ingest_bench: --before {before}: not a checkout of this project (no analysis/api.py)", file=sys.stderr)
        return 2
    gen_json, _gen_gz = _generated_trace(work_dir, size_mb)
    sides = (("before", before), ("after", None))
    caches = {side: (work_dir / f"pycache-{side}" if bytecode else False) for side, _ in sides}
    if bytecode:
        for side, checkout in sides:
            print(f"analyze-json, {side}, uncounted run (compiles the bytecode cache) ...", file=sys.stderr, flush=True)
            _run_child("analyze", [gen_json], checkout, caches[side])
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for turn in range(repeat):
        for side, checkout in sides:
            print(f"analyze-json, {side}, run {turn + 1} of {repeat} ...", file=sys.stderr, flush=True)
            runs[side].append(_run_child("analyze", [gen_json], checkout, caches[side]))
    size = gen_json.stat().st_size
    summary = {}
    for side, reports in runs.items():
        walls = sorted(r["process_s"] for r in reports)
        summary[side] = {"process_s": walls, "best_s": walls[0], "median_s": walls[len(walls) // 2],
                         "mb_s_best": size / 1e6 / walls[0], "peak_rss_mb": max(r["peak_rss_kb"] for r in reports) / 1024,
                         "kernels": reports[0]["kernels"]}
    ratio_best = summary["before"]["best_s"] / summary["after"]["best_s"]
    ratio_median = summary["before"]["median_s"] / summary["after"]["median_s"]
    print(f"analyze-json on {gen_json.name} ({size / 1e6:.0f} MB), {repeat} runs each, interleaved, "
          f"{'bytecode cached' if bytecode else 'every module compiled in every run'}")
    for side in ("before", "after"):
        row = summary[side]
        print(f"  {side:<6} best {row['best_s']:.2f} s ({row['mb_s_best']:.0f} MB/s), median {row['median_s']:.2f} s, "
              f"peak RSS {row['peak_rss_mb']:.0f} MB, {row['kernels']} kernel rows")
    print(f"  speed-up: {ratio_best:.2f}x best to best, {ratio_median:.2f}x median to median")
    if out:
        tmp = out.with_name(out.name + ".partial")
        tmp.write_text(json.dumps({"before": str(before), "bytecode_cached": bytecode, "summary": summary,
                                   "speedup_best": ratio_best,
                                   "speedup_median": ratio_median, "cpus": len(os.sched_getaffinity(0))}, indent=2))
        os.replace(tmp, out)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        if os.environ.get(_CHECKOUT_ENV):  # that checkout's analysis package, not this one's
            sys.path.insert(0, os.environ[_CHECKOUT_ENV])
        report = _CHILDREN[argv[1]](argv[2:])
        report["child_peak_kb"] = _peak_rss_kb()
        print(json.dumps(report))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work_dir", type=Path, help="scratch directory outside the repository (large files)")
    parser.add_argument("--size-mb", type=float, default=400.0, help="size of the generated trace in MB (1e6 bytes)")
    parser.add_argument("--ranks", type=int, default=2, help="rank files loaded in parallel (default 2)")
    parser.add_argument("--skip-hta", action="store_true", help="leave out HolisticTraceAnalysis (slow)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the fastest is reported (default 3)")
    parser.add_argument("--out", type=Path, help="write the rows and the machine description as JSON here")
    parser.add_argument("--before", type=Path, metavar="CHECKOUT",
                        help="only the analyze case, side by side: this checkout's code against CHECKOUT's "
                             "(another copy of the project, e.g. a git worktree of an older commit), runs interleaved")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="with --before: compile every module in every run (default: each side keeps its "
                             "compiled bytecode in WORK_DIR, as an installed package does, after one uncounted run)")
    args = parser.parse_args(argv)
    resolved = args.work_dir.resolve()
    if resolved == REPO_ROOT or REPO_ROOT in resolved.parents:
        parser.error("work_dir must be outside the repository")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    if args.before is not None:
        return _side_by_side(args.work_dir, args.size_mb, args.before.resolve(), args.repeat, args.out,
                             bytecode=not args.no_bytecode_cache)
    rows = run_benchmark(args.work_dir, args.size_mb, args.ranks, args.skip_hta, args.repeat)
    _print_table(rows)
    if args.out:
        from analysis.ingest.trace_loader import INFLATER

        machine = {"cpus": len(os.sched_getaffinity(0)), "python": sys.version.split()[0], "platform": sys.platform,
                   "loader_inflater": INFLATER, "load_average_1m_before": load_before,
                   "load_average_1m_after": os.getloadavg()[0], "repeat": args.repeat}
        tmp = args.out.with_name(args.out.name + ".partial")
        tmp.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
