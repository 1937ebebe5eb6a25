"""Write a large synthetic SGLang-like decode trace for the ingest benchmark.

Why synthetic: public SGLang traces are single decode steps of ~1 MB, while real profiling runs
write hundreds of MB per rank. This tool repeats the events of one real decode step many times,
as if the profiler had recorded many consecutive steps: every copy is shifted in time by one step
period, and its correlation ids, flow ids, External ids and Python ids are moved to a fresh range,
so the event mix (python_function, cpu_op, cuda_runtime, kernel, ac2g flows, annotations) and the
profiler's pretty-printed layout stay exactly those of the real file. Metadata events (ph "M"),
the profiler span and instant events are written once, at the end, as the profiler does.

The work is textual (templates with numeric slots), so the output is byte-for-byte the layout of
the source; the source is only parsed to check that the result is valid JSON in tests.

Usage:
    python benchmarks/make_large_trace.py OUT_DIR [--size-mb 400] [--gzip] [--source TRACE]
Prints the paths written. OUT_DIR must be outside the repository (outputs are large).
"""
from __future__ import annotations

import argparse
import gzip
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.real_traces import QWEN3_DECODE, REPO_ROOT, real_traces_dir  # noqa: E402

_REAL = real_traces_dir()
DEFAULT_SOURCE = _REAL / QWEN3_DECODE if _REAL is not None else Path(QWEN3_DECODE)
_GZIP_LEVEL = 6
_WRITE_BLOCK_BYTES = 16 * 1024 * 1024

# Numeric fields that identify an event and must not repeat across copies, plus the timestamp.
_SLOT = re.compile(r'"(ts|id|correlation|External id|Python id|Python parent id|Ev Idx)": (-?\d+(?:\.\d+)?)')
_EVENTS_OPEN = re.compile(r'"traceEvents": \[\n')
_EVENTS_CLOSE = "\n  ]"
_BLOCK_SEP = "\n  },\n  {\n"


@dataclass
class _Slot:
    key: str
    value: int  # the number scaled to an integer (ts: in units of 10**-decimals us)
    decimals: int


@dataclass
class _Template:
    literals: list[str]  # len(slots) + 1 pieces of text around the numeric slots
    slots: list[_Slot]


def _split_source(text: str) -> tuple[str, list[str], str]:
    """Return (text up to and including '[\\n', event blocks without outer braces, closing text)."""
    opened = _EVENTS_OPEN.search(text)
    if opened is None:
        raise SystemExit("source trace has no traceEvents array in the profiler's layout")
    close_at = text.rindex(_EVENTS_CLOSE)
    body = text[opened.end() : close_at]
    if not (body.startswith("  {\n") and body.endswith("\n  }")):
        raise SystemExit("source trace is not in the PyTorch profiler's pretty-printed layout")
    blocks = body[len("  {\n") : -len("\n  }")].split(_BLOCK_SEP)
    return text[: opened.end()], blocks, text[close_at:]


def _is_once_only(block: str) -> bool:
    """Metadata, instant events and the profiler's own span appear once per file."""
    return '"ph": "M"' in block or '"ph": "i"' in block or '"cat": "Trace"' in block


def _template(blocks: list[str]) -> _Template:
    text = _BLOCK_SEP.join(blocks)
    literals: list[str] = []
    slots: list[_Slot] = []
    pos = 0
    for match in _SLOT.finditer(text):
        literals.append(text[pos : match.start(2)])
        number = match.group(2)
        decimals = len(number.split(".")[1]) if "." in number else 0
        slots.append(_Slot(match.group(1), int(number.replace(".", "")), decimals))
        pos = match.end(2)
    literals.append(text[pos:])
    return _Template(literals, slots)


def _format(value: int, decimals: int) -> str:
    if decimals == 0:
        return str(value)
    scale = 10**decimals
    sign = "-" if value < 0 else ""
    whole, frac = divmod(abs(value), scale)
    return f"{sign}{whole}.{frac:0{decimals}d}"


def _shifts(template: _Template, blocks: list[str]) -> tuple[dict[str, int], float]:
    """Per-copy offsets: the step period for ts, the id range width for every id key."""
    starts = [float(m) for b in blocks for m in re.findall(r'"ts": (-?\d+(?:\.\d+)?)', b)]
    ends = [
        float(ts) + float(dur)
        for b in blocks
        for ts, dur in re.findall(r'"ts": (-?\d+(?:\.\d+)?), "dur": (-?\d+(?:\.\d+)?)', b)
    ]
    period_us = math.ceil(max(ends + starts) - min(starts)) + 100  # 100 us between steps
    widths: dict[str, int] = {}
    for key in {s.key for s in template.slots if s.key != "ts"}:
        values = [s.value for s in template.slots if s.key == key]
        widths[key] = max(values) - min(values) + 1
    return widths, period_us


def _copy_text(template: _Template, copy: int, widths: dict[str, int], period_us: int, clock_us: int = 0) -> str:
    parts = [template.literals[0]]
    for slot, literal in zip(template.slots, template.literals[1:]):
        if slot.key == "ts":
            value = slot.value + (copy * period_us + clock_us) * 10**slot.decimals
        else:
            value = slot.value + copy * widths[slot.key]
        parts.append(_format(value, slot.decimals))
        parts.append(literal)
    return "".join(parts)


def _fix_once_blocks(blocks: list[str], total_span_us: int) -> list[str]:
    """Stretch the profiler span and the record-window end over all copies."""
    fixed = []
    for block in blocks:
        if '"cat": "Trace"' in block:
            block = re.sub(
                r'"dur": (\d+(?:\.\d+)?)', lambda m: f'"dur": {float(m.group(1)) + total_span_us:.3f}', block, count=1
            )
        elif '"name": "Record Window End"' in block:
            block = re.sub(
                r'"ts": (\d+(?:\.\d+)?)', lambda m: f'"ts": {float(m.group(1)) + total_span_us:.3f}', block, count=1
            )
        fixed.append(block)
    return fixed


def write_large_trace(source: Path, out_dir: Path, size_mb: float, write_gzip: bool, rank: int = 0) -> list[Path]:
    """Write the synthetic trace (and optionally its gzip) into out_dir; return the paths. `rank` names
    the file TP-<rank> and shifts its clock by 7 us per rank: each rank's trace is its own (the
    analysis refuses one trace given twice)."""
    with gzip.open(source, "rt", encoding="utf-8") if source.suffix == ".gz" else open(source, encoding="utf-8") as fh:
        text = fh.read()
    header, blocks, closing = _split_source(text)
    step_blocks = [b for b in blocks if not _is_once_only(b)]
    once_blocks = [b for b in blocks if _is_once_only(b)]
    template = _template(step_blocks)
    widths, period_us = _shifts(template, step_blocks)
    copy_bytes = len(_copy_text(template, 0, widths, period_us).encode()) + len(_BLOCK_SEP)
    copies = max(1, math.ceil(size_mb * 1e6 / copy_bytes))
    once_text = _BLOCK_SEP.join(_fix_once_blocks(once_blocks, (copies - 1) * period_us))

    stem = f"synthetic-{copies}steps-TP-{rank}-DECODE.trace"
    json_path = out_dir / f"{stem}.json"
    tmp_path = out_dir / f".{stem}.json.partial"
    with open(tmp_path, "w", encoding="utf-8", newline="") as out:
        out.write(header)
        out.write("  {\n")
        for copy in range(copies):
            out.write(_copy_text(template, copy, widths, period_us, 7 * rank))
            out.write(_BLOCK_SEP)
        out.write(once_text)
        out.write("\n  }")
        out.write(closing)
    os.replace(tmp_path, json_path)
    written = [json_path]
    if write_gzip:
        gz_path = out_dir / f"{stem}.json.gz"
        gz_tmp = out_dir / f".{stem}.json.gz.partial"
        with open(json_path, "rb") as src, gzip.open(gz_tmp, "wb", compresslevel=_GZIP_LEVEL) as dst:
            while block := src.read(_WRITE_BLOCK_BYTES):
                dst.write(block)
        os.replace(gz_tmp, gz_path)
        written.append(gz_path)
    return written


def _outside_repo(path: Path) -> bool:
    resolved = path.resolve()
    return resolved != REPO_ROOT and REPO_ROOT not in resolved.parents


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="directory for the outputs (outside the repository)")
    parser.add_argument("--size-mb", type=float, default=400.0, help="target uncompressed size in MB (1e6 bytes)")
    parser.add_argument("--gzip", action="store_true", help="also write a .json.gz of the same trace")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real decode trace to replicate")
    args = parser.parse_args(argv)
    if not _outside_repo(args.out_dir):
        parser.error(f"{args.out_dir}: refusing to write large files inside the repository")
    if not args.source.exists():
        parser.error(f"{args.source}: source trace not found (pass --source)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for path in write_large_trace(args.source, args.out_dir, args.size_mb, args.gzip):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
