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
    # both passes name kernels by mangled symbol and stay inside the engine's decode NVTX ranges, so the
    # detail pass's name filter and launch count refer to what the scan saw
    for line in (scan, detail):
        assert "--print-kernel-base mangled" in line and "--nvtx --nvtx-include decode/" in line
    assert "--kernel-name-base mangled" in detail


def test_nvtx_filter_can_be_turned_off_for_other_workloads(capsys):
    args = _parse(["--dry-run", "--nvtx-range", "", "--", "python3", "other.py"])
    assert args.func(args) == 0
    assert "--nvtx" not in capsys.readouterr().out


def test_bad_counts_are_refused_with_the_flag_named(capsys):
    args = _parse(["--dry-run", "--instances", "0"])
    assert args.func(args) == 2
    assert "--instances must be at least 1" in capsys.readouterr().err


def test_any_command_after_double_dash_is_the_workload(capsys):
    args = _parse(["--dry-run", "--", "python3", "my_decode.py", "--steps", "3"])
    assert args.func(args) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("python3 my_decode.py --steps 3")


def test_top_kernels_from_a_scan_and_the_name_filter(tmp_path):
    scan = write_synthetic_ncu_csv(tmp_path / "synthetic_scan.csv")
    top = ncu.top_kernel_names(ncu.scan_launches(scan), 2)
    assert [n for n, _, _ in top] == [KERNELS[1][0], KERNELS[2][0]]  # 400 us and 150 us lead
    assert top[0][1] == 400.0 and top[0][2] == 1
    pattern = re.compile(ncu.kernel_name_filter([n for n, _, _ in top])[len("regex:"):])
    assert pattern.match(KERNELS[2][0]) and not pattern.match(KERNELS[0][0])


def test_name_filter_matches_whole_mangled_symbols_only():
    cutlass = "_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xE" + "X" * 3000
    add = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIN3c108BFloat16EEEEEviT0_"
    pattern = re.compile(ncu.kernel_name_filter([cutlass, add, "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"])[len("regex:"):])
    assert pattern.match(cutlass) and pattern.match(add) and pattern.match("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT")
    assert not pattern.match(add + "x") and not pattern.match("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNTX")


def test_detail_launch_count_walks_the_scan_order_until_each_kernel_has_its_instances():
    # SYNTHETIC launch order: a is frequent, c appears once late; x is not a top kernel
    order = ["a", "x", "a", "b", "a", "x", "a", "b", "a", "c", "a", "b", "c"]
    count, seen = ncu.detail_launch_count(order, ["a", "b", "c"], instances=2, cap=100)
    # matching launches in order: a a b a a b a c (a has 5, b 2, c 1) a b c -> stops after the second c
    assert count == 11 and seen == {"a": 6, "b": 3, "c": 2}
    count, seen = ncu.detail_launch_count(order, ["a", "b", "c"], instances=1, cap=100)
    assert count == 8 and seen["c"] == 1
    count, _ = ncu.detail_launch_count(order, ["a", "b", "c"], instances=2, cap=4)
    assert count == 4
