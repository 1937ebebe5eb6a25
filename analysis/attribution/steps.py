"""Cut a rank's kernels into forward steps.

Order of preference (the first that finds steps wins):
1. nn.Module ranges (eager traces): one step per call of the outermost module whose calls repeat
   (the model's forward), kernels mapped to it through their launch call; the step annotation
   around a call, if any, gives its stage;
2. CPU-side step annotations (`step[...]`, `ProfilerStep#N`), kernels mapped to them through the
   correlation id of their launch call (for CPU-only traces, by the operator's own start), when
   they place nearly every kernel: exact, a CUDA-graph replay's kernels included;
3. GPU-side step annotations (`step[DECODE bs=16]`, SGLang's `gpu_user_annotation`), kernels by
   start time; same-named windows that overlap (one per stream the step used) are one step;
4. one CUDA-graph replay per step: kernels sharing the correlation id of one `cudaGraphLaunch`;
5. a gap rule: a new step starts when every stream has been idle for more than `gap_us`; pieces
   that hold fewer attention cores than the others are joined with their neighbours (an eager
   step stalls on the host, e.g. for a cuDNN plan or a data-dependent expert loop, and the gap
   alone would cut it in two).
`Step.segmented_by` names the rule: module_range, gpu_annotation, cpu_annotation, graph_launch, gap.
"""
from __future__ import annotations

import bisect
import functools
import operator
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING


from analysis.attribution.module_attribution import module_class
from analysis.attribution.step_times import StepTimes
from analysis.ingest.trace_model import Kernel, Range, RankTrace, are_cpu_operators
from analysis.rules import load_rules, rules_path
from analysis.rules_schema import StepLabels
from analysis.attribution.stages import UNKNOWN, VERIFY
from analysis.analysis_options import DEFAULT_STEP_GAP_US

if TYPE_CHECKING:
    import numpy as np

STEP_ANNOTATION = re.compile(
    r"^step\[(?P<mode>[A-Za-z_][A-Za-z0-9_]*)(?P<rest>[^\]]*)\]"  # SGLang
    r"|^(?P<spec>draft|draft_extend)$"  # SGLang's speculative (MTP / EAGLE) draft passes
    r"|^execute_context_(?P<ctx>\d+)\(.*\)_generation_(?P<gen>\d+)\("  # vLLM step names (as recorded by TraceLens)
    r"|^ProfilerStep#\d+"  # torch.profiler schedule steps
)
_BATCH = re.compile(r"\bbs=(\d+)")
_START_OF = operator.attrgetter("start_us")
GRAPH_LAUNCHERS = {"cudaGraphLaunch", "hipGraphLaunch", "cudaGraphLaunch_v10000"}
DEFAULT_GAP_US = DEFAULT_STEP_GAP_US  # the option's default (analysis/analysis_options.py)

STEP_LABELS_FILE = rules_path("step_labels.yaml")


@functools.lru_cache(maxsize=1)
def _label_table() -> tuple[dict[str, str], dict[str, str]]:
    """(label -> stage, label -> stage when the step follows a verify step), from step_labels.yaml."""
    data = load_rules(STEP_LABELS_FILE.name, StepLabels)
    labels = {str(k).upper(): str(v) for k, v in data.labels.items()}
    after = {str(k).upper(): str(v) for k, v in data.after_verify.items()}
    return labels, after


@functools.lru_cache(maxsize=1)
def _aggregate_keys() -> tuple[dict[str, str], dict[str, str]]:
    """Label key (g_sk, ...) -> the step field it adds to (kv_tokens, ...), from step_labels.yaml; then the
    fallback keys (toks), taken for a field only where none of its own keys is in the label."""
    data = load_rules(STEP_LABELS_FILE.name, StepLabels)
    return ({key: field for field, keys in data.aggregates.items() for key in keys},
            {key: field for field, keys in data.aggregate_fallbacks.items() for key in keys})


_KEY_VALUE = re.compile(r"\b([a-z_]+)=(\d+)\b")


def label_aggregates(label: str) -> dict[str, int]:
    """The step's own batch shape from its label: SGLang's detailed annotations (query_tokens, kv_tokens,
    forward_id; step_labels.yaml `aggregates`), else an EXTEND label's toks= (`aggregate_fallbacks`); {}
    when the label carries none."""
    keys, fallbacks = _aggregate_keys()
    out: dict[str, int] = {}
    spare: dict[str, int] = {}
    for key, value in _KEY_VALUE.findall(label):
        if (field := keys.get(key)) is not None:
            out[field] = out.get(field, 0) + int(value)
        elif (field := fallbacks.get(key)) is not None:
            spare[field] = spare.get(field, 0) + int(value)
    return spare | out


def step_label_stages() -> dict[str, str]:
    """Every step label the analysis knows, with the stage it names."""
    return dict(_label_table()[0])


KNOWN_STAGES = frozenset(step_label_stages().values())


@dataclass
class Step:
    index: int
    stage: str
    kernels: list[Kernel]
    segmented_by: str
    batch_size: int | None = None
    label: str = ""
    notes: list[str] = field(default_factory=list)
    side: list[Kernel] = field(default_factory=list)  # copies off the step's threads (off_thread.py)
    # `kernels`' times as arrays, read once where the attribution names the step (step_times.py)
    times: StepTimes | None = None

    @property
    def aggregates(self) -> dict[str, int]:
        return label_aggregates(self.label) if self.label else {}


def stage_of(label: str | None, default: str = UNKNOWN) -> str:
    if not label:
        return default
    match = STEP_ANNOTATION.match(label)
    if match and match.group("ctx") is not None:
        return "decode" if int(match.group("ctx")) == 0 else "extend"
    stages = _label_table()[0]
    if match and match.group("mode"):
        mode = match.group("mode").upper()
        return stages.get(mode, mode.lower())
    return stages.get(label.upper(), default)


def _label_mode(label: str) -> str:
    match = STEP_ANNOTATION.match(label) if label else None
    if match and match.group("mode"):
        return match.group("mode").upper()
    return (match.group("spec") or "").upper() if match else ""


def _stages_after_verify(steps: list[Step]) -> None:
    """Labels whose stage depends on the step before (0.5.23's DRAFT: the first after a verify
    step is the draft extend); steps are one rank's, in time order."""
    after = _label_table()[1]
    for previous, step in zip(steps, steps[1:]):
        if previous.stage == VERIFY and _label_mode(step.label) in after:
            step.stage = after[_label_mode(step.label)]


def _batch_of(label: str) -> int | None:
    match = _BATCH.search(label)
    return int(match.group(1)) if match else None


_CHUNK = 16384  # kernels per array pass: temporaries stay small beside the trace (peak memory)


def _by_windows(kernels: list[Kernel], windows: list[Range], points: list[float | None]
                ) -> tuple[list[list[Kernel]], list[Kernel]]:
    """Assign each kernel to the last window (by start) that contains its point (points[i] for
    kernels[i]; None: no window); windows are sorted by start. Also returns the kernels no window
    holds, in order. Array passes over a chunk of kernels at a time: a trace's hundreds of thousands
    of kernels were one Python loop here (#48); the windows and points are only compared, never
    summed, so no value moves."""
    from analysis.numeric import np

    buckets: list[list[Kernel]] = [[] for _ in windows]
    rest: list[Kernel] = []
    if not windows:
        return buckets, list(kernels)
    starts = np.array([w.start_us for w in windows], dtype=np.float64)
    ends = np.array([w.end_us for w in windows], dtype=np.float64)
    reach = np.maximum.accumulate(ends)  # the furthest end of the windows begun so far
    ends_us = ends.tolist()
    for first in range(0, len(kernels), _CHUNK):
        window = _windows_of(np.array(points[first:first + _CHUNK], dtype=np.float64), starts, ends, reach, ends_us)
        # kernels come by start, so each window's kernels mostly come in runs: a list slice a run
        cuts = (np.flatnonzero(window[1:] != window[:-1]) + 1).tolist()
        for a, b in zip([0, *cuts], [*cuts, len(window)]):
            w = int(window[a])
            (rest if w < 0 else buckets[w]).extend(kernels[first + a:first + b])
    return buckets, rest


def _windows_of(at: np.ndarray, starts: np.ndarray, ends: np.ndarray, reach: np.ndarray,
                ends_us: list[float]) -> np.ndarray:
    """Each point's window (-1: none; NaN: no point): the last window begun by the point holds it
    when it reaches it, and only an earlier one can otherwise (windows that nest or overlap), found
    where the furthest reach so far says so, by a walk back over the windows' ends (`ends_us`)."""
    from analysis.numeric import np

    last = np.searchsorted(starts, at, side="right") - 1
    window = np.full(len(at), -1, dtype=np.int64)
    where = np.flatnonzero(~np.isnan(at) & (last >= 0))
    held = ends[last[where]] >= at[where]
    window[where[held]] = last[where[held]]
    earlier = where[~held]
    for k in earlier[reach[last[earlier]] >= at[earlier]].tolist():  # nested windows: few
        point, j = float(at[k]), int(last[k])
        while ends_us[j] < point:
            j -= 1
        window[k] = j
    return window


TAIL_GAP_US = 50_000.0  # GPU idle after the last step window's kernels that starts a tail of its own


def _place_the_rest(rest: list[Kernel], steps: list[list[Kernel]], launched_at=None,
                    windows_end_us: float = float("inf")) -> list[Kernel]:
    """Kernels launched outside every step window (another scheduler thread's copies) join the
    step they ran during on the GPU, or the one before them: never dropped. Returns the tail: kernels
    launched after the last step window ended (`launched_at(kernel)`: the launch call's start) that ran
    after more than TAIL_GAP_US of idle following the last step's kernels (a plain profile window's last
    pass prepares the next batch, which came seconds later under a bursty prefill load: seen on SGLang
    0.5.17), kept as a step of its own without a label, not stretched into the last step. Only a
    kernel that ran soon after its launch: one whose launch lies inside the windows (or is unknown), or
    that ran long after it, joins the last step however far off it ran (a time like that is the
    self-checks' to flag)."""
    if not rest:
        return []
    starts = [step[0].start_us for step in steps]  # each step's kernels come by start (segment_steps)
    last = len(steps) - 1
    frontier = max(k.end_us for k in steps[last]) if steps[last] else float("-inf")
    tail: list[Kernel] = []
    joined: set[int] = set()
    for kernel in sorted(rest, key=_START_OF):
        i = max(0, bisect.bisect_right(starts, kernel.start_us) - 1)
        if i == last and launched_at is not None and (tail or kernel.start_us - frontier > TAIL_GAP_US):
            point = launched_at(kernel)
            if point is not None and point > windows_end_us and kernel.start_us - point < TAIL_GAP_US:
                tail.append(kernel)
                continue
        steps[i].append(kernel)
        joined.add(i)
        if i == last:
            frontier = max(frontier, kernel.end_us)
    for i in joined:  # back in start order, ties as they came (the sort segment_steps no longer repeats)
        steps[i].sort(key=_START_OF)
    return tail


def _merged(windows: list[Range]) -> list[Range]:
    """One window per step: SGLang records a step's GPU annotation on each stream it uses (the main
    and the alternate stream), so same-named windows that overlap are one step."""
    out: list[Range] = []
    for w in windows:
        if out and out[-1].name == w.name and w.start_us <= out[-1].end_us:
            end = max(out[-1].end_us, w.end_us)
            out[-1] = Range(w.name, out[-1].start_us, end - out[-1].start_us, out[-1].tid)
        else:
            out.append(w)
    return out


def _step_windows(ranges: list[Range], per_stream: bool = False) -> list[Range]:
    """The step annotations among `ranges`, one window per step, by start: `per_stream` (GPU annotations,
    written on each stream a step used) merges a step's windows first; then windows inside windows are
    unnested."""
    windows = sorted((r for r in ranges if STEP_ANNOTATION.match(r.name)), key=lambda r: (r.start_us, -r.dur_us))
    return _unnested(_merged(windows) if per_stream else windows)


def _unnested(windows: list[Range]) -> list[Range]:
    """Step windows without nesting. SGLang 0.5.17 wraps an MTP draft extend twice: its speculative
    worker's `draft_extend` range around the forward's own `step[DRAFT_EXTEND_V2 bs=N]`; taken as two
    windows, the kernels before and after the inner one became a step of their own (without stacks:
    draft-extend steps of 0 and 1 layers). The inner windows are the steps (their labels carry the batch);
    the outer's kernels before the first and after the last join them. `windows`: by start, longer first
    (GPU annotations merged per step first, or a step's windows on its several streams would nest)."""
    out: list[Range] = []
    i = 0
    while i < len(windows):
        outer = windows[i]
        j = i + 1
        while j < len(windows) and windows[j].end_us <= outer.end_us:
            j += 1
        inner = _unnested(windows[i + 1:j])
        if inner:
            first = inner[0]
            inner[0] = Range(first.name, outer.start_us, first.end_us - outer.start_us, first.tid)
            last = inner[-1]
            inner[-1] = Range(last.name, last.start_us, outer.end_us - last.start_us, last.tid)
            out.extend(inner)
        else:
            out.append(outer)
        i = j
    return out


def _model_calls(trace: RankTrace) -> list[Range]:
    """Calls of the outermost module whose calls repeat and hold decoder layers (the model's forward), or []."""
    from analysis.attribution.module_roles import standard_map

    if not trace.module_ranges:
        return []
    tree = trace.module_range_tree()
    roots = [tree.ranges[node] for node in tree.roots()]  # in the trace's order: by start, longer first
    by_class: dict[str, list[Range]] = {}
    for r in roots:
        by_class.setdefault(module_class(r.name), []).append(r)
    model = standard_map().model

    def rank(item: tuple[str, list[Range]]):
        cls, calls = item
        return (bool(model.search(cls)), len(calls), sum(c.dur_us for c in calls))

    # the model's forward holds the decoder layers; a sampler or a rotary module called on its own does not
    layers = [r for r in trace.module_ranges if standard_map().layer.search(module_class(r.name))]

    def holds_layers(calls: list[Range]) -> bool:
        return any(c.tid == lay.tid and c.start_us <= lay.start_us <= c.end_us for c in calls for lay in layers)

    # every model class that holds layers is a forward of its own: with MTP, the target model's and
    # the draft (NextN) model's calls are separate steps, as their stage annotations make them
    models = [calls for cls, calls in by_class.items() if model.search(cls) and holds_layers(calls)]
    if models:
        return sorted((c for calls in models for c in calls), key=lambda r: r.start_us)
    for _cls, calls in sorted(by_class.items(), key=rank, reverse=True):
        if holds_layers(calls):
            return sorted(calls, key=lambda r: r.start_us)
    return []


def segment_steps(trace: RankTrace, gap_us: float = DEFAULT_GAP_US, use_modules: bool = True) -> list[Step]:
    """The rank's steps, each holding its kernels in start order. The trace's kernels come by start
    (RankTrace), and every rule below keeps that order: it hands out kernels in the trace's order
    (or, _place_the_rest, sorts the steps it adds to), so no step is sorted again."""
    kernels = trace.kernels
    default_stage = stage_of(trace.rank.stage) if trace.rank.stage else UNKNOWN

    def make(groups: list[list[Kernel]], how: str, labels: list[str] | None = None) -> list[Step]:
        steps = []
        for i, group in enumerate(g for g in groups if g):
            label = labels[i] if labels else ""
            steps.append(
                Step(
                    index=len(steps),
                    stage=stage_of(label, default_stage),
                    kernels=group,
                    segmented_by=how,
                    batch_size=_batch_of(label) if label else None,
                    label=label,
                )
            )
        _stages_after_verify(steps)
        return steps

    launch_ts = {launch.correlation: launch.start_us for launch in trace.launches}

    def cpu_point(kernel: Kernel) -> float | None:
        if kernel.launcher == "cpu":
            return kernel.start_us
        return launch_ts.get(kernel.correlation)

    def cpu_points() -> list[float | None]:
        """cpu_point of every kernel, in one pass (only CPU operators are placed by their own start)."""
        at = launch_ts.get
        if are_cpu_operators(kernels):
            return [k.start_us if k.launcher == "cpu" else at(k.correlation) for k in kernels]
        return [at(k.correlation) for k in kernels]

    calls = _model_calls(trace) if use_modules else []
    if calls:
        starts = [c.start_us for c in calls]
        buckets: list[list[Kernel]] = [[] for _ in calls]
        for kernel in kernels:
            point = cpu_point(kernel)
            if point is None:
                continue
            # a kernel belongs to the call it was launched in, or (sampling, input prep) to the
            # call before it; anything launched before the first call, to the first
            buckets[max(0, bisect.bisect_right(starts, point) - 1)].append(kernel)
        annotations = _step_windows(trace.cpu_annotations) or _step_windows(trace.gpu_annotations, per_stream=True)
        labels = []
        for call in calls:
            around = next((w for w in annotations if w.start_us <= call.start_us <= w.end_us), None)
            labels.append(around.name if around is not None else "")
        kept = [(b, label) for b, label in zip(buckets, labels) if b]
        if kept:
            return make([b for b, _ in kept], "module_range", [label for _, label in kept])

    # CPU step annotations place kernels exactly (through their launch call, a graph replay's too);
    # GPU ones only by time, and a replay can outrun its window. So the CPU ones win wherever they
    # place nearly every kernel.
    cpu_windows = _step_windows(trace.cpu_annotations)
    cpu_kept = []
    if cpu_windows:
        buckets, cpu_rest = _by_windows(kernels, cpu_windows, cpu_points())
        cpu_kept = [(b, w.name) for b, w in zip(buckets, cpu_windows) if b]
        placed = sum(len(b) for b, _ in cpu_kept)
        if cpu_kept and placed >= 0.9 * len(kernels):
            steps = [b for b, _ in cpu_kept]
            tail = _place_the_rest(cpu_rest, steps, cpu_point, cpu_windows[-1].end_us)
            return make(steps + [tail], "cpu_annotation", [n for _, n in cpu_kept] + [""])

    gpu_windows = _step_windows(trace.gpu_annotations, per_stream=True)
    if gpu_windows:
        buckets, rest = _by_windows(kernels, gpu_windows, [k.start_us for k in kernels])
        kept = [(b, w.name) for b, w in zip(buckets, gpu_windows) if b]
        if kept:
            steps = [b for b, _ in kept]
            ends = [w.end_us for w in cpu_windows or gpu_windows]
            tail = _place_the_rest(rest, steps, cpu_point, max(ends))
            return make(steps + [tail], "gpu_annotation", [n for _, n in kept] + [""])

    if cpu_kept:  # CPU windows that place fewer kernels, when there are no GPU ones
        steps = [b for b, _ in cpu_kept]
        tail = _place_the_rest(cpu_rest, steps, cpu_point, cpu_windows[-1].end_us)
        return make(steps + [tail], "cpu_annotation", [n for _, n in cpu_kept] + [""])

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
    return make(_refine_gap_pieces(groups), "gap")


def _refine_gap_pieces(groups: list[list[Kernel]]) -> list[list[Kernel]]:
    """Steps from gap-cut pieces, checked against the layer structure.

    Pieces that each hold the same number of attention cores are steps. Otherwise the gaps lied
    (no idle gap between steps, or a host stall inside one): the kernels are cut again where the
    layer structure says one step ends and the next begins, and failing that, short pieces are
    joined with their neighbours.
    """
    from analysis.attribution.structure import count_attention_cores, split_at_step_borders

    counts = [count_attention_cores(g) for g in groups]
    if counts and min(counts) == max(counts) and counts[0] > 0 and len(groups) > 1:
        return groups
    everything = sorted((k for g in groups for k in g), key=lambda k: k.start_us)
    steps = split_at_step_borders(everything)
    if len(steps) > 1:
        return steps
    return _join_short_pieces(groups, counts)


def _join_short_pieces(groups: list[list[Kernel]], counts: list[int]) -> list[list[Kernel]]:
    """Join gap-cut pieces until each holds as many attention cores as the fullest piece.

    Why: a step is one pass over every layer, so every step has the same number of attention
    cores; an idle gap inside a step (the host stalled) leaves two pieces whose counts add up to
    that number. Pieces without any core (sampling after the model, a stray copy) join the
    neighbour they are closer to in time. `counts`: the attention cores of each piece.
    """
    if len(groups) < 2:
        return groups
    full = max(counts)
    if full == 0:
        return groups
    merged: list[list[Kernel]] = []
    merged_counts: list[int] = []
    for i, (group, count) in enumerate(zip(groups, counts)):
        if count == 0 and merged:
            gap_before = group[0].start_us - max(k.end_us for k in merged[-1])
            nxt = groups[i + 1] if i + 1 < len(groups) else None
            gap_after = nxt[0].start_us - max(k.end_us for k in group) if nxt is not None else float("inf")
            if gap_before <= gap_after or counts[i + 1] == full:
                merged[-1] = merged[-1] + group
                continue
        if merged and merged_counts[-1] < full and merged_counts[-1] + count <= full:
            merged[-1] = merged[-1] + group
            merged_counts[-1] += count
        else:
            merged.append(list(group))
            merged_counts.append(count)
    return merged
