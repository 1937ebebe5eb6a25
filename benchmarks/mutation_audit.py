"""Mutation audit: break the analysis on purpose, one fault at a time, and see whether a correctness test fails.

Each fault of benchmarks/mutations/mutations.yaml is applied in a scratch checkout of HEAD (a git worktree
under --work, made and removed here), and the correctness tests run there (`pytest -x`: the first failure
is enough). The reference outputs are not among them: they compare with the same code's earlier run, so a
wrong number written into them passes. A fault no test catches is a blind spot. Prints a Markdown table
and writes it (with the counts) to --out.

    python benchmarks/mutation_audit.py --workers 2 --out docs/mutation-audit.md
"""
from __future__ import annotations

import argparse
import concurrent.futures
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
MUTATIONS = ROOT / "benchmarks" / "mutations" / "mutations.yaml"
# fastest first: a caught fault usually stops in the first files
TESTS = ["tests/test_nested_step_windows.py", "tests/test_accuracy_mtp.py", "tests/test_accuracy_tbo.py",
         "tests/test_two_batch_overlap.py", "tests/test_accuracy_ep.py", "tests/test_prefill_pd.py",
         "tests/test_accuracy_mutations.py", "tests/test_synthetic_deepseek.py", "tests/test_comm_split.py",
         "tests/test_token_cost.py", "tests/test_step_labels.py", "tests/test_stages.py",
         "tests/test_structure_rules.py", "tests/test_side_kernels.py", "tests/test_pinned_names.py",
         "tests/test_multistream_replay.py", "tests/test_namers.py", "tests/test_d4_step_statistics.py",
         "tests/test_sglang_real_trace.py", "tests/test_accuracy_suite.py", "tests/test_self_checks_ep.py",
         "tests/test_self_checks.py"]
_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)


def load_mutations(path: Path = MUTATIONS) -> list[dict]:
    """The faults, each checked to apply exactly once to this checkout (a stale entry is an error)."""
    mutations = yaml.safe_load(path.read_text())["mutations"]
    for m in mutations:
        count = (ROOT / m["file"]).read_text().count(m["find"])
        if count != 1:
            raise SystemExit(f"{path}: mutation {m['id']}: `find` occurs {count} times in {m['file']}, expected once")
    return mutations


def run_one(tree: Path, mutation: dict, timeout_s: float) -> dict:
    subprocess.run(["git", "-C", str(tree), "checkout", "--quiet", "--", "."], check=True)
    target = tree / mutation["file"]
    target.write_text(target.read_text().replace(mutation["find"], mutation["replace"], 1))
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *TESTS],
                              cwd=tree, capture_output=True, text=True, timeout=timeout_s)
        output, rc = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired:
        output, rc = "", -1
    failed = _FAILED.search(output)
    return {"id": mutation["id"], "file": mutation["file"], "why": mutation["why"],
            "caught": rc not in (0, -1) and failed is not None, "by": failed.group(1) if failed else "",
            "timed_out": rc == -1, "seconds": round(time.monotonic() - started, 1)}


def worker(index: int, work: Path, mutations: list[dict], timeout_s: float) -> list[dict]:
    tree = work / f"tree-{index}"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tree), "HEAD"], check=True)
    try:
        results = []
        for m in mutations:
            result = run_one(tree, m, timeout_s)
            print(f"{result['id']}: {'caught by ' + result['by'] if result['caught'] else 'MISSED'} "
                  f"({result['seconds']} s)", flush=True)
            results.append(result)
        return results
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


def table(results: list[dict]) -> str:
    caught = sum(r["caught"] for r in results)
    lines = [f"Caught {caught} of {len(results)} faults ({100 * caught / len(results):.0f}%) with the correctness "
             "tests alone (no reference outputs).", "",
             "| fault | file | what it would do | caught by |", "|---|---|---|---|"]
    for r in results:
        by = r["by"].replace("|", "/") if r["caught"] else ("**missed** (timed out)" if r["timed_out"] else "**missed**")
        lines.append(f"| {r['id']} | {r['file']} | {r['why']} | {by} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--work", type=Path, default=Path("/tmp/moe-harness-mutation-audit"),
                   help="where the scratch checkouts go (made and removed here; must not exist)")
    p.add_argument("--timeout-s", type=float, default=900.0, help="per fault")
    p.add_argument("--only", nargs="*", default=None, help="fault ids to run (default: all)")
    p.add_argument("--out", type=Path, default=None, help="write the table here (refuses to replace a file)")
    a = p.parse_args(argv)
    if a.work.exists():
        raise SystemExit(f"--work {a.work}: exists; give a path this command can make and remove")
    if a.out is not None and a.out.exists():
        raise SystemExit(f"--out {a.out}: exists; this command does not replace files")
    mutations = [m for m in load_mutations() if a.only is None or m["id"] in a.only]
    a.work.mkdir(parents=True)
    try:
        shares = [mutations[i::a.workers] for i in range(a.workers)]
        with concurrent.futures.ThreadPoolExecutor(a.workers) as pool:
            futures = [pool.submit(worker, i, a.work, share, a.timeout_s) for i, share in enumerate(shares) if share]
            results = [r for f in futures for r in f.result()]
    finally:
        shutil.rmtree(a.work, ignore_errors=True)
    order = {m["id"]: i for i, m in enumerate(mutations)}
    results.sort(key=lambda r: order[r["id"]])
    text = table(results)
    print(text)
    if a.out is not None:
        a.out.write_text(text)
    return 0 if all(r["caught"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
