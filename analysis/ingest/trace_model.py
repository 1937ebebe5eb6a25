"""In-memory shape of one rank's trace: only the fields the analysis uses.

Times are microseconds on the trace's own clock (PyTorch profiler `ts`/`dur`).
"""
from __future__ import annotations

import msgspec

from analysis.ingest.range_tree import RangeTree


class RankId(msgspec.Struct, frozen=True):
    """Where a trace comes from. Fields absent from the file name stay None."""

    tp: int | None = None
    dp: int | None = None
    pp: int | None = None
    ep: int | None = None
    stage: str | None = None  # DECODE, EXTEND, ... as written in the file name
    label: str = "rank0"  # stable display name, e.g. "TP0-EP0"


class Kernel(msgspec.Struct, gc=False):
    """One GPU activity (kernel, memcpy or memset) as the device ran it."""

    name: str
    stream: int
    start_us: float
    dur_us: float
    correlation: int
    launcher: str  # runtime/driver call that launched it: cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch, ...
    kind: str = "kernel"  # kernel | memcpy | memset | cpu_op
    root: str = ""  # CPU operators only: the outermost operator around this one (aten::linear for aten::mm)

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


def are_cpu_operators(kernels: list[Kernel]) -> bool:
    """Whether these kernels (a trace's, or a step's) are CPU operators rather than GPU work: a trace
    holds GPU kernels or, where it has none, its CPU operators, never both (trace_loader.py), so the
    first kernel says it."""
    return bool(kernels) and kernels[0].kind == "cpu_op"


class Range(msgspec.Struct, gc=False):
    """A named time range: a GPU or CPU annotation, or an nn.Module python range."""

    name: str
    start_us: float
    dur_us: float
    tid: int

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


class Launch(msgspec.Struct, gc=False):
    """A CPU-side runtime/driver call that launched GPU work (keyed by correlation id)."""

    name: str
    start_us: float
    tid: int
    correlation: int
    kernel_name: str | None = None  # present in graph-capture traces (args.kernel)


class RankTrace(msgspec.Struct):
    """Everything the analysis needs from one rank's trace file."""

    path: str
    rank: RankId
    device_name: str | None
    kernels: list[Kernel]  # sorted by start_us
    gpu_annotations: list[Range]  # cat gpu_user_annotation
    cpu_annotations: list[Range]  # cat user_annotation
    module_ranges: list[Range]  # python_function events named "nn.Module: ..."
    launches: list[Launch]  # cudaLaunchKernel / cuLaunchKernelEx / cudaGraphLaunch / hip* ...
    json_bytes: int = 0  # uncompressed JSON size, for throughput figures
    function_ranges: list[Range] = []  # python functions that name a role (module_map.yaml `functions`)
    capture_windows: list[Range] = []  # cudaStreamBeginCapture .. cudaStreamEndCapture, per thread (capture traces)
    module_tree: RangeTree | None = None  # module_ranges as a tree, built once (module_range_tree)
    syncs: list[Range] = []  # runtime calls that may block the host on the GPU (host_syncs.yaml), by start
    content_key: str = ""  # the same for two files holding the same kernels at the same times (trace_loader)

    def launch_by_correlation(self) -> dict[int, Launch]:
        return {launch.correlation: launch for launch in self.launches}

    def module_range_tree(self) -> RangeTree:
        """The rank's nn.Module ranges as one tree per thread, built on first use and kept."""
        if self.module_tree is None:
            self.module_tree = RangeTree(self.module_ranges)
        return self.module_tree
