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

`--steps vary`: a trace whose steps never repeat a chain, the worst case for the analysis (it makes
each distinct chain's slots anew; the layers themselves are found once per chain shape, which these
renamed GEMMs keep, analysis/attribution/structure.py): the batch size changes every step (copy i
runs batch i + 1: its step labels say so) and, as cuBLAS picks another GEMM kernel for another shape, each
step's nvjet GEMM kernels carry its batch size in their names (`..._TNN_b17`); their kernel class
and family stay those of the source's (kernel_classes.yaml, kernel_families.yaml).

Usage:
    python benchmarks/make_large_trace.py OUT_DIR [--size-mb 400] [--gzip] [--source TRACE] [--steps repeat|vary]
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
STEPS = ("repeat", "vary")  # every step the source's chain, or each step its own (batch size, GEMM names)
_GEMM_NAME = re.compile(r'("name": "nvjet_[A-Za-z0-9_]+)"')
_BATCH_LABEL = re.compile(r"bs=\d+\]")  # step[DECODE bs=16]
# execute_16_context_0(...)_generation_16(sq16sk8193sqsq16sqsk8193): requests, then per phase the query
# tokens summed (sq), their squares summed (sqsq); a decode request computes one token
_EXECUTE_LABEL = re.compile(r"execute_\d+_(context_0\([^)]*\))_generation_\d+\(sq\d+(sk\d+)sqsq\d+(sqsk\d+)\)")


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


def _varied(text: str, batch: int) -> str:
    """A copy's text as a step of `batch` requests: its labels' batch and its GEMM kernels' names."""
    text = _GEMM_NAME.sub(lambda m: f'{m.group(1)}_b{batch}"', text)
    text = _BATCH_LABEL.sub(f"bs={batch}]", text)
    return _EXECUTE_LABEL.sub(lambda m: f"execute_{batch}_{m.group(1)}_generation_{batch}(sq{batch}{m.group(2)}"
                                        f"sqsq{batch}{m.group(3)})", text)


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


def write_large_trace(source: Path, out_dir: Path, size_mb: float, write_gzip: bool, rank: int = 0,
                      steps: str = "repeat") -> list[Path]:
    """Write the synthetic trace (and optionally its gzip) into out_dir; return the paths. `rank` names
    the file TP-<rank> and shifts its clock by 7 us per rank: each rank's trace is its own (the
    analysis refuses one trace given twice). `steps`: "repeat" the source's step, or "vary" (module
    docstring)."""
    if steps not in STEPS:
        raise ValueError(f"steps must be one of {', '.join(STEPS)}, not {steps!r}")
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

    stem = f"synthetic-{copies}steps{'-varied' if steps == 'vary' else ''}-TP-{rank}-DECODE.trace"
    json_path = out_dir / f"{stem}.json"
    tmp_path = out_dir / f".{stem}.json.partial"
    with open(tmp_path, "w", encoding="utf-8", newline="") as out:
        out.write(header)
        out.write("  {\n")
        for copy in range(copies):
            text = _copy_text(template, copy, widths, period_us, 7 * rank)
            out.write(_varied(text, copy + 1) if steps == "vary" else text)
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
    parser.add_argument("--steps", choices=STEPS, default="repeat",
                        help="repeat: every step the source's; vary: the batch size and GEMM kernel names change "
                             "every step, so no two steps share a chain (default: repeat)")
    parser.add_argument("--rank", type=int, default=0, help="the rank the file is named for (its own clock)")
    args = parser.parse_args(argv)
    if not _outside_repo(args.out_dir):
        parser.error(f"{args.out_dir}: refusing to write large files inside the repository")
    if not args.source.exists():
        parser.error(f"{args.source}: source trace not found (pass --source)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for path in write_large_trace(args.source, args.out_dir, args.size_mb, args.gzip, args.rank, args.steps):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
