"""Writes a SYNTHETIC Nsight Compute raw CSV (the `ncu --csv --page raw` layout) with known answers.

Not a GPU capture: the numbers are chosen so each kernel's class is known under the seed's rule on
H200 (bf16 ridge = 989.5e12 / 4.8e12 = 206 FLOP/B, margin 10 points). Replace with a real export
(tests/data/ncu_*.csv) once one is recorded on a GPU.
"""
from __future__ import annotations

import csv
from pathlib import Path

HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
          "Grid Size", "Device", "CC",
          "gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
          "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
          "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "sm__warps_active.avg.pct_of_peak_sustained_active",
          "l1tex__t_sector_hit_rate.pct", "lts__t_sector_hit_rate.pct", "dram__bytes_read.sum", "dram__bytes_write.sum",
          "dram__bytes.sum.per_second", "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
          "sm__sass_thread_inst_executed_op_fadd_pred_on.sum", "sm__ops_path_tensor_src_bf16_dst_fp32.sum"]
UNITS = ["", "", "", "", "", "", "", "", "", "", "",
         "nsecond", "%", "%", "%", "%", "%", "%", "Mbyte", "Mbyte", "Gbyte/second", "inst", "inst", ""]

# name, dur_ns, sm%, mem%, dram%, occ%, l1%, l2%, read MB, write MB, GB/s, ffma, fadd, tensor ops, expected class
KERNELS = [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>(int)",
     "12,000", 8.0, 82.0, 80.0, 70.0, 5.0, 20.0, 40.0, 20.0, "5,000", 1_000_000, 0, 0, "memory-bound"),
    ("nvjet_sm90_tst_256x128_64x4_2x1_v_bz_TNN", "400,000", 88.0, 35.0, 20.0, 30.0, 2.0, 80.0, 50.0, 25.0, "190",
     0, 0, 4.0e13, "compute-bound"),  # 4e13 FLOP / 75e6 B = 533k FLOP/B, well above the ridge
    ("void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576>>(Params)", "150,000", 14.0, 18.0,
     15.0, 25.0, 10.0, 50.0, 30.0, 1.0, "200", 2_000_000, 0, 1.0e9, "balanced"),  # low on both
    ("_silu_and_mul_post_quant_kernel", "6,000", 60.0, 20.0, 18.0, 40.0, 9.0, 30.0, 8.0, 4.0, "2,000",
     3_000_000, 1_000_000, 0, "balanced"),  # SM-led but intensity below the ridge: not compute bound
    ("void deep_ep::internode_ll::combine<7168>(void*)", "90,000", 5.0, 40.0, 38.0, 10.0, 1.0, 10.0, 10.0, 10.0,
     "222", "n/a", "n/a", "n/a", "memory-bound"),  # no FLOP counts: throughput-only rule
]


def write_synthetic_ncu_csv(path: Path) -> Path:
    with path.open("w", newline="") as handle:
        handle.write("==PROF== Connected to process 4242 (/usr/bin/python3.12)\n")
        out = csv.writer(handle, quoting=csv.QUOTE_ALL)
        out.writerow(HEADER)
        out.writerow(UNITS)
        for i, (name, dur, sm, mem, dram, occ, l1, l2, rd, wr, gbs, ffma, fadd, tensor, _) in enumerate(KERNELS):
            out.writerow([i, 4242, "python3.12", "h200-node", name, 1, 7, "(128, 1, 1)", "(132, 1, 1)", 0, "9.0",
                          dur, sm, mem, dram, occ, l1, l2, rd, wr, gbs, ffma, fadd, tensor])
    return path


EXPECTED_CLASSES = [k[-1] for k in KERNELS]
