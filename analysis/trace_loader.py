"""Load PyTorch-profiler chrome traces (.json / .json.gz) into compact per-rank tables.

Why chunked: traces reach gigabytes. The file is decompressed and decoded in slices of the
`traceEvents` array (typed msgspec decode that keeps only the fields we use), so peak memory is a
slice plus the retained kernel table, not the whole document as Python objects. A slice boundary
is found by a textual rule and then proven by the JSON decoder itself: if a slice does not decode,
an earlier boundary is tried, and in the end the remainder is decoded whole, so the rule can only
cost speed, never correctness.
"""
from __future__ import annotations

import os
import re
import zlib
from collections.abc import Callable, Iterator

import msgspec

from analysis.errors import TraceLoadError
from analysis.rank_id import rank_id_for
from analysis.trace_model import Kernel, Launch, Range, RankId, RankTrace

CHUNK_BYTES = 32 * 1024 * 1024
_READ_BYTES = 8 * 1024 * 1024

_GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
_MODULE_PREFIX = "nn.Module: "


class _Args(msgspec.Struct):
    correlation: int | None = None
    stream: int | None = None
    kernel: str | None = None


class _Event(msgspec.Struct):
    ph: str = ""
    cat: str | None = None
    name: str = ""
    ts: float | str | None = None
    dur: float | None = None
    tid: int | str | None = None
    args: _Args | None = None


class _DeviceProps(msgspec.Struct):
    name: str | None = None


class _Header(msgspec.Struct):
    deviceProperties: list[_DeviceProps] | None = None


_decode_events = msgspec.json.Decoder(list[_Event]).decode
_decode_header = msgspec.json.Decoder(_Header).decode
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"}\s*,\s*{")
_ARRAY_END = re.compile(rb"}\s*]\s*[,}]|\[\s*]\s*[,}]")


def _is_launch(name: str) -> bool:
    return "Launch" in name or name.startswith(("cudaMemcpy", "cudaMemset", "hipMemcpy", "hipMemset"))


class _Collector:
    """Keeps the events the analysis needs, interning repeated names."""

    def __init__(self) -> None:
        self.kernels: list[Kernel] = []
        self.gpu_annotations: list[Range] = []
        self.cpu_annotations: list[Range] = []
        self.module_ranges: list[Range] = []
        self.launches: list[Launch] = []
        self.cpu_ops: list[Range] = []  # kept only for CPU-only traces (no GPU activity)
        self._names: dict[str, str] = {}
        self.events_seen = 0

    def _intern(self, name: str) -> str:
        return self._names.setdefault(name, name)

    def add(self, events: list[_Event]) -> None:
        self.events_seen += len(events)
        for ev in events:
            if ev.ph != "X" or ev.cat is None or not isinstance(ev.ts, (int, float)):
                continue
            cat = ev.cat
            kind = _GPU_CATS.get(cat)
            if kind is not None:
                args = ev.args
                stream = args.stream if args is not None and args.stream is not None else ev.tid
                self.kernels.append(
                    Kernel(
                        name=self._intern(ev.name),
                        stream=stream if isinstance(stream, int) else -1,
                        start_us=float(ev.ts),
                        dur_us=float(ev.dur or 0.0),
                        correlation=args.correlation if args is not None and args.correlation is not None else -1,
                        launcher="",
                        kind=kind,
                    )
                )
            elif cat in _LAUNCH_CATS:
                if ev.args is not None and ev.args.correlation is not None and _is_launch(ev.name):
                    self.launches.append(
                        Launch(
                            name=self._intern(ev.name),
                            start_us=float(ev.ts),
                            tid=ev.tid if isinstance(ev.tid, int) else -1,
                            correlation=ev.args.correlation,
                            kernel_name=self._intern(ev.args.kernel) if ev.args.kernel else None,
                        )
                    )
            elif cat == "gpu_user_annotation":
                self.gpu_annotations.append(self._range(ev))
            elif cat == "user_annotation":
                self.cpu_annotations.append(self._range(ev))
            elif cat == "cpu_op":
                if not self.kernels:
                    self.cpu_ops.append(self._range(ev))
            elif cat == "python_function" and ev.name.startswith(_MODULE_PREFIX):
                self.module_ranges.append(self._range(ev, ev.name[len(_MODULE_PREFIX):]))

    def _range(self, ev: _Event, name: str | None = None) -> Range:
        return Range(
            name=self._intern(name if name is not None else ev.name),
            start_us=float(ev.ts),  # type: ignore[arg-type]
            dur_us=float(ev.dur or 0.0),
            tid=ev.tid if isinstance(ev.tid, int) else -1,
        )


def _read_blocks(path: str, on_bytes: Callable[[int], None] | None) -> Iterator[bytes]:
    """Yield the file's uncompressed bytes in blocks; gzip is detected by its magic bytes."""
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise TraceLoadError(path, f"cannot open: {exc.strerror or exc}") from exc
    with fh:
        magic = fh.read(2)
        fh.seek(0)
        inflater = zlib.decompressobj(wbits=47) if magic == b"\x1f\x8b" else None
        while True:
            raw = fh.read(_READ_BYTES)
            if not raw:
                break
            if on_bytes is not None:
                on_bytes(len(raw))
            if inflater is None:
                yield raw
                continue
            try:
                block = inflater.decompress(raw)
                # Concatenated gzip members: start a new inflater on the unused tail.
                while inflater.eof and inflater.unused_data:
                    rest = inflater.unused_data
                    inflater = zlib.decompressobj(wbits=47)
                    block += inflater.decompress(rest)
            except zlib.error as exc:
                raise TraceLoadError(path, f"corrupt gzip data: {exc}") from exc
            if block:
                yield block
        if inflater is not None and not inflater.eof:
            raise TraceLoadError(path, "truncated gzip file (the compressed stream ends early)")


def _decode_slice(path: str, body: bytes) -> list[_Event]:
    return _decode_events(b"[" + body + b"]")


def _split_and_decode(path: str, buf: bytearray, collector: _Collector) -> None:
    """Decode the longest prefix of `buf` that ends at an event boundary; leave the rest in buf."""
    ends = [m.start() for m in _BOUNDARY.finditer(buf, max(0, len(buf) - CHUNK_BYTES // 4))]
    for cut in reversed(ends[-8:]):
        try:
            events = _decode_slice(path, bytes(buf[: cut + 1]))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        collector.add(events)
        rest_start = buf.index(b"{", cut + 1)
        del buf[:rest_start]
        return
    # No proven boundary: keep accumulating; the end of the file decodes the remainder whole.


def _finish(path: str, buf: bytearray, collector: _Collector) -> bytes:
    """Decode the last slice of events; return the document's tail after the events array."""
    ends = [m for m in _ARRAY_END.finditer(buf)]
    for match in reversed(ends):
        bracket = buf.index(b"]", match.start())
        body = bytes(buf[: match.start() + 1]) if buf[match.start() : match.start() + 1] == b"}" else b""
        tail = bytes(buf[bracket + 1 :])
        try:
            msgspec.json.decode(b'{"traceEvents":[]' + tail)
            events = _decode_slice(path, body) if body.strip() else []
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        collector.add(events)
        return tail
    raise TraceLoadError(path, "not valid trace JSON: the traceEvents array is malformed or truncated")


def load_trace(
    path: str,
    rank: RankId | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> RankTrace:
    """Read one rank's trace file. Raises TraceLoadError naming the file and the problem."""
    path = str(path)
    if not os.path.exists(path):
        raise TraceLoadError(path, "no such file")
    collector = _Collector()
    head = bytearray()
    buf = bytearray()
    in_events = False
    total = 0
    header_bytes = b""
    for block in _read_blocks(path, on_bytes):
        total += len(block)
        if not in_events:
            head += block
            match = _EVENTS_KEY.search(head)
            if match is None:
                if len(head) > 64 * 1024 * 1024:
                    raise TraceLoadError(path, "no traceEvents array in the first 64 MB: not a chrome trace")
                continue
            in_events = True
            header_bytes = bytes(head[: match.start()])
            buf += head[match.end() :]
            head = bytearray()
        else:
            buf += block
        if len(buf) >= CHUNK_BYTES:
            _split_and_decode(path, buf, collector)
    if not in_events:
        if total == 0:
            raise TraceLoadError(path, "empty file")
        stripped = bytes(head).lstrip()
        if stripped[:1] not in (b"{", b"["):
            raise TraceLoadError(path, "not JSON (does not start with '{' or '[')")
        raise TraceLoadError(path, "not a chrome trace: no 'traceEvents' array")
    tail = _finish(path, buf, collector)
    device_name = _device_name(header_bytes, tail)
    if not collector.kernels:
        collector.kernels = _leaf_cpu_ops(collector.cpu_ops)
    if not collector.kernels:
        raise TraceLoadError(
            path,
            f"no kernel events among {collector.events_seen} events "
            "(neither GPU kernels nor CPU operators: was the profiler recording activities?)",
        )
    launch_names = {launch.correlation: launch.name for launch in collector.launches}
    kernels = collector.kernels
    for kernel in kernels:
        if kernel.kind != "cpu_op":  # CPU operators keep launcher "cpu": they ran on the thread itself
            kernel.launcher = launch_names.get(kernel.correlation, "unknown")
    kernels.sort(key=lambda k: (k.start_us, k.stream))
    for ranges in (collector.gpu_annotations, collector.cpu_annotations, collector.module_ranges):
        ranges.sort(key=lambda r: (r.start_us, -r.dur_us))
    collector.launches.sort(key=lambda launch: launch.start_us)
    return RankTrace(
        path=path,
        rank=rank or rank_id_for(path),
        device_name=device_name,
        kernels=kernels,
        gpu_annotations=collector.gpu_annotations,
        cpu_annotations=collector.cpu_annotations,
        module_ranges=collector.module_ranges,
        launches=collector.launches,
        json_bytes=total,
    )


def _leaf_cpu_ops(cpu_ops: list[Range]) -> list[Kernel]:
    """For CPU-only traces: the innermost CPU operators stand in for kernels, one stream per thread.

    An operator that encloses another on the same thread is a wrapper (aten::linear around
    aten::addmm); only the leaves do the work, so only they are kept and no time is counted twice.
    """
    by_thread: dict[int, list[Range]] = {}
    for op in cpu_ops:
        by_thread.setdefault(op.tid, []).append(op)
    leaves: list[Kernel] = []
    for tid, ops in by_thread.items():
        ops.sort(key=lambda r: (r.start_us, -r.dur_us))
        for i, op in enumerate(ops):
            nxt = ops[i + 1] if i + 1 < len(ops) else None
            if nxt is not None and nxt.start_us < op.end_us:
                continue  # encloses the next operator: a wrapper
            leaves.append(Kernel(op.name, tid, op.start_us, op.dur_us, -1, "cpu", "cpu_op"))
    return leaves


def _device_name(header: bytes, tail: bytes) -> str | None:
    """deviceProperties[0].name from the part of the document outside traceEvents."""
    for doc in (header.rstrip().rstrip(b",") + b"}", b"{" + tail.lstrip().lstrip(b",")):
        try:
            parsed = _decode_header(doc)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if parsed.deviceProperties:
            return parsed.deviceProperties[0].name
    return None


__all__ = ["load_trace", "CHUNK_BYTES"]
