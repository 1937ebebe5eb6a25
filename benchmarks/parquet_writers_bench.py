"""The kernel table written as Parquet by the project's own writer and by pyarrow, side by side.

Why: one Parquet writer should serve the analysis and `export`; the own one stays only while it is
measurably better than a well-kept library for what the analysis writes (the per-kernel table,
hundreds of thousands of rows of repeated strings). Each case is a fresh process that starts from the
same columns (one list per KernelRow field, unpickled before the clock starts) and times the import of
its writer plus the write to a file, its CPU seconds and the growth of its peak resident memory
(ru_maxrss) over the unpickled columns; the cases take turns, round after round.

Usage:
    python benchmarks/parquet_writers_bench.py ANALYSIS_DIR [--repeat 7]
ANALYSIS_DIR: an `analyze --out` folder (its kernels_long.parquet gives the rows; e.g. of the 406 MB
trace of benchmarks/make_large_trace.py).
"""
from __future__ import annotations

import argparse
import json
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CASES = ("own", "pyarrow")


def _child(case: str, columns_file: str, out_file: str) -> dict:
    with open(columns_file, "rb") as fh:
        names, kinds, columns = pickle.load(fh)
    base_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if case == "own":
        from analysis.io.parquet_writer import RowGroup, _Chunk, write_row_groups

        group = RowGroup(len(columns[0]), [_Chunk(n, k, c) for n, k, c in zip(names, kinds, columns)])
        with open(out_file, "wb") as out:
            write_row_groups(out, [group], list(zip(names, kinds)), {"table": "kernels_long"})
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}
        table = pa.table([pa.array(c, type=types[k]) for c, k in zip(columns, kinds)], names=names)
        pq.write_table(table, out_file, compression="gzip", use_dictionary=True)
    return {"wall_s": time.perf_counter() - wall0, "cpu_s": time.process_time() - cpu0,
            "rss_growth_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_kib) / 1024,
            "bytes": Path(out_file).stat().st_size}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("analysis_dir", nargs="?")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--child", nargs=3, metavar=("CASE", "COLUMNS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(*args.child)))
        return 0
    from analysis.tables.kernel_table import COLUMNS
    from analysis.io.parquet_reader import read_parquet_file

    table = read_parquet_file(Path(args.analysis_dir) / "kernels_long.parquet", 1 << 30)
    names, kinds = [n for n, _ in COLUMNS], [k for _, k in COLUMNS]
    with tempfile.TemporaryDirectory() as work:
        columns_file = Path(work) / "columns.pickle"
        columns_file.write_bytes(pickle.dumps((names, kinds, [table.columns[n] for n in names])))
        results: dict[str, list[dict]] = {case: [] for case in CASES}
        for _ in range(args.repeat):
            for case in CASES:
                done = subprocess.run([sys.executable, __file__, "--child", case, str(columns_file),
                                       str(Path(work) / f"{case}.parquet")], capture_output=True, text=True, check=True)
                results[case].append(json.loads(done.stdout))
    print(f"{table.rows} rows, {len(names)} columns, medians of {args.repeat} interleaved rounds")
    print("| writer | wall s (import + write) | CPU s | peak RSS growth MiB | file MB |")
    print("|---|---:|---:|---:|---:|")
    for case in CASES:
        med = {key: statistics.median(r[key] for r in results[case]) for key in results[case][0]}
        print(f"| {case} | {med['wall_s']:.3f} | {med['cpu_s']:.3f} | {med['rss_growth_mib']:.0f} | {med['bytes'] / 1e6:.2f} |")
    ratios = [a["cpu_s"] / b["cpu_s"] for a, b in zip(results["pyarrow"], results["own"])]
    print(f"pyarrow / own CPU, per round: median {statistics.median(ratios):.2f}x (range {min(ratios):.2f}-{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
