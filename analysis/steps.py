"""Cut a rank's kernels into forward steps.

Order of preference (the first that finds steps wins):
1. GPU-side step annotations (`step[DECODE bs=16]`, SGLang's `gpu_user_annotation`);
2. CPU-side step annotations (`step[...]`, `ProfilerStep#N`), kernels mapped to them through the
   correlation id of their launch call (for CPU-only traces, by the operator's own start);
3. one CUDA-graph replay per step: kernels sharing the correlation id of one `cudaGraphLaunch`;
4. a gap rule: a new step starts when every stream has been idle for more than `gap_us`.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from analysis.trace_model import Kernel, Range, RankTrace

STEP_ANNOTATION = re.compile(
    r"^step\[(?P<mode>[A-Za-z_]+)(?P<rest>[^\]]*)\]"  # SGLang
    r"|^execute_context_(?P<ctx>\d+)\(.*\)_generation_(?P<gen>\d+)\("  # vLLM step names (as recorded by TraceLens)
    r"|^ProfilerStep#\d+"  # torch.profiler schedule steps
)
_BATCH = re.compile(r"\bbs=(\d+)")
GRAPH_LAUNCHERS = {"cudaGraphLaunch", "hipGraphLaunch", "cudaGraphLaunch_v10000"}
DEFAULT_GAP_US = 1000.0

_STAGES = {
    "DECODE": "decode",
    "EXTEND": "extend",
    "PREFILL": "extend",
    "MIXED": "extend",
    "TARGET_VERIFY": "target_verify",
    "DRAFT_EXTEND": "draft_extend",
    "DRAFT_EXTEND_V2": "draft_extend",
    "DRAFT": "draft",
    "IDLE": "idle",
}


@dataclass
class Step:
    index: int
    stage: str
    kernels: list[Kernel]
    segmented_by: str
    batch_size: int | None = None
    label: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def start_us(self) -> float:
        return min(k.start_us for k in self.kernels)

    @property
    def end_us(self) -> float:
        return max(k.end_us for k in self.kernels)


def stage_of(label: str | None, default: str = "unknown") -> str:
    if not label:
        return default
    match = STEP_ANNOTATION.match(label)
    if match and match.group("ctx") is not None:
        return "decode" if int(match.group("ctx")) == 0 else "extend"
    if match and match.group("mode"):
        mode = match.group("mode").upper()
        return _STAGES.get(mode, mode.lower())
    return _STAGES.get(label.upper(), default)


def _batch_of(label: str) -> int | None:
    match = _BATCH.search(label)
    return int(match.group(1)) if match else None


def _by_windows(kernels: list[Kernel], windows: list[Range], key) -> list[list[Kernel]]:
    """Assign each kernel to the window that contains key(kernel); windows are sorted by start."""
    starts = [w.start_us for w in windows]
    buckets: list[list[Kernel]] = [[] for _ in windows]
    for kernel in kernels:
        point = key(kernel)
        if point is None:
            continue
        i = bisect.bisect_right(starts, point) - 1
        while i >= 0 and windows[i].end_us < point:
            i -= 1
        if i >= 0 and windows[i].start_us <= point <= windows[i].end_us:
            buckets[i].append(kernel)
    return buckets


def _step_windows(ranges: list[Range]) -> list[Range]:
    return sorted((r for r in ranges if STEP_ANNOTATION.match(r.name)), key=lambda r: r.start_us)


def segment_steps(trace: RankTrace, gap_us: float = DEFAULT_GAP_US) -> list[Step]:
    kernels = trace.kernels
    default_stage = stage_of(trace.rank.stage) if trace.rank.stage else "unknown"

    def make(groups: list[list[Kernel]], how: str, labels: list[str] | None = None) -> list[Step]:
        steps = []
        for i, group in enumerate(g for g in groups if g):
            label = labels[i] if labels else ""
            steps.append(
                Step(
                    index=len(steps),
                    stage=stage_of(label, default_stage),
                    kernels=sorted(group, key=lambda k: k.start_us),
                    segmented_by=how,
                    batch_size=_batch_of(label) if label else None,
                    label=label,
                )
            )
        return steps

    gpu_windows = _step_windows(trace.gpu_annotations)
    if gpu_windows:
        buckets = _by_windows(kernels, gpu_windows, lambda k: k.start_us)
        kept = [(b, w.name) for b, w in zip(buckets, gpu_windows) if b]
        if kept:
            return make([b for b, _ in kept], "gpu_annotation", [n for _, n in kept])

    cpu_windows = _step_windows(trace.cpu_annotations)
    if cpu_windows:
        launch_ts = {launch.correlation: launch.start_us for launch in trace.launches}

        def cpu_point(kernel: Kernel) -> float | None:
            if kernel.launcher == "cpu":
                return kernel.start_us
            return launch_ts.get(kernel.correlation)

        buckets = _by_windows(kernels, cpu_windows, cpu_point)
        kept = [(b, w.name) for b, w in zip(buckets, cpu_windows) if b]
        if kept:
            return make([b for b, _ in kept], "cpu_annotation", [n for _, n in kept])

    graph: dict[int, list[Kernel]] = {}
    for kernel in kernels:
        if kernel.launcher in GRAPH_LAUNCHERS:
            graph.setdefault(kernel.correlation, []).append(kernel)
    if graph:
        ordered = sorted(graph.values(), key=lambda g: g[0].start_us)
        return make(ordered, "graph_launch")

    groups: list[list[Kernel]] = []
    frontier = float("-inf")
    for kernel in kernels:
        if not groups or kernel.start_us - frontier > gap_us:
            groups.append([])
        groups[-1].append(kernel)
        frontier = max(frontier, kernel.end_us)
    return make(groups, "gap")
