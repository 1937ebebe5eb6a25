"""SYNTHETIC DeepSeek-V3 serving traces, generated from a signature with known durations.

No public NVIDIA trace of DeepSeek-V3 serving on the SGLang stacks exists, so these fixtures are
written from a signature's `example` kernel names: 61 layers (first 3 dense), a main and a side
stream (shared experts under the DeepEP combine), MTP on or off, two-batch overlap, several ranks
with one straggler. Every duration is known, so the expected D4 values are computed here from the
same definitions the analysis documents, independently of the analysis code.

They test ARITHMETIC ONLY (sums per row, mean / max over ranks, exposed time under overlap, MTP per
token, two-batch overlap): a trace written from a signature's own names is named right by that
signature whatever the names are, so these fixtures cannot tell whether a signature matches a real
stack. The signatures they use have no real trace (`evidence: unverified: no real trace`).
"""
from __future__ import annotations

import gzip
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from analysis.attribution.signature import Entry, Signature

MAIN_STREAM = 7
SIDE_STREAM = 23
GAP_US = 1.0


def entry_dur_us(index: int, side: bool = False) -> float:
    """A distinct, exactly representable duration per template slot."""
    return float(3 + (index * 7) % 23) + (0.5 if side else 0.0)


@dataclass
class Expected:
    """Known answers for one rank: per-layer busy/exposed per D4 key, per step kind."""

    per_layer_us: dict[tuple[str, str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    exposed_us: dict[tuple[str, str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    step_us: list[float] = field(default_factory=list)
    layers_us: list[float] = field(default_factory=list)  # first layer kernel's start to the last one's end
    draft_step_us: list[float] = field(default_factory=list)
    draft_extend_us: list[float] = field(default_factory=list)
    tree_us: list[float] = field(default_factory=list)


class _Writer:
    def __init__(self, clock_us: float = 0.0) -> None:
        self.events: list[dict] = []
        self.t = 1000.0 + clock_us
        self.corr = 1

    def kernel(self, name: str, dur: float, stream: int, start: float | None = None) -> tuple[float, float]:
        ts = self.t if start is None else start
        self.events.append({
            "ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"stream": stream, "correlation": self.corr, "device": 0},
        })
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                            "ts": ts - 0.5, "dur": 0.2, "args": {"correlation": self.corr}})
        self.corr += 1
        if start is None:
            self.t = ts + dur + GAP_US
        return ts, ts + dur

    def annotation(self, name: str, start: float, end: float) -> None:
        self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": 0, "tid": MAIN_STREAM,
                            "ts": start, "dur": end - start, "args": {}})


def _layer_entries(sig: Signature, kind: str) -> list[tuple[int, Entry]]:
    return [(i, e) for i, e in enumerate(sig.layer) if e.in_layers in ("all", kind)]


def _emit_layer(w: _Writer, sig: Signature, kind: str, scale: float, sums: dict, exposed: dict) -> None:
    """One layer unit (one micro-batch) on the main stream, shared experts under the combine."""
    for index, entry in _layer_entries(sig, kind):
        key = (entry.group, entry.module, entry.kernel)
        dur = entry_dur_us(index) * scale
        is_combine = kind == "moe" and entry.module == "combine" and sig.side
        if not is_combine:
            w.kernel(entry.example, dur, MAIN_STREAM)
            sums[key] += dur
            exposed[key] += dur
            continue
        side = [(j, e) for j, e in enumerate(sig.side) if e.in_layers in ("all", kind)]
        side_durs = [entry_dur_us(j, side=True) * scale for j, _ in side]
        combine_dur = sum(side_durs) + GAP_US * (len(side) + 1) + dur
        start, _ = w.kernel(entry.example, combine_dur, MAIN_STREAM)
        t = start + GAP_US
        for (j, side_entry), side_dur in zip(side, side_durs):
            w.kernel(side_entry.example, side_dur, SIDE_STREAM, start=t)
            side_key = (side_entry.group, side_entry.module, side_entry.kernel)
            sums[side_key] += side_dur
            t += side_dur + GAP_US
        sums[key] += combine_dur
        exposed[key] += combine_dur - sum(side_durs)


def _emit_step(w: _Writer, sig: Signature, label: str, kinds: list[str], units: int, scale: float,
               tree: bool, exp_layers: Expected | None) -> tuple[float, float]:
    start = w.t
    w.kernel("void at::native::embedding_kernel<float>(float*)", 4.0 * scale, MAIN_STREAM)
    sums: dict = defaultdict(float)
    exposed: dict = defaultdict(float)
    layers_start = w.t
    for kind in kinds:
        for _ in range(units):
            _emit_layer(w, sig, kind, scale, sums, exposed)
    layers_end = w.t - GAP_US
    # Each layer counts once per key, whatever the number of micro-batches or repeats in it.
    counts: dict = defaultdict(int)
    for kind in kinds:
        keys = {(e.group, e.module, e.kernel) for _, e in _layer_entries(sig, kind)}
        if kind == "moe":
            keys |= {(e.group, e.module, e.kernel) for e in sig.side}
        for key in keys:
            counts[key] += 1
    tree_us = 0.0
    if tree:
        w.kernel("void VerifyTreeGreedy<int, long>(int*, long const*)", 6.0 * scale, MAIN_STREAM)
        tree_us = 6.0 * scale
    w.kernel("nvjet_tst_lm_head_256x128_64x5_2x1_v_bz_TNT", 20.0 * scale, MAIN_STREAM)
    end = w.t - GAP_US
    w.annotation(label, start - 0.5, end + 0.5)
    if exp_layers is not None:
        for key, total in sums.items():
            exp_layers.per_layer_us[key].append(total / counts[key])
            exp_layers.exposed_us[key].append(exposed.get(key, total) / counts[key] if key in exposed else 0.0)
        exp_layers.step_us.append(end - start)
        exp_layers.layers_us.append(layers_end - layers_start)
        if tree:
            exp_layers.tree_us.append(tree_us)
    w.t += 50.0  # idle time between steps
    return start, end


# SGLang's step labels (`step[LABEL bs=N]`) by release: 0.5.17 writes draft steps as DECODE (the
# NextN model's single layer tells them apart), 0.5.23 labels every draft-model step DRAFT.
STEP_LABELS = {
    "0.5.17": {"decode": "DECODE", "verify": "TARGET_VERIFY", "draft": "DECODE", "draft_extend": "DRAFT_EXTEND"},
    "0.5.23": {"decode": "DECODE", "verify": "VERIFY", "draft": "DRAFT", "draft_extend": "DRAFT"},
}


def write_rank_trace(path: Path, sig: Signature, *, num_layers: int = 61, dense_layers: int = 3,
                     steps: int = 2, tbo: bool = False, mtp_draft_steps: int = 0, scale: float = 1.0,
                     labels: str | dict[str, str] = "0.5.17", clock_us: float = 0.0) -> Expected:
    """Write one rank's SYNTHETIC trace (gzip'd chrome JSON) and return its known answers.

    labels: a release in STEP_LABELS, or the label per step kind (decode, verify, draft, draft_extend).
    clock_us: where this rank's clock starts (ranks of one run are never one trace)."""
    names = STEP_LABELS[labels] if isinstance(labels, str) else labels
    w = _Writer(clock_us)
    expected = Expected()
    units = 2 if tbo else 1
    kinds = ["dense"] * dense_layers + ["moe"] * (num_layers - dense_layers)
    for step in range(steps):
        step_scale = scale * (1.0 + 0.25 * step)
        if mtp_draft_steps:
            for _ in range(mtp_draft_steps):
                s, e = _emit_step(w, sig, f"step[{names['draft']} bs=16]", ["moe"], 1, step_scale, False, None)
                expected.draft_step_us.append(e - s)
            _emit_step(w, sig, f"step[{names['verify']} bs=16]", kinds, units, step_scale, True, expected)
            s, e = _emit_step(w, sig, f"step[{names['draft_extend']} bs=16]", ["moe"], 1, step_scale, False, None)
            expected.draft_extend_us.append(e - s)
        else:
            _emit_step(w, sig, f"step[{names['decode']} bs=16]", kinds, units, step_scale, False, expected)
    write_trace_file(path, w.events)
    return expected


def write_trace_file(path: Path, events: list[dict], device_id: int = 0) -> Path:
    """One rank's SYNTHETIC events as a gzip'd chrome trace on a named SYNTHETIC device."""
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": device_id, "name": "SYNTHETIC H200"}], "traceEvents": events}
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    return path
