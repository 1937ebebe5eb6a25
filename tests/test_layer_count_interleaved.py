"""A layer whose attention core lands beside the next layer's is still a layer.

The real MI300X Llama-3.1-8B-shaped decode (tests/real_traces.yaml) once analysed to 31 of 32
layers with no flag: in its kernel order one layer's attention core follows the next layer's QKV
projection, so the two cores sat side by side and counted as one layer. The SYNTHETIC variants
(tests/synthetic_llama.py) break the order the same way at the first, a middle, the second-to-last
and at two layers, and run cascade attention (two core kernels in every layer), where two cores
side by side are one layer.
"""
from __future__ import annotations

import pytest

from analysis.pipeline import AnalysisOptions, analyze
from analysis.ingest.kernel_classes import class_of_name
from conftest import real_trace
from synthetic_llama import write_trace

MI300_LLAMA = "amd/sglang_ds-r1-distill-llama-8b_mi300x/1782841132.2905657-TP-0-DECODE.trace.json.gz"
B300_LLAMA = "nvidia/sglang_ds-r1-distill-llama-8b_b300/1782843274.7730265-TP-0-DECODE.trace.json.gz"


def _adjacent_cores(names: list[str]) -> int:
    """How many times two attention-core kernels follow each other (what the old rule merged)."""
    classes = [class_of_name(n) for n in names]
    return sum(a == b == "attn_core" for a, b in zip(classes, classes[1:]))


@pytest.mark.parametrize("interleaved,cascade", [
    ((), False), ((0,), False), ((15,), False), ((30,), False), ((4, 20), False),
    ((), True), ((9,), True),
])
def test_every_layer_is_found(tmp_path, interleaved, cascade):
    path = tmp_path / "llama-TP-0-DECODE.trace.json.gz"
    names = write_trace(path, interleaved=interleaved, cascade=cascade)
    # the fixture breaks the order as intended: cores side by side where layers interleave
    assert _adjacent_cores(names) == (32 if cascade else 0) + len(interleaved)
    result = analyze([str(path)], options=AnalysisOptions(layers=32))
    assert [(s.layers_found, s.status) for s in result.step_rows] == [(32, "ok")] * 2
    attention_cores = [r for r in result.kernel_rows if class_of_name(r.kernel_name) == "attn_core"]
    assert all(r.section == "layer" for r in attention_cores)
    assert {r.layer for r in attention_cores} == set(range(32))
    # the LM head is after the layers, never the last layer's MLP
    lm_head = [r for r in result.kernel_rows if r.kernel_name.endswith("lm_head")]
    assert lm_head and all(r.section == "post" for r in lm_head)
    checks = {c.check: c.verdict for c in result.checks}
    assert checks["layer_count"] == checks["attention_cores_in_layers"] == "pass"
    # where the order is broken, the layers around it do not look like the others: said, not hidden
    assert checks["layer_kernel_sequence"] == ("fail" if interleaved else "pass")


def test_the_real_mi300x_llama_decode_has_32_layers_and_says_where_its_order_is_broken():
    result = analyze([real_trace(MI300_LLAMA)], model="llama-8b")
    step = result.step_rows[0]
    assert (step.layers_found, step.layers_expected, step.status) == (32, 32, "ok")
    lm_head_post = [r for r in result.kernel_rows if r.section == "post" and class_of_name(r.kernel_name) == "gemm"]
    assert len(lm_head_post) == 1 and lm_head_post[0].busy_us > 200  # the LM head, 0.29 ms
    failed = {c.check: c for c in result.failed_checks}
    assert set(failed) == {"layer_kernel_sequence"}, failed
    # layer 8's core follows layer 9's QKV projection in the trace; the kernel names around layers
    # 11 and 18 do not fit their durations (a 223 us RMSNorm): these are the layers named
    assert "TP0 step 0 layer 7, TP0 step 0 layer 8, TP0 step 0 layer 9" in failed["layer_kernel_sequence"].why


def test_the_same_model_on_b300_is_unchanged():
    result = analyze([real_trace(B300_LLAMA)], model="llama-8b")
    assert [(s.layers_found, s.status) for s in result.step_rows] == [(32, "ok")]
    assert not result.failed_checks
