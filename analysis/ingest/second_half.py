"""The second half of a large trace file, read by a forked child while this process reads the first.

Why: one rank's load is the longest phase of `analyze` (about half of the command on a 400 MB trace)
and ran on one core while the second sat idle. The file is cut near its middle where the loader's
textual rule finds an event boundary; a child forked before anything is read (so it copies nothing)
reads from the next event to the end into a collector of its own, and sends back what it kept as
columns with each distinct name once (msgpack: 3.1 MB for the 203 MB second half of the generated
406 MB trace). A .json.gz cannot be entered in the middle: its child inflates from the start, lets
go of what comes before the cut's place (placed by the size in the gzip trailer) and decodes the
rest; the parent finds the cut by the same rule as it passes that place.

Only a proven cut is used: the parent reads up to it and decodes the events before it as a whole
array that ends there. Its parser started in step with the document, so it is still in step at the
cut, which then lies between two events of the array, and the child started at the next one. A cut
that is not proven (inside a string, in the header or after the events), or a child that failed,
died or sent anything else, costs the child's time only: the parent reads on past the cut itself,
as if there were no child, so every error and message is the one-process loader's own
(trace_loader.py).
"""
from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat

import msgspec

from analysis.forked_call import ForkedCall, fork_allowed
from analysis.ingest.trace_model import Kernel, Launch, Range

# Below this a file loads in about a tenth of a second: a child would save less than it costs.
SPLIT_MIN_BYTES = 32 * 1024 * 1024
# The same for a .json.gz, by its compressed size (trace JSON inflates about 6-10x).
SPLIT_MIN_GZIP_BYTES = 4 * 1024 * 1024
# The child's share of the file (the parent also reads the header and makes objects of the child's
# columns, the child encodes them): half was as fast as 0.45 and faster than 0.55 (docs/performance.md).
CHILD_SHARE = 0.5
# The child's share of a .json.gz's inflated bytes: it also inflates (without decoding) everything
# before its part, so it takes less (docs/performance.md).
GZIP_CHILD_SHARE = 0.4
WINDOW_BYTES = 256 * 1024  # the cut: the first event boundary wholly within this many bytes from its place
KINDS = ("kernel", "memcpy", "memset")  # a GPU activity's kind, sent as its index here
_KIND_INDEX = {kind: i for i, kind in enumerate(KINDS)}
# The collector's range lists that cross, in this order.
RANGE_LISTS = ("function_ranges", "capture_calls", "syncs", "gpu_annotations", "cpu_annotations", "module_ranges")


class _RangeColumns(msgspec.Struct, array_like=True):
    name: list[int]
    start_us: list[float]
    dur_us: list[float]
    tid: list[int]


class Longest(msgspec.Struct, array_like=True):
    """The longest kernel (or CPU operator) of the child's events: the first of them, where among
    its events it is, and what names it in an error."""

    dur_us: float = -1.0  # -1.0: none
    index: int = 0
    cat: str | None = None
    name: str = ""


class BadOperator(msgspec.Struct, array_like=True):
    """The child's first CPU operator whose duration cannot be one (kept as the loader keeps it)."""

    index: int
    cat: str | None
    name: str
    dur: float | None


class HalfRead(msgspec.Struct, array_like=True):
    """What the child kept of its half, as columns; a name is an index into `names`."""

    names: list[str]
    kernel_name: list[int]
    kernel_stream: list[int]
    kernel_start_us: list[float]
    kernel_dur_us: list[float]
    kernel_correlation: list[int]
    kernel_kind: list[int]
    launch_name: list[int]
    launch_start_us: list[float]
    launch_tid: list[int]
    launch_correlation: list[int]
    launch_kernel_name: list[int]  # -1: none
    ranges: list[_RangeColumns]  # RANGE_LISTS' order
    # CPU operators before the child's first kernel: the trace's where the parent's half had no kernel
    cpu_ops: _RangeColumns
    events_seen: int
    longest_kernel: Longest
    longest_cpu_op: Longest
    bad_cpu_op: BadOperator | None
    tail: bytes  # the document after the events array
    start: int  # where the child's first event starts in the (inflated) document
    json_bytes: int  # the (inflated) bytes from there to the end
    source_bytes: int  # the bytes of the file it read: to its end


_decode_half = msgspec.msgpack.Decoder(HalfRead).decode
_encode = msgspec.msgpack.encode


@dataclass
class SecondHalf:
    """A running child reading a plain file from `start`; the parent reads up to `start` and proves `cut`."""

    cut: int  # file offset of the "}" that ends the parent's last event
    start: int  # file offset of the "{" that starts the child's first event
    size: int  # the file's size when the child was forked: the child reads all of it from start
    helper: ForkedCall

    def result(self) -> HalfRead | None:
        """The child's part, or None where it could not deliver one (the parent then reads on)."""
        half = _part(self.helper)
        if half is None or half.start != self.start or half.json_bytes != self.size - self.start \
                or half.source_bytes != self.size:
            return None
        return half

    def close(self) -> None:
        self.helper.close()


@dataclass
class GzipSecondHalf:
    """A running child inflating a .json.gz and decoding it from the first event boundary within
    WINDOW_BYTES of `at` (an inflated offset); the parent looks for it by the same rule in what it
    holds as it passes `at` (`start`), proves the cut before it, and takes the child's part only where
    the child started at the same event and read the whole file."""

    at: int
    compressed_size: int
    helper: ForkedCall
    start: int | None = None  # set by the parent once it found the boundary

    def result(self) -> HalfRead | None:
        half = _part(self.helper)
        if half is None or half.start != self.start or half.source_bytes != self.compressed_size:
            return None
        return half

    def close(self) -> None:
        self.helper.close()


def _part(helper: ForkedCall) -> HalfRead | None:
    data = helper.result(here=False)
    if data is None:
        return None
    try:
        half = _decode_half(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return half if _whole(half) else None


def _within(indices: list[int], size: int, lowest: int = 0) -> bool:
    return not indices or (min(indices) >= lowest and max(indices) < size)


def _columns_even(cols: _RangeColumns) -> bool:
    return len({len(cols.name), len(cols.start_us), len(cols.dur_us), len(cols.tid)}) == 1


def _whole(half: HalfRead) -> bool:
    """Every column of a list as long as the others (objects are made by zipping them: a short one
    would drop items unseen) and every index within its table."""
    kernels = {len(c) for c in (half.kernel_name, half.kernel_stream, half.kernel_start_us, half.kernel_dur_us,
                                half.kernel_correlation, half.kernel_kind)}
    launches = {len(c) for c in (half.launch_name, half.launch_start_us, half.launch_tid, half.launch_correlation,
                                 half.launch_kernel_name)}
    names = len(half.names)
    return (len(kernels) == 1 and len(launches) == 1 and len(half.ranges) == len(RANGE_LISTS)
            and all(_columns_even(r) and _within(r.name, names) for r in half.ranges)
            and _within(half.kernel_name, names) and _within(half.kernel_kind, len(KINDS))
            and _within(half.launch_name, names) and _within(half.launch_kernel_name, names, -1)
            and _columns_even(half.cpu_ops) and _within(half.cpu_ops.name, names)
            and all(longest.dur_us < 0 or 0 <= longest.index < half.events_seen
                    for longest in (half.longest_kernel, half.longest_cpu_op))
            and (half.bad_cpu_op is None or 0 <= half.bad_cpu_op.index < half.events_seen))


def _size_to_split(fd: int, least_bytes: int) -> int | None:
    """The file's size where a child may read part of it: a regular file (a pipe cannot be read twice)
    of least_bytes or more, and a fork allowed (analysis/forked_call.py); else None."""
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size < least_bytes or not fork_allowed():
        return None
    return info.st_size


def start_second_half(fd: int, boundary: re.Pattern[bytes], read_half: Callable[[int, int], bytes | None]
                      ) -> SecondHalf | None:
    """Fork a child running read_half(fd, start) where the file allows it: a regular file of
    SPLIT_MIN_BYTES or more with an event boundary (by the textual rule) just after CHILD_SHARE from
    its end, and a fork allowed (analysis/forked_call.py). None otherwise: the parent reads it all.
    The file is read with pread here and in the child, so the parent's own position never moves."""
    size = _size_to_split(fd, SPLIT_MIN_BYTES)
    if size is None:
        return None
    place = size - int(size * CHILD_SHARE)
    try:
        window = os.pread(fd, WINDOW_BYTES, place)
    except OSError:
        return None
    match = boundary.search(window)
    if match is None:
        return None
    helper = ForkedCall(read_half, (fd, place + match.end() - 1), lambda value: isinstance(value, bytes), size)
    return SecondHalf(place + match.start(), place + match.end() - 1, size, helper)


def start_gzip_second_half(fd: int, read_half: Callable[[int, int], bytes | None]) -> GzipSecondHalf | None:
    """Fork a child running read_half(fd, at) for a .json.gz of SPLIT_MIN_GZIP_BYTES or more, `at` placed
    by the size the gzip trailer gives (ISIZE: the inflated size modulo 4 GiB of the last member, a
    hint only: a wrong one moves the cut or leaves none, never the result); None where there is no
    child."""
    size = _size_to_split(fd, SPLIT_MIN_GZIP_BYTES)
    if size is None:
        return None
    try:
        inflated = int.from_bytes(os.pread(fd, 4, size - 4), "little")
    except OSError:
        return None
    at = inflated - int(inflated * GZIP_CHILD_SHARE)
    if at < 1:
        return None
    # its answer is a small fraction of the inflated JSON: more than 16 times the compressed size is refused
    helper = ForkedCall(read_half, (fd, at), lambda value: isinstance(value, bytes), 16 * size)
    return GzipSecondHalf(at, size, helper)


def _indices(values: list[str | None], index: dict[str, int], names: list[str]) -> list[int]:
    """Each value's index in names (added where new); None as -1."""
    out = []
    for value in values:
        if value is None:
            out.append(-1)
            continue
        i = index.get(value)
        if i is None:
            i = index[value] = len(names)
            names.append(value)
        out.append(i)
    return out


def encode_half(kernels: list[Kernel], launches: list[Launch], ranges: list[list[Range]], cpu_ops: list[Range],
                events_seen: int, longest_kernel: Longest, longest_cpu_op: Longest, bad_cpu_op: BadOperator | None,
                tail: bytes, start: int, json_bytes: int, source_bytes: int) -> bytes:
    """The child's part as HalfRead's msgpack bytes."""
    names: list[str] = []
    index: dict[str, int] = {}

    def columns(items: list[Range]) -> _RangeColumns:
        return _RangeColumns(_indices([r.name for r in items], index, names), [r.start_us for r in items],
                             [r.dur_us for r in items], [r.tid for r in items])

    return _encode(HalfRead(
        names=names,
        kernel_name=_indices([k.name for k in kernels], index, names),
        kernel_stream=[k.stream for k in kernels],
        kernel_start_us=[k.start_us for k in kernels],
        kernel_dur_us=[k.dur_us for k in kernels],
        kernel_correlation=[k.correlation for k in kernels],
        kernel_kind=[_KIND_INDEX[k.kind] for k in kernels],
        launch_name=_indices([la.name for la in launches], index, names),
        launch_start_us=[la.start_us for la in launches],
        launch_tid=[la.tid for la in launches],
        launch_correlation=[la.correlation for la in launches],
        launch_kernel_name=_indices([la.kernel_name for la in launches], index, names),
        ranges=[columns(items) for items in ranges],
        cpu_ops=columns(cpu_ops),
        events_seen=events_seen,
        longest_kernel=longest_kernel,
        longest_cpu_op=longest_cpu_op,
        bad_cpu_op=bad_cpu_op,
        tail=tail,
        start=start,
        json_bytes=json_bytes,
        source_bytes=source_bytes,
    ))


def half_kernels(half: HalfRead, names: list[str]) -> list[Kernel]:
    """The child's kernels as the loader makes them (launcher set later), names from `names`
    (the parent's own string for each of half.names)."""
    kinds = [KINDS[i] for i in half.kernel_kind]
    return list(map(Kernel, [names[i] for i in half.kernel_name], half.kernel_stream, half.kernel_start_us,
                    half.kernel_dur_us, half.kernel_correlation, repeat(""), kinds))


def half_launches(half: HalfRead, names: list[str]) -> list[Launch]:
    kernel_names = [None if i < 0 else names[i] for i in half.launch_kernel_name]
    return list(map(Launch, [names[i] for i in half.launch_name], half.launch_start_us, half.launch_tid,
                    half.launch_correlation, kernel_names))


def _ranges(cols: _RangeColumns, names: list[str]) -> list[Range]:
    return list(map(Range, [names[i] for i in cols.name], cols.start_us, cols.dur_us, cols.tid))


def half_ranges(half: HalfRead, names: list[str]) -> list[list[Range]]:
    """RANGE_LISTS' lists of the child."""
    return [_ranges(cols, names) for cols in half.ranges]


def half_cpu_ops(half: HalfRead, names: list[str]) -> list[Range]:
    return _ranges(half.cpu_ops, names)
