"""The side-by-side tools that judge a change: same_outputs compares two checkouts' files (new
columns dropped, everything else byte for byte), and ingest_bench --before times the analyze case
of this checkout against another."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.real_traces import QWEN3_DECODE
from benchmarks.same_outputs import compare_dirs
from conftest import real_trace

ROOT = Path(__file__).resolve().parents[1]


def _write(folder: Path, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)


def test_compare_dirs_drops_only_the_named_new_columns(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    _write(before, "kernels_long.csv", "a,b\n1,2\n")
    _write(after, "kernels_long.csv", "a,b,role\n1,2,router\n")
    _write(before, "d4.md", "same\n")
    _write(after, "d4.md", "same\n")
    assert compare_dirs(before, after, {"role"}) == []
    assert len(compare_dirs(before, after, set())) == 1  # the new column, not declared


def test_compare_dirs_reports_a_changed_value_a_missing_and_a_new_file(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    _write(before, "kernels_long.csv", "a,b\n1,2\n")
    _write(after, "kernels_long.csv", "a,b,role\n1,3,router\n")
    _write(before, "gone.csv", "x\n")
    _write(after, "new.csv", "x\n")
    found = compare_dirs(before, after, {"role"})
    assert any("kernels_long.csv: differs" in line for line in found)
    assert any("gone.csv: missing after" in line for line in found)
    assert any("new.csv: new after" in line for line in found)


def _kernel_tables(before: Path, after: Path, rows, changed=None) -> None:
    """before: the kernels_long.csv the older analysis wrote; after: kernels_long.parquet of `changed`
    rows (default the same), and both folders' output markers."""
    from analysis.pipeline import write_kernel_table_file
    from kernel_tables import write_older_csv
    from harness.output_marker import files_in, marker_path, marker_text

    before.mkdir(parents=True, exist_ok=True)
    after.mkdir(parents=True, exist_ok=True)
    write_older_csv(before / "kernels_long.csv", rows)
    write_kernel_table_file(after / "kernels_long.parquet", changed or rows)
    for folder in (before, after):
        _write(folder, "d4.md", "same\n")
        marker_path(folder, "analyze").write_text(marker_text(files_in(folder)))


def _kernel_rows():
    from analysis.attribution.rows import KernelRow

    return [KernelRow("run", "TP0", i, "decode", "layer", i, 0, "moe", "experts", "gemm", f"void k<{i % 2}>(a, b)", 7,
                      1.5e12 + i / 3, 2.5, 0.1 * i, "structure", "experts", "kernel_classes.yaml:gemm")
            for i in range(20)]


def test_compare_dirs_reads_the_new_kernel_table_as_the_older_csv(tmp_path):
    """The kernel table's new format is the one expected difference: the same rows are no difference,
    the markers' other entries still count."""
    before, after = tmp_path / "before", tmp_path / "after"
    _kernel_tables(before, after, _kernel_rows())
    assert compare_dirs(before, after, set()) == []
    from harness.output_marker import files_in, marker_path, marker_text

    (after / "d4.md").write_text("other\n")
    marker_path(after, "analyze").write_text(marker_text(files_in(after)))
    found = compare_dirs(before, after, set())
    assert len(found) == 2 and any("d4.md: differs" in line for line in found)  # the file, and its marker entry


def test_compare_dirs_finds_a_changed_value_in_the_new_kernel_table(tmp_path):
    import msgspec

    rows = _kernel_rows()
    changed = [*rows[:-1], msgspec.structs.replace(rows[-1], exposed_us=rows[-1].exposed_us + 1e-9)]
    _kernel_tables(tmp_path / "before", tmp_path / "after", rows, changed)
    found = compare_dirs(tmp_path / "before", tmp_path / "after", set())
    assert len(found) == 1 and "kernels_long.parquet: differs" in found[0] and "as the older format" in found[0]


def test_compare_dirs_leaves_out_a_column_changed_on_purpose_on_both_sides(tmp_path):
    """Two Parquet kernel tables whose `rule` changed (the rules named anew): no difference with
    --changed-columns rule, one without it, and one when another column changed too."""
    import msgspec

    from analysis.pipeline import write_kernel_table_file

    rows = _kernel_rows()
    renamed = [msgspec.structs.replace(r, rule="structure_rules.yaml:routed.other") for r in rows]
    for name, after_rows in (("renamed", renamed), ("renamed-and-moved", [*renamed[:-1], msgspec.structs.replace(
            renamed[-1], busy_us=renamed[-1].busy_us + 1.0)])):
        before, after = tmp_path / name / "before", tmp_path / name / "after"
        for folder, table in ((before, rows), (after, after_rows)):
            folder.mkdir(parents=True)
            write_kernel_table_file(folder / "kernels_long.parquet", table)
        assert len(compare_dirs(before, after, set())) == 1
        assert len(compare_dirs(before, after, set(), {"rule"})) == (0 if name == "renamed" else 1)


def _bench_against_itself(tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    """ingest_bench --before this checkout, on a 2 MB generated trace, one run each."""
    real_trace(QWEN3_DECODE)  # the generated trace repeats a real step (skipped when absent)
    done = subprocess.run([sys.executable, "benchmarks/ingest_bench.py", str(tmp_path / "work"), "--size-mb", "2",
                           "--before", str(ROOT), "--repeat", "1", *options, "--out", str(tmp_path / "side.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_ingest_bench_times_this_checkout_against_another(tmp_path):
    done = _bench_against_itself(tmp_path)
    assert "speed-up:" in done.stdout and (tmp_path / "side.json").is_file()
    # each side kept its compiled modules in a cache of its own, filled by an uncounted run
    assert json.loads((tmp_path / "side.json").read_text())["bytecode_cached"] is True
    for side in ("before", "after"):
        assert list((tmp_path / "work" / f"pycache-{side}").rglob("api*.pyc")), side


def test_ingest_bench_can_compile_every_module_in_every_run(tmp_path):
    done = _bench_against_itself(tmp_path, "--no-bytecode-cache")
    assert "every module compiled in every run" in done.stdout
    assert json.loads((tmp_path / "side.json").read_text())["bytecode_cached"] is False
    assert not list((tmp_path / "work").glob("pycache-*"))


def test_ingest_bench_refuses_a_before_that_is_not_a_checkout(tmp_path):
    done = subprocess.run([sys.executable, "benchmarks/ingest_bench.py", str(tmp_path / "work"), "--before",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "not a checkout of this project" in done.stderr


def test_command_bench_times_the_command_beside_its_loader_and_the_ranks_one_by_one(tmp_path):
    """benchmarks/command_bench.py on small generated traces, one round: every case ran, each ratio
    is against the case it is judged by, and the command wrote every output file."""
    real_trace(QWEN3_DECODE)
    done = subprocess.run([sys.executable, "benchmarks/command_bench.py", str(tmp_path / "work"), "--sets",
                           "repeat,vary,ranks", "--size-mb", "2", "--ranks", "2", "--rank-mb", "1", "--repeat", "1",
                           "--skip-hta", "--out", str(tmp_path / "bench.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    results = {r["set"]: r for r in json.loads((tmp_path / "bench.json").read_text())["results"]}
    assert set(results["repeat"]["summary"]) == set(results["vary"]["summary"]) == {"command", "loader"}
    command = results["vary"]["summary"]["command"]
    assert "x_loader_median_of_ratios" in command
    # CPU seconds beside the wall time, each round's ratio against the loader's of the same round
    loader_cpu = results["vary"]["summary"]["loader"]["cpu_s"]
    assert command["cpu_x_loader_ratios"] == [a / b for a, b in zip(command["cpu_s"], loader_cpu)]
    assert all(0 < cpu < 300 for cpu in command["cpu_s"] + loader_cpu)
    assert "CPU" in done.stdout
    ranks = results["ranks"]["summary"]
    assert set(ranks) == {"command", "command-j1"} and "x_command-j1_median_of_ratios" in ranks["command"]
    assert ranks["command"]["processes"] >= 2  # the ranks' worker processes were seen
    assert (tmp_path / "work" / "out-repeat" / "command" / "kernels_long.parquet").is_file()
    assert "load average" in done.stdout
    capacity = json.loads((tmp_path / "bench.json").read_text())["parallel_capacity"]
    for probe in capacity.values():  # what the cores did together against one alone, before and after
        assert probe["alone_s"] > 0 and probe["together_s"] > 0
        assert probe["capacity"] == pytest.approx(probe["cores"] * probe["alone_s"] / probe["together_s"])
    assert done.stdout.count("parallel capacity") == 2


def test_command_phases_splits_the_command_into_phases_that_add_up_and_bounds_the_ratio(tmp_path):
    """benchmarks/command_phases.py on a real decode trace, one round: each phase timed less the phases
    it calls (so none is counted twice and what is left is not negative), every phase function was
    called, and the ratio falls as each phase after the load is taken away."""
    trace = real_trace(QWEN3_DECODE)
    done = subprocess.run([sys.executable, "benchmarks/command_phases.py", str(trace), str(tmp_path / "work"),
                           "--rounds", "1", "--out", str(tmp_path / "phases.json")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    from benchmarks.command_phases import PHASES, REST, START

    result = json.loads((tmp_path / "phases.json").read_text())
    phases = result["phases_cpu_s"]
    assert set(phases) == {phase for phase, _module, _attr in PHASES} | {START, REST}
    assert phases["load"] > 0 and phases["naming"] > 0 and phases["columns"] > 0
    assert phases[REST] >= 0  # the naming inside the attribution's loop is counted once
    assert sum(phases.values()) == pytest.approx(result["command_cpu_s"])
    ratios = [ratio for _phase, ratio in result["ratio_without"]]
    assert ratios == sorted(ratios, reverse=True) and ratios[0] < result["ratio"]
    taken = [phases[phase] for phase, _ratio in result["ratio_without"]]  # the costliest first
    assert taken == sorted(taken, reverse=True) and len(taken) == len(phases) - 3  # all but load, start, rest
    assert "without naming" in done.stdout


def test_node_path_bench_times_a_node_its_pickled_result_and_the_heads_combine(tmp_path):
    """benchmarks/node_path_bench.py on the bundled two-node DeepEP run's four rank traces, one round:
    every measure is there and plausible, the pickled result is the size of what was pickled."""
    traces = sorted((ROOT / "tests/data/sglang-real/ray-run/sglang_dsv3_4l_2x2_deepep-20261126-124934/traces")
                    .glob("*.trace.json.gz"))
    assert len(traces) == 4
    done = subprocess.run([sys.executable, "benchmarks/node_path_bench.py", *map(str, traces), "--rounds", "1",
                           "--out", str(tmp_path / "node.json")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.index("warm-up:") < done.stderr.index("round 1 of 1")  # compiled before any timed round
    report = json.loads((tmp_path / "node.json").read_text())
    (medians,) = report["medians"].values()
    assert set(medians) == {"node_s", "node_cpu_s", "pickle_s", "pickle_mb", "unpickle_s", "combine_s",
                            "combine_cpu_s", "peak_mb"}
    assert 0 < medians["combine_s"] < medians["node_s"] < 300 and medians["node_cpu_s"] > 0
    assert 0.01 < medians["pickle_mb"] < 50 and medians["peak_mb"] > 10
    assert "| checkout |" in done.stdout
    (rounds,) = report["rounds"].values()
    assert rounds[0]["d4_rows"] > 20 and rounds[0]["steps_used"] > 0  # the head built the table
