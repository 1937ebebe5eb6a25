"""Where the `analyze` command's CPU seconds go, phase by phase, and what #48's CPU ratio would be with
the costliest phases at nothing.

Why: #48 asks the whole command's CPU seconds to be at most 1.5x its loader's. A profile of the command
is flat after the load (nothing over 6%), so the question is which phases would have to go, not which
function to tune. Each round is two fresh processes taking turns: the command (`python -m harness.cli
analyze TRACE --out DIR`, every output written) with its phases' functions wrapped by CPU-time counters,
and the loader alone (benchmarks/ingest_bench.py's child, as benchmarks/command_bench.py times it).
A phase is the CPU time inside its functions less that of the phases they call (the attribution's
loop is what is left of it after the naming, the exposed and idle time and the columns); "the rest" is
the command's CPU seconds (wait4's, the whole process) less every phase's. A phase function that is never called fails the run, so a renamed
function is said, not left out of the sums. The wrappers cost about a microsecond a call (a few
thousand calls a trace); the bytecode is cached under WORK_DIR as command_bench does.

The bound: the command's CPU seconds with the costliest phases (after the load) taken away one by one,
against the loader's: what the ratio would be if those phases cost nothing and the rest stayed.

Usage: python benchmarks/command_phases.py TRACE WORK_DIR [--rounds 3]
WORK_DIR (outside the repository) receives the outputs and the bytecode; remove it after.
"""
from __future__ import annotations

import argparse
import importlib
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (phase, module the caller looks the function up in, the function's name there): each function is
# wrapped where its caller finds it
PHASES = (
    ("load", "analysis.pipeline.attribute_ranks", "load_trace"),
    ("attribution's set-up", "analysis.pipeline.attribute_ranks", "attribute_rank_columns"),
    ("attribution's loop", "analysis.attribution.rank.attribute", "_rows_of_steps"),
    ("step cut", "analysis.attribution.rank.attribute", "segment_steps"),
    ("off-thread copies", "analysis.attribution.rank.attribute", "split_off_thread_copies"),
    ("naming", "analysis.attribution.rank.attribute", "name_step"),
    ("exposed time", "analysis.attribution.rank.attribute", "exposed_of_times"),
    ("idle time", "analysis.attribution.rank.attribute", "step_idle"),
    ("columns", "analysis.attribution.kernel_columns", "ColumnsBuilder.add"),
    ("columns", "analysis.attribution.kernel_columns", "ColumnsBuilder.columns"),
    ("digest", "analysis.pipeline.attribute_ranks", "digest_rank"),
    ("tables", "analysis.pipeline.analyze_traces", "combine_rows"),
    ("outputs", "analysis.api", "write_outputs"),
)
START = "interpreter start (and this file's imports: the standard library's)"
REST = "the rest (the command's imports, arguments, printout)"


def _wrap(spent_s: dict[str, float], calls: dict[str, int], inside: list[float], phase: str, module: str,
          attr: str) -> None:
    """Time `attr` of `module` where its caller looks it up, less the phases it calls (`inside`: per
    open call, the time of the phases timed within it), into its phase's CPU seconds; its calls are
    counted apart (two functions may share a phase)."""
    owner_name, _, name = attr.rpartition(".")
    owner = importlib.import_module(module)
    if owner_name:
        owner = getattr(owner, owner_name)
    inner = getattr(owner, name)
    spent_s.setdefault(phase, 0.0)
    function = f"{module}.{attr}"
    calls[function] = 0

    def timed(*args, **kwargs):
        started = time.process_time()
        inside.append(0.0)
        try:
            return inner(*args, **kwargs)
        finally:
            spent = time.process_time() - started
            spent_s[phase] += spent - inside.pop()
            calls[function] += 1
            if inside:
                inside[-1] += spent

    setattr(owner, name, timed)


def _child(trace: str, out_dir: str, report: str) -> int:
    """The command with its phases timed; writes {phase: CPU s} to `report`."""
    spent_s: dict[str, float] = {START: time.process_time()}
    calls: dict[str, int] = {}
    inside: list[float] = []
    for phase, module, attr in PHASES:
        _wrap(spent_s, calls, inside, phase, module, attr)
    from harness.cli import main

    code = main(["analyze", trace, "--out", out_dir])
    if code:
        return code  # the command said why
    never = [function for function, count in calls.items() if count == 0]
    if never:
        print(f"never called (renamed or moved? update PHASES): {', '.join(never)}", file=sys.stderr)
        return 2
    Path(report).write_text(json.dumps(spent_s))
    return 0


def measure(trace: Path, work_dir: Path, rounds: int) -> dict:
    from benchmarks.command_bench import _child_env, _ingest_child, run_process  # not in the timed child

    env = _child_env(work_dir)
    out, report = work_dir / "phases-out", work_dir / "phases.json"

    def command() -> list[str]:
        shutil.rmtree(out, ignore_errors=True)  # written by the previous round: the command refuses to replace it
        return [sys.executable, str(Path(__file__).resolve()), "--child", str(trace), str(out), str(report)]

    loader = _ingest_child("ours", trace)
    run_process(command(), env)  # untimed: bytecode and page cache
    run_process(loader(), env)
    runs: list[dict] = []
    for turn in range(rounds):
        print(f"round {turn + 1} of {rounds} ...", file=sys.stderr, flush=True)
        pair = [("command", command), ("loader", loader)]
        seen = {}
        for name, argv in (pair if turn % 2 == 0 else pair[::-1]):  # each leads in turn
            seen[name] = run_process(argv(), env)["cpu_s"]
        seen["phases"] = json.loads(report.read_text())
        runs.append(seen)
    return summarise(runs)


def summarise(runs: list[dict]) -> dict:
    """Medians over the rounds: the command's and the loader's CPU s, each phase's, the rest, and the
    ratio with the costliest phases after the load at nothing, taken away one by one."""
    command = statistics.median(r["command"] for r in runs)
    loader = statistics.median(r["loader"] for r in runs)
    phases = {phase: statistics.median(r["phases"][phase] for r in runs) for phase in runs[0]["phases"]}
    phases[REST] = command - sum(phases.values())
    after_load = sorted((p for p in phases if p not in ("load", START, REST)), key=phases.get, reverse=True)
    bound, left = [], command
    for phase in after_load:
        left -= phases[phase]
        bound.append((phase, left / loader))
    return {"rounds": len(runs), "command_cpu_s": command, "loader_cpu_s": loader, "ratio": command / loader,
            "phases_cpu_s": phases, "ratio_without": bound}


def print_summary(result: dict) -> None:
    command = result["command_cpu_s"]
    print(f"command {command:.3f} CPU-s, loader alone {result['loader_cpu_s']:.3f} CPU-s: "
          f"{result['ratio']:.2f}x ({result['rounds']} rounds, medians)")
    for phase, cpu in sorted(result["phases_cpu_s"].items(), key=lambda kv: -kv[1]):
        print(f"  {phase:<22} {cpu:7.3f} CPU-s  {100 * cpu / command:5.1f}%")
    print("the ratio with the costliest phases after the load at nothing, one more each line:")
    for phase, ratio in result["ratio_without"]:
        print(f"  without {phase:<22} {ratio:.2f}x")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(*argv[1:4])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path, help="one rank's trace (benchmarks/make_large_trace.py makes large ones)")
    parser.add_argument("work_dir", type=Path, help="scratch directory outside the repository")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the command and the loader (default 3)")
    parser.add_argument("--out", type=Path, help="write the summary as JSON here")
    args = parser.parse_args(argv)
    from benchmarks.real_traces import REPO_ROOT

    resolved = args.work_dir.resolve()
    if resolved == REPO_ROOT or REPO_ROOT in resolved.parents:
        parser.error("work_dir must be outside the repository")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    try:
        result = measure(args.trace.resolve(), args.work_dir, args.rounds)
    except RuntimeError as failed:  # a child's failure, with the end of what it printed
        print(f"command_phases.py: {failed}", file=sys.stderr)
        return 1
    print_summary(result)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
