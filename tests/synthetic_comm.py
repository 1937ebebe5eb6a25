"""SYNTHETIC two-rank (or more) expert-parallel decode traces with a known straggler.

The ranks run one true timeline: every kernel lasts the same on every rank, except one module
(by default the router's top-k) on one rank and one layer, which lasts `delay_us` longer. Each
DeepEP dispatch and combine starts when its rank arrives and ends on every rank at the same true
time: the last arrival plus `transfer_us`. So the rank that arrives first waits exactly the
injected delay in that layer's dispatch, and nowhere else. Each rank's trace is written on its own
clock: true time plus `clock_offsets_us[rank]`. With `jitter_us`, every other kernel and every
collective's end on each rank vary by up to that much (seeded), as on real hardware.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from analysis.attribution.signature import load_signature

from synthetic_deepseek import MAIN_STREAM, entry_dur_us, write_trace_file

SIGNATURE = "sglang-sm90-deepep-ll"
GAP_US = 1.0
COMM_MODULES = ("dispatch", "combine")


@dataclass
class Injected:
    """What was put in, for the tests to compare against."""

    delay_us: float
    delay_rank: int
    delay_layer: int
    delay_module: str
    transfer_us: float
    step_us: float  # true length of one step (for offsets of a whole step)
    paths: list[Path]


def write_ep_ranks(out_dir: Path, *, ranks: int = 2, num_layers: int = 4, dense_layers: int = 1, steps: int = 2,
                   delay_us: float = 300.0, delay_rank: int = 1, delay_layer: int = 2, delay_module: str = "topk",
                   transfer_us: float = 25.0, clock_offsets_us: list[float] | None = None,
                   jitter_us: float = 0.0, seed: int = 7) -> Injected:
    sig = load_signature(SIGNATURE)
    rng = random.Random(seed)
    offsets = clock_offsets_us or [0.0] * ranks
    events: list[list[dict]] = [[] for _ in range(ranks)]
    corr = [1] * ranks
    clock = [1000.0] * ranks  # true time on each rank

    def kernel(rank: int, name: str, start: float, dur: float) -> None:
        ts = start + offsets[rank]
        events[rank].append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": MAIN_STREAM, "ts": ts,
                             "dur": dur, "args": {"stream": MAIN_STREAM, "correlation": corr[rank], "device": rank}})
        events[rank].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                             "ts": ts - 0.5, "dur": 0.2, "args": {"correlation": corr[rank]}})
        corr[rank] += 1

    kinds = ["dense"] * dense_layers + ["moe"] * (num_layers - dense_layers)
    step_us = 0.0
    for _step in range(steps):
        start = max(clock)
        clock = [start] * ranks
        for r in range(ranks):
            kernel(r, "void at::native::embedding_kernel<float>(float*)", clock[r], 4.0)
            clock[r] += 4.0 + GAP_US
        for layer, kind in enumerate(kinds):
            for index, entry in enumerate(sig.layer):
                if entry.in_layers not in ("all", kind):
                    continue
                if entry.module in COMM_MODULES:
                    end = max(clock) + transfer_us
                    for r in range(ranks):
                        own_end = end + rng.uniform(0.0, jitter_us)
                        kernel(r, entry.example, clock[r], own_end - clock[r])
                        clock[r] = own_end + GAP_US
                    continue
                for r in range(ranks):
                    dur = entry_dur_us(index) + rng.uniform(0.0, jitter_us)
                    if (r, layer, entry.module) == (delay_rank, delay_layer, delay_module):
                        dur += delay_us
                    kernel(r, entry.example, clock[r], dur)
                    clock[r] += dur + GAP_US
        for r in range(ranks):
            kernel(r, "nvjet_tst_lm_head_256x128_64x5_2x1_v_bz_TNT", clock[r], 20.0)
            clock[r] += 20.0
            events[r].append({"ph": "X", "cat": "gpu_user_annotation", "name": "step[DECODE bs=16]", "pid": 0,
                              "tid": MAIN_STREAM, "ts": start - 0.5 + offsets[r], "dur": clock[r] - start + 1.0,
                              "args": {}})
        step_us = max(clock) - start
        clock = [max(clock) + 50.0] * ranks
    paths = [write_trace_file(out_dir / f"synthetic-ep-TP-{r}-EP-{r}-DECODE.trace.json.gz", events[r], device_id=r)
             for r in range(ranks)]
    return Injected(delay_us, delay_rank, delay_layer, delay_module, transfer_us, step_us, paths)
