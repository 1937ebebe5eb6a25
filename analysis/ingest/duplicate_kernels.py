"""One kernel launch given twice in a trace, found by what it is, whatever its name's whitespace or stream.

Why: every kernel event repeated with a trailing space in its name, or copied onto another stream,
doubled every D4 row with every self-check passing. A profiler writes a kernel's name without
whitespace around it and one space inside, so names are kept in that form (an edited copy's
"fused_moe_kernel " is the kernel "fused_moe_kernel"); a device runs one launch once, so two events
of one name at the same start and for the same duration on two streams are one launch given twice,
and so is the same kernel over itself on one stream. Such a trace is refused (TraceLoadError),
never summed; no real trace bundled here has either (tests/test_reference_outputs.py analyses each).
"""
from __future__ import annotations

from collections.abc import Iterable

from analysis.errors import TraceLoadError
from analysis.ingest.trace_model import Kernel, Launch, are_cpu_operators

# Two kernels on one stream may overlap: a programmatic dependent launch starts the next kernel while
# the previous one drains (up to 69% of the shorter one on the real B300 traces), and a dependent kernel
# may even start and wait wholly inside the one it depends on (seen on two H100s: a quantisation kernel
# inside flashinfer's fused all-reduce, 1156 us inside 1562 us). What never happens is the same kernel
# twice over itself: one kernel name inside, or over more than this share of, its own earlier launch on
# the stream is one event given twice.
MOST_STREAM_OVERLAP = 0.9


def normal_name(name: str) -> str:
    """A kernel name as the profiler writes it: no whitespace around it, one space for each run inside."""
    return " ".join(name.split())


def normalise_names(kernels: list[Kernel], launches: list[Launch], names: Iterable[str]) -> None:
    """Every kernel's name (a CPU operator's root, a launch's kernel name) in normal_name's form, in place.
    `names`: every distinct name the trace holds (the loader interns them), so a trace whose names are
    all normal (every profiler's) costs one look at each distinct name, none at each kernel."""
    changed = {name: normal for name in names if (normal := normal_name(name)) != name}
    if not changed:
        return
    for kernel in kernels:
        kernel.name = changed.get(kernel.name, kernel.name)
        if kernel.root:
            kernel.root = changed.get(kernel.root, kernel.root)
    for launch in launches:
        if launch.kernel_name:
            launch.kernel_name = changed.get(launch.kernel_name, launch.kernel_name)


def check_no_duplicate_kernels(path: str, kernels: list[Kernel]) -> None:
    """A TraceLoadError naming one launch given twice and how many events repeat another, if any: the
    same name at the same start for the same duration on another stream (a copy), or a stream's
    kernel wholly inside its previous launch of the same name, or over more than MOST_STREAM_OVERLAP
    of the shorter (docs/analysis.md, durations). One pass; kernels come by (start, stream). CPU
    operators are not a device's launches: not checked."""
    if not kernels or are_cpu_operators(kernels):
        return
    last_end: dict[int, float] = {}  # per stream: the latest end so far, and the kernel that ends there
    last: dict[int, Kernel] = {}
    get = last_end.get
    group_start = None  # the start shared by the kernels in `group` (None: only `previous` has it)
    group: list[Kernel] | None = None
    previous = kernels[0]
    for kernel in kernels:
        stream, start, dur = kernel.stream, kernel.start_us, kernel.dur_us
        if start == group_start:  # rare: kernels starting at the same instant (by stream)
            if group is None:
                group = [previous]
            for other in group:
                if other.dur_us == dur and other.stream != stream and other.name == kernel.name:
                    _copied(path, kernels, other, kernel)
            group.append(kernel)
        else:
            group_start, group = start, None
        previous = kernel
        end = start + dur
        before = get(stream)
        if before is None:
            last_end[stream], last[stream] = end, kernel
        elif end > before:  # the common case: it ends after every earlier kernel of its stream
            if start < before:
                prev = last[stream]
                if prev.name == kernel.name and \
                        before - start > MOST_STREAM_OVERLAP * (prev.dur_us if prev.dur_us < dur else dur):
                    _two_kernels_at_once(path, kernels, prev, kernel, before - start)
            last_end[stream], last[stream] = end, kernel
        elif start < end and last[stream].name == kernel.name:  # inside its own earlier launch
            _two_kernels_at_once(path, kernels, last[stream], kernel, dur)


def _repeats(kernels: list[Kernel]) -> int:
    """How many kernel events repeat an earlier one's name, start and duration (only when refusing)."""
    seen: set[tuple[str, float, float]] = set()
    for kernel in kernels:
        seen.add((kernel.name, kernel.start_us, kernel.dur_us))
    return len(kernels) - len(seen)


def _copied(path: str, kernels: list[Kernel], first: Kernel, copy: Kernel) -> None:
    raise TraceLoadError(path, f"kernel {first.name[:60]!r} (start {first.start_us!r} us, dur {first.dur_us!r}) "
                               f"runs on stream {first.stream} and on stream {copy.stream} at once: a device runs a "
                               f"launch once, so this is one event copied onto another stream ({_repeats(kernels)} "
                               "kernel events repeat another's name, start and duration) (docs/analysis.md, durations)")


def _two_kernels_at_once(path: str, kernels: list[Kernel], prev: Kernel, kernel: Kernel, overlap: float) -> None:
    raise TraceLoadError(path, f"kernels {prev.name[:60]!r} (start {prev.start_us!r} us, dur {prev.dur_us!r}) and "
                               f"{kernel.name[:60]!r} (start {kernel.start_us!r} us, dur {kernel.dur_us!r}) overlap by "
                               f"{overlap:.3f} us on stream {kernel.stream}: a stream runs its kernels in turn, so this "
                               f"is one event given twice ({_repeats(kernels)} kernel events repeat another's name, "
                               "start and duration) (docs/analysis.md, durations)")
