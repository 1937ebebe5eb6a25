"""The last namer (layers.find_period): where no rule knows a step's attention kernels, layers are read
from the period of the repeating kernel sequence.

Inputs: REAL traces with their attention cores renamed to a name no rule knows (what a stack with a
new attention library looks like to the analysis); the truth is the model each trace was recorded
from (DeepSeek-V3 cut to 4 layers, the first dense; Qwen3-8B's 36 dense layers), not any attribution.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from analysis.ingest.kernel_classes import class_of_name
from analysis.pipeline import analyze
from conftest import ROOT, real_trace

UNKNOWN_ATTENTION = "vendor_op_q9"  # classed by no rule (elementwise)
DSV3_4L = [
    "tests/data/sglang-real/flashinfer/sglang-0.5.17-dsv3-4l-fp8-h200-flashinfer-graph-TP-0-decode.trace.json.gz",
    "tests/data/sglang-real/ep/sglang-0.5.17-dsv3-4l-fp8-h100x2-ep-noa2a-graph-TP-0-EP-0-decode.trace.json.gz",
    "tests/data/accuracy/h200x2/dsv3ep-h200x2-e64k8-bs8-graph-TP-0-EP-0-DECODE.trace.json.gz",
]


def _without_known_attention(path: Path, out: Path) -> Path:
    """The trace with every attention-core kernel renamed to UNKNOWN_ATTENTION."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        doc = json.load(fh)
    renamed = 0
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel" and class_of_name(event.get("name", "")) == "attn_core":
            event["name"] = UNKNOWN_ATTENTION
            renamed += 1
    assert renamed, f"{path.name}: no attention core to rename"
    target = out / path.name.replace(".json.gz", ".json")
    target.write_text(json.dumps(doc))
    return target


@pytest.mark.parametrize("rel", DSV3_4L)
def test_a_dense_first_layer_is_counted_with_the_moe_layers(rel, tmp_path):
    """A CUDA-graph decode of DeepSeek-V3 cut to 4 layers (1 dense, 3 MoE): a kernel of the MoE layers
    only (the router's) repeats more alike than one of every layer (the rotary embedding's, whose first
    repeat spans the shorter dense layer). Ranked by how alike its repeats are, the MoE kernel won and
    the dense layer fell before the layers (3 found: seen so); ranked by the kernels its repeats span,
    every layer's kernel does, and all 4 are found."""
    trace = _without_known_attention(ROOT / rel, tmp_path)
    steps = analyze([str(trace)]).step_rows
    assert steps and all(s.note.startswith("attributed by generic") for s in steps)
    assert [s.layers_found for s in steps] == [4] * len(steps)


def test_a_dense_model_keeps_its_layer_count(tmp_path):
    """Qwen3-8B's 36 identical layers: one period whichever repeating kernel anchors it."""
    trace = _without_known_attention(Path(real_trace("amd/sglang_qwen3-8b_mi300x_decode/sglang_Qwen3-8B_decode.json.gz")),
                                     tmp_path)
    steps = analyze([str(trace)]).step_rows
    assert [(s.layers_found, s.note.startswith("attributed by generic")) for s in steps] == [(36, True)] * len(steps)
