"""CUDA-graph capture traces: the module behind each replayed kernel, from the capture's own ranges.

Why: kernels replayed from a CUDA graph carry no module information; the trace the engine records
while it captures the graph does (nn.Module ranges around each launch). A graph replays the
kernels its capture launched, in the same order, so the n-th launch between
cudaStreamBeginCapture and cudaStreamEndCapture names the n-th replayed kernel. CUDA launch calls
carry no kernel name, so on NVIDIA the launch count must equal the replayed kernel count (ROCm's
launches name their kernel, and are aligned by name).

What engines write (docs/analysis.md):
- SGLang 0.5.23+ (`--enable-profile-cuda-graph`, `SGLANG_GRAPH_BATCH_CAPTURE=1`):
  `graph_capture_profile/{Runner}_bs_{N}[...]_rank{R}.json.gz`, one file per batch size;
- vLLM (`--profiler-config.capture_torch_profiler`): `capture_traces/graph_capture_rank_{R}.{ns}.pt.trace.json.gz`,
  one file per captured shape, annotated `capture_{N}_{FULL|PIECEWISE}`; an `execution_details.json`
  beside them (written by TraceLens) lists file, batch_size and mode.
A capture that cannot be used is never skipped silently: the reason becomes a problem of the run.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from analysis.io.input_files import CONFIG_LIMIT_BYTES, InputFileError, read_json
from analysis.errors import AnalysisError, TraceLoadError
from analysis.attribution.align import matching_pairs
from analysis.attribution.layers import Slot
from analysis.attribution.module_attribution import module_class
from analysis.attribution.module_roles import ModuleRoleNamer, RangeForest, roles_from_ranges, slots_from_roles, standard_map
from analysis.attribution.rows import SOURCE_CAPTURE
from analysis.ingest.trace_loader import load_trace
from analysis.ingest.trace_model import Kernel, Launch, RankTrace

CAPTURE_SUFFIXES = (".json", ".json.gz")
_BATCH_IN_NAME = re.compile(r"(?:^|_)bs_?(\d+)(?:_|\.|$)")
# The rank in a capture file's name: `..._rank3` (AMD's, vLLM's) or SGLang's `...-TP-3` (0.5.17's
# cuda_graph_capture-<runner>-TP-<tp>.json.gz).
_RANK_IN_NAME = re.compile(r"(?:rank_?|-TP-)(\d+)")
_VLLM_ANNOTATION = re.compile(r"^capture_(\d+)_([A-Z_]+)$")


@dataclass
class Capture:
    """One captured graph: its launches in launch order, and what named them."""

    path: str
    batch_size: int | None
    mode: str | None
    rank: int | None
    launches: list[Launch]
    namer: ModuleRoleNamer | None  # None: the capture has no nn.Module ranges
    layer_ranges: int  # decoder-layer module calls in the capture

    def describe(self) -> str:
        bs = f"bs {self.batch_size}" if self.batch_size is not None else "batch size unknown"
        return f"{Path(self.path).name} ({bs}, {len(self.launches)} launches)"


def capture_files(refs: list[str]) -> list[Path]:
    """Files as given; a folder stands for the capture traces inside it."""
    files: list[Path] = []
    for ref in refs:
        p = Path(ref)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(CAPTURE_SUFFIXES)
                           and f.name != "execution_details.json")
            if not found:
                raise AnalysisError(f"{ref}: capture folder holds no .json or .json.gz trace files")
            files.extend(found)
        elif not p.exists():
            raise AnalysisError(f"{ref}: no such capture trace")
        else:
            files.append(p)
    return files


def capture_rank(path: Path) -> int | None:
    """The rank a capture trace's file name says it was recorded on (`..._rank3.json.gz`,
    `...-TP-3.json.gz`), or None."""
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def _details(folder: Path) -> dict[str, dict]:
    """execution_details.json beside vLLM capture traces: file -> {batch_size, mode}."""
    path = folder / "execution_details.json"
    if not path.exists():
        return {}
    try:
        entries = read_json(path, CONFIG_LIMIT_BYTES, "execution details")
        return {e["file"]: e for e in (entries if isinstance(entries, list) else [entries])}
    except InputFileError as exc:
        raise AnalysisError(f"{exc.path}: unreadable execution details: {exc.problem}") from None
    except (KeyError, TypeError) as exc:
        raise AnalysisError(f"{path}: unreadable execution details: {exc!r}") from None


def load_capture(path: Path) -> Capture:
    try:
        trace = load_trace(str(path), require_kernels=False)
    except TraceLoadError as exc:
        raise AnalysisError(f"capture trace {exc}") from None
    launches = _captured_launches(trace)
    details = _details(path.parent).get(path.name, {})
    batch, mode = details.get("batch_size"), details.get("mode")
    for r in trace.cpu_annotations:
        m = _VLLM_ANNOTATION.match(r.name)
        if m and batch is None:
            batch, mode = int(m.group(1)), m.group(2)
    if batch is None and (m := _BATCH_IN_NAME.search(path.name)):
        batch = int(m.group(1))
    rank = capture_rank(path)
    namer = None
    layers = 0
    if trace.module_ranges:
        spec = standard_map()
        namer = ModuleRoleNamer(RangeForest(trace.module_ranges, trace.function_ranges, spec))
        layers = sum(1 for r in trace.module_ranges if spec.layer.search(module_class(r.name)))
    return Capture(str(path), batch, mode, rank, launches, namer, layers)


def _captured_launches(trace: RankTrace) -> list[Launch]:
    """Kernel launches inside the capture windows (all launches if the trace marks none)."""
    kernel_launches = [launch for launch in trace.launches if "Graph" not in launch.name]
    if not trace.capture_windows:
        return kernel_launches
    out = []
    for launch in kernel_launches:
        if any(w.tid == launch.tid and w.start_us <= launch.start_us <= w.end_us for w in trace.capture_windows):
            out.append(launch)
    return out


@dataclass
class CaptureMatch:
    slots: list[Slot] | None
    note: str  # how it was used, or why not
    moe_layers: int = 0


def map_capture(kernels: list[Kernel], replayed: list[int], captures: list[Capture],
                batch_size: int | None) -> CaptureMatch:
    """Slots for a step's kernels from the capture of its graph; `replayed` are the graph's kernels."""
    if not captures:
        return CaptureMatch(None, "no capture trace for this rank")
    usable = [c for c in captures if c.namer is not None and c.layer_ranges]
    if not usable:
        return CaptureMatch(None, f"{captures[0].describe()}: no decoder-layer nn.Module ranges in the capture "
                                  "(recorded without with_stack, or a torch.compile'd model): not used")
    ordered = sorted(replayed, key=lambda i: kernels[i].start_us)
    named = all(c.launches and all(launch.kernel_name for launch in c.launches) for c in usable)
    same_count = [c for c in usable if len(c.launches) == len(ordered)]
    if batch_size is not None:
        same_count.sort(key=lambda c: (c.batch_size is None or c.batch_size < batch_size, c.batch_size or 0))
    pairs: list[tuple[int, Launch]] = []
    chosen = None
    if same_count:
        chosen = same_count[0]
        pairs = list(zip(ordered, chosen.launches))
    elif named:
        best = None
        for c in usable:
            found = [(ordered[i], c.launches[j]) for i, j in matching_pairs([kernels[i].name for i in ordered],
                                                                          [launch.kernel_name for launch in c.launches])]
            if best is None or len(found) > len(best[1]):
                best = (c, found)
        chosen, pairs = best
        if len(pairs) < 0.9 * len(ordered):
            return CaptureMatch(None, f"{chosen.describe()}: only {len(pairs)} of {len(ordered)} replayed kernels "
                                      "match its launches by name: a different graph, not used")
    else:
        counts = ", ".join(f"{Path(c.path).name}: {len(c.launches)}" for c in usable)
        return CaptureMatch(None, f"the step replays {len(ordered)} kernels but no capture launched as many "
                                  f"({counts}); CUDA launches carry no kernel name to align by: not used")
    points: list[tuple[int, float] | None] = [None] * len(kernels)
    for i, launch in pairs:
        points[i] = (launch.tid, launch.start_us)
    layers, roles, rules, paths = roles_from_ranges(kernels, points, chosen.namer)
    slots, moe = slots_from_roles(kernels, layers, roles, rules, paths, source=SOURCE_CAPTURE)
    if slots is None:
        return CaptureMatch(None, f"{chosen.describe()}: no replayed kernel falls in a decoder layer of the capture: not used")
    how = "by order" if same_count else "by name"
    return CaptureMatch(slots, f"{chosen.describe()}: {len(pairs)} of {len(ordered)} replayed kernels named {how}", moe)
