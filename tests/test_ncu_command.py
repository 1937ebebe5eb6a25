"""The ncu command's pieces that need no GPU: commands it would run, top-kernel choice, name filter."""
import argparse
import re

from harness.commands import ncu
from tests.ncu_synthetic import KERNELS, write_synthetic_ncu_csv


def _parse(argv):
    parser = argparse.ArgumentParser()
    ncu.register(parser.add_subparsers())
    return parser.parse_args(["ncu", *argv])


def test_dry_run_prints_both_passes_with_clock_control_none(capsys):
    args = _parse(["--scenario", "demo_gpu", "--top", "20", "--dry-run"])
    assert args.func(args) == 0
    scan, detail = capsys.readouterr().out.strip().splitlines()
    for line in (scan, detail):
        assert "--clock-control none" in line and "--csv --page raw" in line
        assert "harness.engines.embedded.standalone --scenario demo_gpu" in line
    for section in ("SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy"):
        assert f"--section {section}" in detail
    assert "sm__sass_thread_inst_executed_op_ffma_pred_on.sum" in detail and "dram__bytes_read.sum" in detail


def test_any_command_after_double_dash_is_the_workload(capsys):
    args = _parse(["--dry-run", "--", "python3", "my_decode.py", "--steps", "3"])
    assert args.func(args) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("python3 my_decode.py --steps 3")


def test_top_kernels_from_a_scan_and_the_name_filter(tmp_path):
    scan = write_synthetic_ncu_csv(tmp_path / "synthetic_scan.csv")
    top = ncu.top_kernel_names(scan, 2)
    assert [n for n, _, _ in top] == [KERNELS[1][0], KERNELS[2][0]]  # 400 us and 150 us lead
    assert top[0][1] == 400.0 and top[0][2] == 1
    pattern = re.compile(ncu.kernel_name_filter([n for n, _, _ in top])[len("regex:"):])
    assert pattern.match(KERNELS[2][0]) and not pattern.match(KERNELS[0][0])
