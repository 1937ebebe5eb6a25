"""Do two checkouts of the project analyse the same traces into the same files?

Why: a change that moves code or speeds it up must not move a number. This runs
`moe-harness analyze TRACE --out DIR` from each checkout (a fresh process each, the checkout first
on the import path) on every bundled trace (tests/data) and every public real trace found where
the tests find them, `moe-harness analyze RUN_DIR --out DIR` on every bundled run directory (a run's
nodes analysed and combined, as the run did), plus the accuracy report (benchmarks/accuracy/report.py; its commit counts,
which are history, are masked), and compares the outputs file by file: byte for byte, except that
CSV columns which only the second checkout writes (`--new-columns`) are dropped from its side
before comparing, and a table whose format changed (NEW_FORMATS: the kernel table, kernels_long.csv
before and kernels_long.parquet since) is compared as the CSV text the older writer would have
written from the newer file's rows. `--changed-columns` names columns whose values a deliberate
change moved (the kernel table's `rule` when the rules were named anew): they are dropped from both
sides of every CSV and of the kernel table, and the output marker's hash of the kernel table is not
compared; every other column and file must still match.

Usage:
    python benchmarks/same_outputs.py BEFORE_CHECKOUT AFTER_CHECKOUT WORK_DIR [--new-columns role,rule]
        [--changed-columns rule]
Exit 0 when every output matches, 1 with one line per difference otherwise.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.real_traces import REPO_ROOT, real_trace_files, real_traces_dir  # noqa: E402
from tests.bundled_traces import bundled_run_dirs, bundled_traces  # noqa: E402

_TIMEOUT_S = 600
# A table that changed format: its older name -> its newer name. The newer file is read and written
# again as the older writer did (the csv module, one column per field), then compared as text.
NEW_FORMATS = {"kernels_long.csv": "kernels_long.parquet"}
# The accuracy report counts the commits since each case was added: history, not analysis output.
_HISTORY = re.compile(r"\d+ commits? changed analysis/ since \(last [^)]*\)")


def _run(checkout: Path, args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(checkout), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, *args], cwd=cwd or checkout, env=env, capture_output=True, text=True,
                          timeout=_TIMEOUT_S)


def analyse(checkout: Path, trace: Path, out: Path) -> str:
    """Run analyze; the outcome line (exit code and, on failure, the last stderr line)."""
    done = _run(checkout, ["-m", "harness.cli", "analyze", str(trace), "--out", str(out)])
    last = (done.stderr.strip().splitlines() or [""])[-1]
    return f"exit {done.returncode}" + (f": {last}" if done.returncode else "")


def _csv_without(text: str, columns: set[str]) -> str:
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return text
    keep = [i for i, name in enumerate(rows[0]) if name not in columns]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        writer.writerow([row[i] for i in keep if i < len(row)])
    return out.getvalue()


def _as_older_csv(path: Path) -> bytes:
    """A Parquet table's rows as the csv module writes them (None as an empty cell), header first."""
    from analysis.io.parquet_reader import read_parquet

    data = path.read_bytes()
    table = read_parquet(data, max(len(data), 1) * 1000)
    out = io.StringIO(newline="")
    writer = csv.writer(out)
    writer.writerow(list(table.columns))
    writer.writerows(["" if v is None else v for v in row] for row in zip(*table.columns.values()))
    return out.getvalue().encode()


def _newer_format(before: Path, after: Path, names_before: set[Path], names_after: set[Path]) -> dict[Path, Path]:
    """Older-format file of `before` -> its newer-format file in `after`, where the change is exactly that."""
    pairs = {}
    for name in names_before:
        newer = name.with_name(NEW_FORMATS.get(name.name, name.name))
        if newer != name and name not in names_after and newer in names_after and newer not in names_before:
            pairs[name] = newer
    return pairs


def _is_marker(name: Path) -> bool:
    return name.name.startswith(".moe-harness-") and name.suffix == ".json"


def _marker_without_new_formats(data: bytes) -> dict:
    """An output marker (harness/output_marker.py) less the entries of tables that changed format:
    their hashes differ by the format; every other file's must match. (The kernel table is one of
    them: a column changed on purpose is compared in the table itself, without that column.)"""
    marker = json.loads(data)
    files = marker.get("files", {})
    marker["files"] = {k: v for k, v in files.items() if Path(k).name not in (*NEW_FORMATS, *NEW_FORMATS.values())}
    return marker


def compare_dirs(before: Path, after: Path, new_columns: set[str], changed_columns: set[str] = frozenset()) -> list[str]:
    """One line per file that differs, is missing, or is new."""
    differences = []
    names_before = {p.relative_to(before) for p in before.rglob("*") if p.is_file()}
    names_after = {p.relative_to(after) for p in after.rglob("*") if p.is_file()}
    for old_name, new_name in _newer_format(before, after, names_before, names_after).items():
        names_before.discard(old_name)
        names_after.discard(new_name)
        old_text = _csv_without((before / old_name).read_bytes().decode(), changed_columns)
        new_text = _csv_without(_as_older_csv(after / new_name).decode(), new_columns | changed_columns)
        if old_text != new_text:
            differences.append(f"{after / new_name}: differs from {before / old_name} (as the older format)")
    for name in sorted(names_before - names_after):
        differences.append(f"{before / name}: missing after")
    for name in sorted(names_after - names_before):
        differences.append(f"{after / name}: new after")
    for name in sorted(names_before & names_after):
        old, new = (before / name).read_bytes(), (after / name).read_bytes()
        if old == new or (_is_marker(name) and _marker_without_new_formats(old) == _marker_without_new_formats(new)):
            continue
        if name.suffix in (".csv", ".parquet"):
            if name.suffix == ".parquet":  # compared as the rows it holds
                old, new = _as_older_csv(before / name), _as_older_csv(after / name)
            old_text = _csv_without(old.decode(), changed_columns)
            new_text = _csv_without(new.decode(), new_columns | changed_columns)
            if old_text == new_text:
                continue
        differences.append(f"{after / name}: differs from {before / name}")
    return differences


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="checkout whose outputs are the reference")
    parser.add_argument("after", type=Path, help="checkout under test")
    parser.add_argument("work_dir", type=Path, help="where both sets of outputs are written (outside both checkouts)")
    parser.add_argument("--new-columns", default="", help="comma-separated CSV columns only AFTER writes")
    parser.add_argument("--changed-columns", default="",
                        help="comma-separated columns whose values a deliberate change moved (left out on both sides)")
    args = parser.parse_args(argv)
    new_columns = {c for c in args.new_columns.split(",") if c}
    changed_columns = {c for c in args.changed_columns.split(",") if c}
    traces = bundled_traces(REPO_ROOT)
    real = real_traces_dir()
    if real is not None:
        traces += real_trace_files(real)
    runs = bundled_run_dirs(REPO_ROOT)
    # each input with the folder its outputs go to (under before/ and after/)
    inputs = [(trace, f"{index:03d}-{trace.name.split('.')[0][:60]}") for index, trace in enumerate(traces)]
    inputs += [(run, f"run-{index:02d}-{run.parent.name[:40]}-{run.name[:40]}") for index, run in enumerate(runs)]
    differences: list[str] = []
    for index, (given, folder) in enumerate(inputs):
        outcomes = [analyse(checkout.resolve(), given, args.work_dir / side / folder)
                    for side, checkout in (("before", args.before), ("after", args.after))]
        if outcomes[0] != outcomes[1]:
            differences.append(f"{given}: {outcomes[0]} before, {outcomes[1]} after")
        print(f"[{index + 1}/{len(inputs)}] {given.name}: {outcomes[1]}", file=sys.stderr, flush=True)
    differences += compare_dirs(args.work_dir / "before", args.work_dir / "after", new_columns, changed_columns)
    reports = []
    for side, checkout in (("before", args.before), ("after", args.after)):
        done = _run(checkout.resolve(), ["benchmarks/accuracy/report.py"])
        reports.append(_HISTORY.sub("(history)", done.stdout) + f"exit {done.returncode}\n")
        (args.work_dir / f"accuracy-report-{side}.txt").write_text(reports[-1])
    if reports[0] != reports[1]:
        differences.append(f"accuracy report differs: {args.work_dir}/accuracy-report-before.txt vs -after.txt")
    for line in differences:
        print(line)
    print(f"{len(traces)} traces, {len(runs)} run directories and the accuracy report: {len(differences)} differences",
          file=sys.stderr)
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
