"""SYNTHETIC expert-parallel decode traces with known GPU-idle gaps and collective waits.

Every rank runs the same kernels back to back (no gap), each launched well before it starts, so
without injections the GPU never idles inside a step. Injected, in every step:

- `late_us`: one rank's host launches the all-reduce before the layers that much late (a slow
  host before the layers: rank skew). That rank's GPU idles `late_us` before the layers (host-bound);
  every other rank's all-reduce starts on time and waits `late_us` for it.
- `host_delay_us`: another rank's host launches the first kernel of layer `delay_layer` that much
  after the previous kernel ended (host-bound idle between layers); at that layer's DeepEP dispatch
  the other ranks wait for it.
- `queued_us`: in layer 0, one kernel starts that much after the previous one ended although it
  was launched long before (queued idle inside a layer).
- `sync_gap_us`: after the LM head a device-to-host copy, the host blocked in
  cudaStreamSynchronize until it ends, then the sampling kernel launched `sync_gap_us` later
  (host-sync idle after the layers).
- `between_us`: from one step's last kernel to the next step's first (host between steps).

Collectives end at the same true time on every rank (the last arrival plus `transfer_us`); each
rank's trace is on its own clock (`clock_offsets_us`). The expected figures follow from the
injections alone (Injected.expected), not from the analysis code. This proves the arithmetic and
the launch-pattern rules on input written to match them; the bundled real traces with injected
gaps (tests/test_step_time.py) test them on real timelines.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from analysis.attribution.signature import load_signature

from synthetic_deepseek import MAIN_STREAM, entry_dur_us, write_trace_file

SIGNATURE = "sglang-sm90-deepep-ll"
COPY_STREAM = 9
LEAD_US = 40.0  # launch ahead of a kernel that runs as soon as the GPU is free
LATE_LEAD_US = 3.0  # launch ahead of a kernel the host launched late (after the GPU ran dry)
ALLREDUCE = "void sglang::cross_device_reduce_1stage<__nv_bfloat16, 8>(RankData*, RankSignals, Signal*, __nv_bfloat16*, int, int)"
EMBEDDING = "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(...)"
LM_HEAD = "nvjet_tst_lm_head_256x128_64x5_2x1_v_bz_TNT"
COPY_OUT = "Memcpy DtoH (Device -> Pinned)"
SAMPLE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4> >(...)"


@dataclass
class Injected:
    """What was put in, per rank and step, and the files."""

    ranks: int
    steps: int
    late_rank: int
    late_us: float
    host_rank: int
    host_delay_us: float
    delay_layer: int
    queued_us: float
    sync_gap_us: float
    between_us: float
    transfer_us: float
    paths: list[Path]

    def expected(self, rank: int) -> dict[str, float]:
        """Each steps.csv figure of one step of `rank` that the injections set (us)."""
        late, host = rank == self.late_rank, rank == self.host_rank
        return {
            "idle_pre_us": self.late_us if late else 0.0,
            "idle_between_us": self.host_delay_us if host else 0.0,
            "idle_inside_us": self.queued_us,
            "idle_post_us": self.sync_gap_us,
            "idle_host_launch_us": (self.late_us if late else 0.0) + (self.host_delay_us if host else 0.0),
            "idle_host_sync_us": self.sync_gap_us,
            "idle_queued_us": self.queued_us,
            "wait_pre_us": 0.0 if late else self.late_us,
            "wait_layers_us": 0.0 if host else self.host_delay_us,
        }


def write_idle_ranks(out_dir: Path, *, ranks: int = 2, num_layers: int = 4, dense_layers: int = 1, steps: int = 3,
                     late_rank: int = 1, late_us: float = 700.0, host_rank: int = 0, host_delay_us: float = 250.0,
                     delay_layer: int = 2, queued_us: float = 30.0, sync_gap_us: float = 400.0,
                     between_us: float = 150.0, transfer_us: float = 20.0,
                     clock_offsets_us: list[float] | None = None) -> Injected:
    sig = load_signature(SIGNATURE)
    offsets = clock_offsets_us or [1234.5 * r for r in range(ranks)]
    events: list[list[dict]] = [[] for _ in range(ranks)]
    corr = [1] * ranks

    def launch(rank: int, name: str, ts: float, dur: float = 2.0) -> int:
        events[rank].append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1,
                             "ts": ts + offsets[rank], "dur": dur, "args": {"correlation": corr[rank]}})
        corr[rank] += 1
        return corr[rank] - 1

    def kernel(rank: int, name: str, start: float, dur: float, lead: float = LEAD_US, cat: str = "kernel",
               stream: int = MAIN_STREAM, call: str = "cudaLaunchKernel") -> float:
        correlation = launch(rank, call, start - lead)
        events[rank].append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": start + offsets[rank],
                             "dur": dur, "args": {"stream": stream, "correlation": correlation, "device": rank}})
        return start + dur

    kinds = ["dense"] * dense_layers + ["moe"] * (num_layers - dense_layers)
    clock = [1000.0] * ranks  # true time on each rank
    for _step in range(steps):
        start = max(clock)
        for r in range(ranks):
            clock[r] = kernel(r, EMBEDDING, start, 4.0, lead=LATE_LEAD_US if _step else LEAD_US)
        # the all-reduce before the layers: the late rank's host launches it late_us after its GPU ran dry
        arrive = [clock[r] + (late_us if r == late_rank else 0.0) for r in range(ranks)]
        end = max(arrive) + transfer_us
        for r in range(ranks):
            clock[r] = kernel(r, ALLREDUCE, arrive[r], end - arrive[r], lead=LATE_LEAD_US if r == late_rank else LEAD_US)
        for layer, kind in enumerate(kinds):
            first = True
            for index, entry in enumerate(sig.layer):
                if entry.in_layers not in ("all", kind):
                    continue
                if entry.module in ("dispatch", "combine"):
                    end = max(clock) + transfer_us
                    for r in range(ranks):
                        clock[r] = kernel(r, entry.example, clock[r], end - clock[r])
                    continue
                for r in range(ranks):
                    at, lead = clock[r], LEAD_US
                    if first and layer == delay_layer and r == host_rank:
                        at, lead = at + host_delay_us, LATE_LEAD_US
                    if layer == 0 and index == 2:  # queued: launched long before, started late
                        at, lead = at + queued_us, LEAD_US + queued_us
                    clock[r] = kernel(r, entry.example, at, entry_dur_us(index), lead=lead)
                first = False
        for r in range(ranks):
            clock[r] = kernel(r, LM_HEAD, clock[r], 20.0)
            copy_start = clock[r]
            clock[r] = kernel(r, COPY_OUT, copy_start, 2.0, lead=5.0, cat="gpu_memcpy", stream=COPY_STREAM,
                              call="cudaMemcpyAsync")
            # the host waits for the copy, then takes sync_gap_us to launch the sampling kernel
            events[r].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
                              "ts": copy_start - 4.0 + offsets[r], "dur": clock[r] - copy_start + 4.5, "args": {}})
            clock[r] = kernel(r, SAMPLE, clock[r] + sync_gap_us, 6.0, lead=LATE_LEAD_US)
            events[r].append({"ph": "X", "cat": "gpu_user_annotation", "name": "step[DECODE bs=16]", "pid": 0,
                              "tid": MAIN_STREAM, "ts": start - 0.5 + offsets[r], "dur": clock[r] - start + 1.0,
                              "args": {}})
        clock = [max(clock) + between_us] * ranks
        # every rank ends the step at the same true time (the step's last collective syncs them)
    paths = [write_trace_file(out_dir / f"synthetic-idle-TP-{r}-EP-{r}-DECODE.trace.json.gz", events[r], device_id=r)
             for r in range(ranks)]
    return Injected(ranks, steps, late_rank, late_us, host_rank, host_delay_us, delay_layer, queued_us, sync_gap_us,
                    between_us, transfer_us, paths)
