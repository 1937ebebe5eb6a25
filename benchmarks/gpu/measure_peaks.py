"""Measure achievable BF16 / FP8 matmul FLOP/s and HBM copy bandwidth on one GPU (needs torch + CUDA).

Prints YAML snippets for analysis/data/hardware/<gpu>.yaml with measured: true. Times with CUDA events,
best of several repetitions after warm-up; sizes are large enough to leave L2 behind.
Run: python benchmarks/gpu/measure_peaks.py
"""
from __future__ import annotations

import datetime

import torch


def _best_ms(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def matmul_flops(dtype: str, n: int = 8192) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    if dtype == "fp8":
        a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device="cuda")
        ms = _best_ms(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    else:
        ms = _best_ms(lambda: a @ b)
    return 2 * n**3 / (ms / 1e3)


def copy_bandwidth(gib: float = 4.0) -> float:
    src = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = _best_ms(lambda: dst.copy_(src))
    return 2 * src.numel() / (ms / 1e3)  # read + write


def main() -> None:
    name = torch.cuda.get_device_name()
    when = datetime.date.today().isoformat()
    driver = torch.version.cuda
    for key, value in (("bf16_flops_per_s", matmul_flops("bf16")), ("fp8_flops_per_s", matmul_flops("fp8")),
                       ("hbm_bytes_per_s", copy_bandwidth())):
        print(f"  {key}:\n    value: {value:.4g}\n    source: \"benchmarks/gpu/measure_peaks.py on {name}, "
              f"CUDA {driver}, {when}\"\n    measured: true")


if __name__ == "__main__":
    main()
