"""Rewrite a PyTorch-profiler chrome trace keeping only what the analysis reads, so it fits as a fixture.

Why: a raw eager trace with stacks is mostly Python frames, operator arguments and flow arrows the
analysis never looks at; dropping them makes a trace 5-20x smaller without changing what the loader
sees (same kernels, launches, annotations and nn.Module ranges).

Kept: the header keys (deviceProperties, distributedInfo, ...); metadata events (ph "M"); GPU
activity (kernel, gpu_memcpy, gpu_memset) with its args; cuda_runtime / cuda_driver calls with only
correlation, stream and kernel in args; gpu_user_annotation and user_annotation ranges;
python_function ranges that are nn.Module ranges or name a function the analysis may anchor on
(attention, rotary, KV-cache update, routing, grouped GEMM, dispatch / combine, SGLang's two-batch-overlap
operations and their stage executor ...) with no args; and,
in CPU-only traces (no GPU activity), the cpu_op events that stand in for kernels, with no args.

    python benchmarks/accuracy/slim_trace.py RAW.trace.json.gz SLIM.trace.json.gz
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
from typing import Any

GPU_ACTIVITY_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}
ANNOTATION_CATS = {"gpu_user_annotation", "user_annotation"}
LAUNCH_ARG_KEYS = ("correlation", "stream", "kernel")
RANGE_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur")
MODULE_PREFIX = "nn.Module: "
# Functions worth keeping as ranges (matched against the function part of "file.py(line): function",
# or against the file's stem, e.g. cache_utils.py, integrations/moe.py).
KEPT_FUNCTIONS = re.compile(
    r"apply_rotary|rotary|rope|attention_forward|sdpa|flash_attention|eager_attention|cache_utils|update|"
    r"expand_kv|repeat_kv|grouped_mm|experts_forward|_apply_gate|moe|route|topk|all_to_all|dispatch|combine"
)
# SGLang's two-batch-overlap operations (sglang/srt/batch_overlap/: each layer's op_* functions, run by a
# stage executor per micro-batch): under TBO they stand where the decoder layer's module ranges are missing.
KEPT_OPERATION_FUNCTION = re.compile(r"op_\w+")
KEPT_FILE_STEMS = {"operations", "two_batch_overlap", "operations_strategy"}
_FRAME = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\): (?P<function>.*)$")
_BUILTIN = re.compile(r"^<built-in (?:method|function) (?P<function>[\w.]+)(?: of (?P<owner>.*))?>$")
_PLAIN_CONTAINERS = ("dict object", "list object", "set object", "str object", "tuple object")


def keep_python_function(name: str) -> bool:
    """True for nn.Module ranges and for frames whose function (or file stem) the analysis may anchor on."""
    if name.startswith(MODULE_PREFIX):
        return True
    frame = _FRAME.match(name)
    if frame:
        stem = os.path.splitext(os.path.basename(frame.group("file")))[0]
        function = frame.group("function")
        return bool(KEPT_FUNCTIONS.search(function) or KEPT_FUNCTIONS.fullmatch(stem)
                    or KEPT_OPERATION_FUNCTION.fullmatch(function) or stem in KEPT_FILE_STEMS)
    builtin = _BUILTIN.match(name)
    if builtin:
        owner = builtin.group("owner") or ""
        if owner.startswith(_PLAIN_CONTAINERS):  # dict.update and the like: Python bookkeeping
            return False
        return bool(KEPT_FUNCTIONS.search(builtin.group("function")))
    return False


def _subset(event: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: event[k] for k in keys if k in event}


def slim_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The kept events, in their original order, each reduced to the fields the analysis reads."""
    has_gpu_activity = any(e.get("cat") in GPU_ACTIVITY_CATS for e in events)
    kept: list[dict[str, Any]] = []
    for event in events:
        cat = event.get("cat")
        ph = event.get("ph")
        if ph == "M":
            kept.append(event)
        elif cat in GPU_ACTIVITY_CATS:
            kept.append(event)
        elif cat in LAUNCH_CATS:
            slim = _subset(event, RANGE_KEYS)
            args = {k: v for k, v in (event.get("args") or {}).items() if k in LAUNCH_ARG_KEYS}
            if args:
                slim["args"] = args
            kept.append(slim)
        elif cat in ANNOTATION_CATS:
            kept.append(_subset(event, RANGE_KEYS))
        elif cat == "python_function":
            if ph == "X" and keep_python_function(str(event.get("name", ""))):
                kept.append(_subset(event, RANGE_KEYS))
        elif cat == "cpu_op" and not has_gpu_activity:
            kept.append(_subset(event, RANGE_KEYS))
    return kept


def slim_trace_document(doc: dict[str, Any]) -> dict[str, Any]:
    """A new document: every header key as it was, traceEvents slimmed."""
    out = {k: v for k, v in doc.items() if k != "traceEvents"}
    out["traceEvents"] = slim_events(doc.get("traceEvents", []))
    return out


def read_trace(path: str) -> dict[str, Any]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def slim_trace_file(src: str, dst: str) -> dict[str, int]:
    """Slim src into dst (gzip level 9); returns event counts and the output size in bytes."""
    doc = read_trace(src)
    slim = slim_trace_document(doc)
    data = json.dumps(slim, separators=(",", ":")).encode("utf-8")
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    with open(dst, "wb") as fh:  # mtime 0: the same trace slims to the same bytes
        with gzip.GzipFile(filename="", mode="wb", fileobj=fh, compresslevel=9, mtime=0) as gz:
            gz.write(data)
    return {
        "events_in": len(doc.get("traceEvents", [])),
        "events_out": len(slim["traceEvents"]),
        "bytes_out": os.path.getsize(dst),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("src", help="raw chrome trace (.json or .json.gz)")
    parser.add_argument("dst", help="slimmed trace to write (.json.gz)")
    args = parser.parse_args(argv)
    stats = slim_trace_file(args.src, args.dst)
    print(f"{args.dst}: {stats['events_in']} -> {stats['events_out']} events, {stats['bytes_out']} bytes")


if __name__ == "__main__":
    main()
