"""Load PyTorch-profiler chrome traces (.json / .json.gz) into compact per-rank tables.

Why chunked: traces reach gigabytes. The file is decompressed and decoded in slices of the
`traceEvents` array (typed msgspec decode that keeps only the fields we use), so peak memory is a
slice plus the retained kernel table, not the whole document as Python objects. A slice boundary
is found by a textual rule and then proven by the JSON decoder itself: if a slice does not decode,
an earlier boundary is tried, and in the end the remainder is decoded whole, so the rule can only
cost speed, never correctness.

Why it is fast: slices are decoded in place from one reusable buffer that always starts with the
array's "[" (the byte after a slice's last event is briefly overwritten with "]"), so no slice is
copied; the decoded event structs are not tracked by the garbage collector, and the collector
is paused during the load; gzip is inflated in small blocks that are decoded while still in the
CPU cache (measured faster on 2 cores than inflating in a second thread).
"""
from __future__ import annotations

import hashlib
import operator
import re
import zlib
from collections.abc import Callable

try:  # ISA-L inflates gzip about 2.4x faster than zlib (optional extra "fast-gzip")
    from isal import isal_zlib as _inflate_lib

    _INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, _inflate_lib.error)
except ImportError:  # pragma: no cover - depends on the installation
    _inflate_lib = zlib  # type: ignore[assignment]
    _INFLATE_ERRORS = (zlib.error,)
INFLATER = _inflate_lib.__name__  # which library inflates .json.gz (reported by the benchmark)

import msgspec

from analysis.errors import TraceLoadError
from analysis.io.input_files import InputFileError, open_input
from analysis.gc_paused import gc_paused
from analysis.ingest.range_tree import start_longest_first
from analysis.ingest.kept_functions import function_pattern, host_sync_calls
from analysis.ingest.rank_id import rank_id_for
from analysis.ingest.trace_model import Kernel, Launch, Range, RankId, RankTrace
from analysis.ingest.duplicate_kernels import check_no_duplicate_kernels, normalise_names

CHUNK_BYTES = 4 * 1024 * 1024  # uncompressed bytes decoded per slice
_READ_BYTES = 4 * 1024 * 1024  # plain-file read size
_GZIP_READ_BYTES = 64 * 1024  # compressed bytes inflated per step
_HEADER_LIMIT_BYTES = 64 * 1024 * 1024
# held while no event boundary is found (one event, or the space between two, cannot be larger)
EVENT_SEARCH_LIMIT_BYTES = 64 * 1024 * 1024
_BOUNDARY_WINDOW_BYTES = 256 * 1024  # where to look for the last event boundary of a slice
_NEAR_WINDOW_BYTES = 16 * 1024  # searched first: it holds the last few boundaries of a slice of small events
_BOUNDARY_TRIES = 8

_GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
_MODULE_PREFIX = "nn.Module: "
_CAPTURE_CALLS = frozenset({"cudaStreamBeginCapture", "cudaStreamEndCapture", "hipStreamBeginCapture", "hipStreamEndCapture"})


# Fields in the order the PyTorch profiler writes them (msgspec checks the next field first).
class _Args(msgspec.Struct, gc=False):
    stream: int | None = None
    correlation: int | None = None
    kernel: str | None = None


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    tid: int | str | None = None
    ts: float | str | None = None
    dur: float | None = None
    args: _Args | None = None


class _DeviceProps(msgspec.Struct):
    name: str | None = None


class _Header(msgspec.Struct):
    deviceProperties: list[_DeviceProps] | None = None


_decode_events = msgspec.json.Decoder(list[_Event]).decode
_decode_header = msgspec.json.Decoder(_Header).decode
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_GZIP_MAGIC = b"\x1f\x8b"  # a .json.gz's first two bytes
_BOUNDARY = re.compile(rb"}\s*,\s*{")
_ARRAY_END = re.compile(rb"}\s*]\s*[,}]|\[\s*]\s*[,}]")
# msgspec: invalid UTF-8, and JSON nested deeper than its stack (RecursionError)
_BAD_SLICE = (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError)


_INF = float("inf")


class _BadDuration(Exception):
    """A kernel event whose `dur` cannot be a duration (missing, negative or not finite), or whose
    `ts` is not a number."""

    def __init__(self, index: int, event: _Event, field: str = "dur"):
        self.index, self.event = index, event
        raw = getattr(event, field)
        value = "missing" if raw is None else repr(raw)
        super().__init__(f"event {index} ({event.cat} {event.name[:80]!r}): {field} {value}")


def _index_in(events: list[_Event], event: _Event) -> int:
    return next(i for i, ev in enumerate(events) if ev is event)


def _is_launch(name: str) -> bool:
    return "Launch" in name or name.startswith(("cudaMemcpy", "cudaMemset", "hipMemcpy", "hipMemset"))


class _Collector:
    """Keeps the events the analysis needs, interning repeated names."""

    def __init__(self) -> None:
        self.kernels: list[Kernel] = []
        self.function_ranges: list[Range] = []
        self.capture_calls: list[Range] = []  # cudaStreamBegin/EndCapture calls
        self.syncs: list[Range] = []  # runtime calls that may block the host (host_syncs.yaml)
        self._sync_names = host_sync_calls()
        self._python_hits: dict[str, str | bool] = {}  # python_function name -> module class name, or kept
        self._function_pattern = function_pattern()
        self.gpu_annotations: list[Range] = []
        self.cpu_annotations: list[Range] = []
        self.module_ranges: list[Range] = []
        self.launches: list[Launch] = []
        self.cpu_ops: list[Range] = []  # kept only for CPU-only traces (no GPU activity)
        self._names: dict[str, str] = {}
        self.events_seen = 0
        self.longest_kernel: tuple[float, int, _Event | None, list[_Event] | None] = (-1.0, 0, None, None)
        self.longest_cpu_op: tuple[float, int, _Event | None, list[_Event] | None] = (-1.0, 0, None, None)
        self.bad_cpu_op: _BadDuration | None = None

    def add(self, events: list[_Event]) -> None:
        """One pass over a slice; the common categories are tested first (this loop is hot).

        A kernel's (or, in a CPU-only trace, an operator's) `dur` must be present, finite and not
        negative (else _BadDuration); the longest is kept to be checked against the trace's span."""
        base = self.events_seen
        self.events_seen += len(events)
        longest = self.longest_kernel[0]
        intern = self._names.setdefault
        kernels = self.kernels
        module_ranges = self.module_ranges
        python_hits = self._python_hits
        prefix = _MODULE_PREFIX
        prefix_len = len(prefix)
        for ev in events:
            cat = ev.cat
            if cat == "python_function":
                name = ev.name
                # per distinct name, once: a module call (its class name), a function worth keeping, or neither
                hit = python_hits.get(name)
                if hit is False:  # most: tested first
                    continue
                if hit is None:
                    if name.startswith(prefix):
                        short = name[prefix_len:]
                        hit = intern(short, short)
                    else:
                        hit = self._function_pattern.search(name) is not None
                    python_hits[name] = hit
                    if hit is False:
                        continue
                if ev.ph != "X" or ev.ts.__class__ is not float:
                    continue
                if hit is True:
                    self.function_ranges.append(self._range(ev))
                else:
                    tid = ev.tid
                    module_ranges.append(Range(hit, ev.ts, float(ev.dur or 0.0), tid if tid.__class__ is int else -1))
                continue
            if ev.ph != "X" or cat is None:
                continue
            kind = _GPU_CATS.get(cat)
            if ev.ts.__class__ is not float:
                if kind is not None:  # a kernel without a usable start would silently leave the sums
                    raise _BadDuration(base + _index_in(events, ev), ev, "ts")
                continue
            if kind is not None:
                dur = ev.dur
                if dur is None or not 0.0 <= dur < _INF:
                    raise _BadDuration(base + _index_in(events, ev), ev)
                if dur > longest:
                    longest = dur
                    self.longest_kernel = (dur, base, ev, events)
                args = ev.args
                if args is None:
                    stream, correlation = ev.tid, -1
                else:
                    stream = args.stream if args.stream is not None else ev.tid
                    correlation = args.correlation if args.correlation is not None else -1
                name = ev.name
                kernels.append(
                    Kernel(
                        intern(name, name),
                        stream if stream.__class__ is int else -1,
                        ev.ts,
                        dur,
                        correlation,
                        "",
                        kind,
                    )
                )
            elif cat in _LAUNCH_CATS:
                args = ev.args
                if ev.name in self._sync_names:
                    self.syncs.append(self._range(ev))
                if ev.name in _CAPTURE_CALLS:
                    self.capture_calls.append(Range(ev.name, ev.ts, float(ev.dur or 0.0), ev.tid if ev.tid.__class__ is int else -1))
                elif args is not None and args.correlation is not None and _is_launch(ev.name):
                    name = ev.name
                    kernel_name = args.kernel
                    self.launches.append(
                        Launch(
                            intern(name, name),
                            ev.ts,
                            ev.tid if ev.tid.__class__ is int else -1,
                            args.correlation,
                            intern(kernel_name, kernel_name) if kernel_name else None,
                        )
                    )
            elif cat == "gpu_user_annotation":
                self.gpu_annotations.append(self._range(ev))
            elif cat == "user_annotation":
                self.cpu_annotations.append(self._range(ev))
            elif cat == "cpu_op":
                if not kernels:  # checked only if the trace turns out CPU-only (load_trace)
                    dur = ev.dur
                    if dur is None or not 0.0 <= dur < _INF:
                        if self.bad_cpu_op is None:
                            self.bad_cpu_op = _BadDuration(base + _index_in(events, ev), ev)
                    elif dur > self.longest_cpu_op[0]:
                        self.longest_cpu_op = (dur, base, ev, events)
                    self.cpu_ops.append(self._range(ev))

    def _range(self, ev: _Event) -> Range:
        name = ev.name
        return Range(
            self._names.setdefault(name, name),
            float(ev.ts),  # type: ignore[arg-type]
            float(ev.dur or 0.0),
            ev.tid if ev.tid.__class__ is int else -1,
        )


class _PlainSource:
    """Reads an uncompressed file straight into the caller's buffer."""

    def __init__(self, fh, on_bytes: Callable[[int], None] | None, first: bytes = b"") -> None:
        self._fh = fh
        self._on_bytes = on_bytes
        self._first = first  # bytes already read to tell gzip from plain JSON

    def fill(self, buffer: "_Buffer", want: int) -> bool:
        """Append up to `want` bytes to buffer; False at end of file."""
        if self._first:
            buffer.append(self._first)
            if self._on_bytes is not None:
                self._on_bytes(len(self._first))
            self._first = b""
            return True
        buffer.reserve(want)
        with memoryview(buffer.data) as view:
            got = self._fh.readinto(view[buffer.end : buffer.end + want])
        if not got:
            return False
        buffer.end += got
        if self._on_bytes is not None:
            self._on_bytes(got)
        return True

    def close(self) -> None:
        pass


class _GzipSource:
    """Inflates small compressed blocks on demand, so each inflated block is decoded while it is
    still in the CPU cache (measured faster here than inflating in a second thread)."""

    def __init__(self, path: str, fh, on_bytes: Callable[[int], None] | None, first: bytes = b"") -> None:
        self._path = path
        self._fh = fh
        self._on_bytes = on_bytes
        self._first = first  # the gzip magic, already read
        self._inflater = _inflate_lib.decompressobj(wbits=47)

    def fill(self, buffer: "_Buffer", want: int) -> bool:
        """Append about `want` inflated bytes (at least one block); False at the end."""
        added = 0
        while added < want:
            raw = self._first + (self._fh.read(_GZIP_READ_BYTES) or b"")
            self._first = b""
            if not raw:
                if not self._inflater.eof:
                    raise TraceLoadError(self._path, "truncated gzip file (the compressed stream ends early)")
                break
            if self._on_bytes is not None:
                self._on_bytes(len(raw))
            try:
                block = self._inflater.decompress(raw)
                # Concatenated gzip members: start a new inflater on the unused tail.
                while self._inflater.eof and self._inflater.unused_data:
                    rest = self._inflater.unused_data
                    self._inflater = _inflate_lib.decompressobj(wbits=47)
                    block += self._inflater.decompress(rest)
            except _INFLATE_ERRORS as exc:
                raise TraceLoadError(self._path, f"corrupt gzip data: {exc}") from exc
            buffer.append(block)
            added += len(block)
        return added > 0

    def close(self) -> None:
        pass


class _Buffer:
    """A growable byte buffer with a valid length, so reads and cuts never reallocate."""

    def __init__(self, size: int) -> None:
        self.data = bytearray(size)
        self.end = 0

    def reserve(self, extra: int) -> None:
        need = self.end + extra
        if need > len(self.data):
            self.data.extend(bytes(max(need, 2 * len(self.data)) - len(self.data)))

    def append(self, block: bytes) -> None:
        self.reserve(len(block))
        self.data[self.end : self.end + len(block)] = block
        self.end += len(block)

    def keep_from(self, start: int, at: int) -> None:
        """Move data[start:end] to position `at` (dropping what lies between)."""
        size = self.end - start
        self.data[at : at + size] = self.data[start : self.end]
        self.end = at + size


def _decode_cut(buffer: _Buffer, cut: int) -> list[_Event]:
    """Decode data[0:cut+1] (which starts with "[") as an event array, in place."""
    data = buffer.data
    saved = data[cut + 1]
    data[cut + 1] = 0x5D  # "]"
    try:
        with memoryview(data) as view:
            return _decode_events(view[: cut + 2])
    finally:
        data[cut + 1] = saved


def _decode_prefix(buffer: _Buffer, collector: _Collector) -> bool:
    """Decode the longest proven prefix of whole events; keep "[" plus the rest. False if none."""
    data = buffer.data
    for cut in reversed(_last_boundaries(data, buffer.end)):
        try:
            events = _decode_cut(buffer, cut)
        except _BAD_SLICE:
            continue
        collector.add(events)
        buffer.keep_from(data.index(b"{", cut + 1), 1)
        return True
    return False


def _last_boundaries(data: bytearray, end: int) -> list[int]:
    """The last _BOUNDARY_TRIES event boundaries before `end`: in the last 256 KB, else anywhere.

    The last 16 KB are searched first; where they hold enough boundaries those are the same ones
    (a match starts at a "}" and holds no other, so where a search begins changes no match after it)."""
    near = [m.start() for m in _BOUNDARY.finditer(data, max(1, end - _NEAR_WINDOW_BYTES), end)]
    if len(near) >= _BOUNDARY_TRIES:
        return near[-_BOUNDARY_TRIES:]
    ends = [m.start() for m in _BOUNDARY.finditer(data, max(1, end - _BOUNDARY_WINDOW_BYTES), end)]
    if not ends:
        ends = [m.start() for m in _BOUNDARY.finditer(data, 1, end)]
    return ends[-_BOUNDARY_TRIES:]


def _finish(path: str, buffer: _Buffer, collector: _Collector) -> bytes:
    """Decode the last slice of events; return the document's tail after the events array.

    When no ending decodes, the error is the decoder's own, from the last candidate ending (the
    document's real one when the file is whole), with its location in the whole events array."""
    data = buffer.data
    ends = list(_ARRAY_END.finditer(data, 0, buffer.end))
    first_error: Exception | None = None
    for match in reversed(ends):
        bracket = data.index(b"]", match.start())
        tail = bytes(data[bracket + 1 : buffer.end])
        try:
            with memoryview(data) as view:
                events = _decode_events(view[: bracket + 1])
            msgspec.json.decode(b'{"traceEvents":[]' + tail)
        except _BAD_SLICE as exc:
            first_error = first_error or exc
            continue
        collector.add(events)
        return tail
    if first_error is None:  # no ending at all: the decoder says where the events stop making sense
        try:
            with memoryview(data) as view:
                _decode_events(view[: buffer.end])
        except _BAD_SLICE as exc:
            first_error = exc
    raise TraceLoadError(path, f"not valid trace JSON: {_decoder_message(first_error, collector.events_seen)}")


_SLICE_AT = re.compile(r"`\$\[(\d+)\]")
_BYTE_AT = re.compile(r" \(byte \d+\)")


def _decoder_message(exc: Exception | None, first_event: int) -> str:
    """msgspec's message with its location in the file's traceEvents (a slice starts at first_event)."""
    if exc is None:
        return "the traceEvents array is malformed or truncated"
    if isinstance(exc, RecursionError):
        return f"an event nested too deeply to read (in the events after event {first_event})"
    text = _SLICE_AT.sub(lambda m: f"`$.traceEvents[{first_event + int(m.group(1))}]", str(exc))
    if isinstance(exc, msgspec.ValidationError):
        return text
    return f"{_BYTE_AT.sub('', text)} (in the events after event {first_event})"


def _open_source(path: str, on_bytes: Callable[[int], None] | None):
    """The file (a pipe is streamed: its first bytes are read once and handed to the source)."""
    try:
        fh = open_input(path, None, "the trace")
    except InputFileError as exc:
        raise TraceLoadError(path, exc.problem) from None
    magic = b""
    while len(magic) < 2:
        got = fh.read(2 - len(magic))
        if not got:
            break
        magic += got
    if magic == _GZIP_MAGIC:
        return fh, _GzipSource(path, fh, on_bytes, magic)
    return fh, _PlainSource(fh, on_bytes, magic)


def _read_events(path: str, on_bytes: Callable[[int], None] | None, collector: _Collector) -> tuple[bytes, bytes, int]:
    """Stream the file through the collector; return (header bytes, tail bytes, uncompressed size)."""
    chunk = max(1024, CHUNK_BYTES)
    fh, source = _open_source(path, on_bytes)
    buffer = _Buffer(chunk + max(_READ_BYTES, chunk // 4))
    try:
        # Header: everything before the traceEvents array (small; searched as it grows).
        total = 0
        while True:
            before = buffer.end
            more = source.fill(buffer, min(_READ_BYTES, chunk))
            total += buffer.end - before
            match = _EVENTS_KEY.search(buffer.data, 0, buffer.end)
            if match is not None:
                break
            if not more:
                _raise_not_a_trace(path, buffer)
            if buffer.end > _HEADER_LIMIT_BYTES:
                raise TraceLoadError(path, "no traceEvents array in the first 64 MB: not a chrome trace")
        header = bytes(buffer.data[: match.start()])
        buffer.keep_from(match.end() - 1, 0)  # data[0] is now the array's "["
        tail, total = _read_array(path, source, buffer, collector, total)
        return header, tail, total
    finally:
        source.close()
        fh.close()


def _read_array(path: str, source, buffer: _Buffer, collector: _Collector, total: int) -> tuple[bytes, int]:
    """Decode the events array from the buffer (which starts with its "[") and the source on; return
    (the document's tail after it, the bytes read in all)."""
    chunk = max(1024, CHUNK_BYTES)
    more = True
    target = chunk
    while more:
        while more and buffer.end < target:
            before = buffer.end
            more = source.fill(buffer, min(_READ_BYTES, target - buffer.end))
            total += buffer.end - before
        if not more:
            break
        # No proven boundary: keep accumulating (bounded); the end of the file decodes the remainder whole.
        if _decode_prefix(buffer, collector):
            target = chunk
        elif buffer.end > EVENT_SEARCH_LIMIT_BYTES:
            raise TraceLoadError(path, f"event {collector.events_seen} (or the space after it) does not end "
                                       f"within {EVENT_SEARCH_LIMIT_BYTES // (1024 * 1024)} MB, the most the loader "
                                       "holds while looking for it (docs/analysis.md, bounds)")
        else:
            target = buffer.end + chunk
    return _finish(path, buffer, collector), total


def _raise_not_a_trace(path: str, buffer: _Buffer) -> None:
    if buffer.end == 0:
        raise TraceLoadError(path, "empty file")  # also a FIFO that no program writes to
    if bytes(buffer.data[: min(buffer.end, 4096)]).lstrip()[:1] not in (b"{", b"["):
        raise TraceLoadError(path, "not JSON (does not start with '{' or '[')")
    raise TraceLoadError(path, "not a chrome trace: no 'traceEvents' array")


_BY_STREAM = operator.attrgetter("stream")
_BY_START = operator.attrgetter("start_us")


def load_trace(
    path: str,
    rank: RankId | None = None,
    on_bytes: Callable[[int], None] | None = None,
    require_kernels: bool = True,
) -> RankTrace:
    """Read one rank's trace file. Raises TraceLoadError naming the file and the problem.

    `require_kernels` False accepts a trace without GPU activity (a graph-capture trace: kernels
    are launched into the graph, not run)."""
    path = str(path)
    collector = _Collector()
    try:
        with gc_paused():  # the decoder allocates millions of short-lived objects; none form cycles
            header_bytes, tail, total = _read_events(path, on_bytes, collector)
    except _BadDuration as exc:
        raise TraceLoadError(path, f"{exc}: a kernel's ts must be a number, its dur present, finite and not "
                                   "negative (docs/analysis.md, durations)") from None
    device_name = _device_name(header_bytes, tail)
    launcher_of = {launch.correlation: launch.name for launch in collector.launches}.get
    for kernel in collector.kernels:
        kernel.launcher = launcher_of(kernel.correlation, "unknown")
    if not collector.kernels and require_kernels:  # CPU-only trace: operators' self time, launcher "cpu"
        if collector.bad_cpu_op is not None:
            raise TraceLoadError(path, f"{collector.bad_cpu_op}: an operator's dur must be present, finite and not "
                                       "negative (docs/analysis.md, durations)")
        collector.longest_kernel = collector.longest_cpu_op
        collector.kernels = _leaf_cpu_ops(collector.cpu_ops)
    if not collector.kernels and require_kernels:
        raise TraceLoadError(
            path,
            f"no kernel events among {collector.events_seen} events "
            "(neither GPU kernels nor CPU operators: was the profiler recording activities?)",
        )
    kernels = collector.kernels
    normalise_names(kernels, collector.launches, collector._names)  # "name " is the kernel "name"
    # by (start, stream): two stable sorts on one key each, three times faster than on tuples
    kernels.sort(key=_BY_STREAM)
    kernels.sort(key=_BY_START)
    for ranges in (collector.gpu_annotations, collector.cpu_annotations, collector.module_ranges,
                   collector.function_ranges):
        ranges.sort(key=start_longest_first)
    collector.launches.sort(key=_BY_START)
    collector.syncs.sort(key=_BY_START)
    _check_longest_kernel(path, collector)
    if require_kernels:  # a capture trace's kernels were launched into a graph, not run on their streams
        check_no_duplicate_kernels(path, kernels)  # on its stream or copied onto another
    return RankTrace(
        content_key=_content_key(kernels),
        path=path,
        rank=rank or rank_id_for(path),
        device_name=device_name,
        kernels=kernels,
        gpu_annotations=collector.gpu_annotations,
        cpu_annotations=collector.cpu_annotations,
        module_ranges=collector.module_ranges,
        launches=collector.launches,
        json_bytes=total,
        function_ranges=collector.function_ranges,
        capture_windows=_capture_windows(collector.capture_calls),
        syncs=collector.syncs,
    )


def _check_longest_kernel(path: str, collector: _Collector) -> None:
    """No kernel may last longer than the trace's span: from its earliest event start to the latest
    start or end of a range (annotations, module and function ranges) or start of a kernel or launch.
    A longer one is corrupt and would swamp every sum it enters (docs/analysis.md, durations)."""
    dur, base, event, events = collector.longest_kernel
    if event is None:
        return
    ranges = (collector.gpu_annotations, collector.cpu_annotations, collector.module_ranges,
              collector.function_ranges)
    firsts = [items[0].start_us for items in (collector.kernels, collector.launches, *ranges) if items]
    lasts = [items[-1].start_us for items in (collector.kernels, collector.launches) if items]
    lasts += [max(r.end_us for r in items) for items in ranges if items]
    if not firsts or not lasts:
        return
    span_us = max(lasts) - min(firsts)
    if dur > span_us:
        index = base + _index_in(events, event)
        raise TraceLoadError(path, f"event {index} ({event.cat} {event.name[:80]!r}): dur {dur!r} us is longer than "
                                   f"the whole trace ({span_us:.1f} us from its first event to its last): a kernel's "
                                   "dur must fit in the trace (docs/analysis.md, durations)")


_KEY_KERNELS = 64  # kernels at each end of a trace that its content key covers


def _content_key(kernels: list[Kernel]) -> str:
    """What tells one trace from another: the kernel count and the first and last kernels' names,
    streams, starts and durations. Two ranks never start their kernels at the same microseconds, so
    equal keys are one trace given twice (byte for byte, or re-encoded), whatever the files' names."""
    sample = kernels if len(kernels) <= 2 * _KEY_KERNELS else kernels[:_KEY_KERNELS] + kernels[-_KEY_KERNELS:]
    text = repr((len(kernels), [(k.name, k.stream, k.start_us, k.dur_us) for k in sample]))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _capture_windows(calls: list[Range]) -> list[Range]:
    """Begin/end-capture call pairs on each thread as windows (a graph-capture trace has one per graph)."""
    windows: list[Range] = []
    open_at: dict[int, float] = {}
    for call in sorted(calls, key=lambda c: c.start_us):
        if "Begin" in call.name:
            open_at[call.tid] = call.start_us
        elif call.tid in open_at:
            start = open_at.pop(call.tid)
            windows.append(Range("capture", start, call.end_us - start, call.tid))
    return windows


def _leaf_cpu_ops(cpu_ops: list[Range]) -> list[Kernel]:
    """For CPU-only traces: CPU operators stand in for kernels, each with its self time.

    Operators nest (aten::linear > aten::mm > aten::resolve_conj); counting whole durations would
    count time twice, and keeping only the innermost would lose the matmul's own work to its tiny
    children. So each operator keeps its self time (its duration less its direct children's),
    placed at its start, one stream per thread. Each also records its outermost operator (`root`)
    and that operator's index as its correlation id, so the operators of one top-level call can
    be told apart and classified together (aten::mm inside aten::linear is a linear layer).
    """
    by_thread: dict[int, list[Range]] = {}
    for op in cpu_ops:
        by_thread.setdefault(op.tid, []).append(op)
    result: list[Kernel] = []
    for tid, ops in by_thread.items():
        ops.sort(key=start_longest_first)
        self_us = [op.dur_us for op in ops]
        roots = list(range(len(ops)))
        stack: list[int] = []
        for i, op in enumerate(ops):
            while stack and ops[stack[-1]].end_us <= op.start_us:
                stack.pop()
            if stack:
                self_us[stack[-1]] -= op.dur_us
                roots[i] = roots[stack[0]]
            stack.append(i)
        base = len(result)
        for i, (op, own) in enumerate(zip(ops, self_us)):
            if own > 0:
                root = ops[roots[i]]
                result.append(Kernel(op.name, tid, op.start_us, own, base + roots[i], "cpu", "cpu_op", root.name))
    return result


def _device_name(header: bytes, tail: bytes) -> str | None:
    """deviceProperties[0].name from the part of the document outside traceEvents."""
    for doc in (header.rstrip().rstrip(b",") + b"}", b"{" + tail.lstrip().lstrip(b",")):
        try:
            parsed = _decode_header(doc)
        except _BAD_SLICE:
            continue
        if parsed.deviceProperties:
            return parsed.deviceProperties[0].name
    return None


__all__ = ["load_trace", "CHUNK_BYTES"]
