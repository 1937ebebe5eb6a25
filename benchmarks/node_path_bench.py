"""What a run's node and its head spend on the node's ranks, checkouts side by side.

Why: on a Ray run each node analyses its own ranks (harness/node/node_analysis.py analyze_node), Ray
pickles what it returns to the head, and the head combines every node's result into the table
(combine). This times the three as a run does them, in a fresh process per measurement with the
checkout first on the import path (turns taken round by round: the machine's state moves): the
node's wall and CPU seconds (its rank workers' included), the pickled result's size and the time to
pickle and unpickle it, the head's combine, and the process's peak memory. Each checkout runs once
untimed first: its modules byte-compiled (into a scratch folder) and the traces read into the page cache.

Usage:
    python benchmarks/node_path_bench.py TRACE... [--checkout DIR ...] [--rounds N] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
_MEASURES = ("node_s", "node_cpu_s", "pickle_s", "pickle_mb", "unpickle_s", "combine_s", "combine_cpu_s", "peak_mb")


def _child(paths: list[str]) -> None:
    """One node's ranks through the node path; prints the measures as JSON."""
    import pickle
    import resource
    import time

    from harness.node.node_analysis import analyze_node, combine

    def cpu_s() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    options = {"run": "run", "signature": "generic", "model": None, "rank_policy": "mean", "tbo": False,
               "jobs": None, "capture_traces": [], "node": 0}
    t0, c0 = time.perf_counter(), cpu_s()
    part = analyze_node(paths, options)
    t1, c1 = time.perf_counter(), cpu_s()
    blob = pickle.dumps(part, protocol=5)
    t2 = time.perf_counter()
    del part
    back = pickle.loads(blob)
    t3, c3 = time.perf_counter(), cpu_s()
    table = combine([back], options).d4
    t4, c4 = time.perf_counter(), cpu_s()
    peak_kb = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print(json.dumps({"node_s": t1 - t0, "node_cpu_s": c1 - c0, "pickle_s": t2 - t1, "pickle_mb": len(blob) / 1e6,
                      "unpickle_s": t3 - t2, "combine_s": t4 - t3, "combine_cpu_s": c4 - c3, "peak_mb": peak_kb / 1024,
                      "d4_rows": len(table.rows), "steps_used": table.steps_used}))


def measure(checkout: Path, traces: list[Path], pycache: Path) -> dict:
    """One fresh process through the node path. Its modules are byte-compiled once into `pycache` (as an
    installed package has them; never written into a checkout), so no figure holds compiling them."""
    env = dict(os.environ, PYTHONPATH=str(checkout), PYTHONPYCACHEPREFIX=str(pycache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", *map(str, traces)],
                          cwd=checkout, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise SystemExit(f"{checkout}: the node path failed: {(done.stderr.strip().splitlines() or [''])[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", type=Path, help="one node's rank traces")
    parser.add_argument("--checkout", action="append", type=Path, help="a checkout to measure (repeatable; default: this one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write the medians and every round as JSON here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child([str(t) for t in args.traces])
        return 0
    checkouts = [c.resolve() for c in args.checkout or [REPO_ROOT]]
    runs: dict[str, list[dict]] = {str(c): [] for c in checkouts}
    with tempfile.TemporaryDirectory(prefix="node-path-bench-") as scratch:
        caches = {c: Path(scratch) / f"pycache-{i}" for i, c in enumerate(checkouts)}
        for checkout in checkouts:  # untimed: the bytecode, and the traces in the page cache
            print(f"warm-up: {checkout}", file=sys.stderr, flush=True)
            measure(checkout, args.traces, caches[checkout])
        for turn in range(args.rounds):
            for checkout in (checkouts if turn % 2 == 0 else checkouts[::-1]):  # each leads in turn
                print(f"round {turn + 1} of {args.rounds}: {checkout}", file=sys.stderr, flush=True)
                runs[str(checkout)].append(measure(checkout, args.traces, caches[checkout]))
    summary = {c: {m: statistics.median(r[m] for r in rounds) for m in _MEASURES} for c, rounds in runs.items()}
    print(f"{len(args.traces)} rank traces, {args.rounds} rounds, medians:")
    print("| checkout | " + " | ".join(_MEASURES) + " |")
    print("|---|" + "---:|" * len(_MEASURES))
    for checkout, medians in summary.items():
        print(f"| {checkout} | " + " | ".join(f"{medians[m]:.2f}" for m in _MEASURES) + " |")
    if args.out:
        args.out.write_text(json.dumps({"medians": summary, "rounds": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
