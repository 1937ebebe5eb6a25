"""Calibration: a shipped signature checked against a trace that knows each kernel's module.

The embedded CUDA signature was learned on the H100 demo trace; the H200 demo trace is the same
stack (it agrees), the V3-width corpus trace is another (its kernels are other tile variants: it
does not). Whether a candidate really agrees is read from the independent truth
(tests/accuracy/truth.py: the trace's ranges read without any analysis code), not from the
calibration's own range path, which shares its naming with what it checks. The SGLang MI300X
signature was learned from a prefill trace; the decode trace named through its own capture trace
shows it does not name decode kernels right.
"""
from __future__ import annotations

import json
from pathlib import Path

from accuracy.table import MAX_GROUP_GAP_PP
from accuracy.tool import found_of
from accuracy.truth import compare, truth_of
from analysis.attribution.rank.calibration import AGREE_PP, calibrate
from conftest import real_trace
from harness.cli import main

DATA = Path(__file__).parent / "data"
H200_DEMO = DATA / "embedded-h200-demo_gpu-TP-0-DECODE.trace.json.gz"
V3_WIDTHS = DATA / "accuracy" / "h200" / "dsv3wide-h200-l4d1-e64k8-bs8-grouped-sdpa-TP-0-DECODE.trace.json.gz"


def _truth_problems(path: Path, signature: str) -> list[str]:
    """What the independent truth finds wrong with `signature` on `path` (ranges stripped): a layer
    count that differs, or a group more than 3 points off (the calibration's own bound)."""
    assert AGREE_PP == MAX_GROUP_GAP_PP  # both verdicts use one bound
    truth, found = truth_of(str(path)), found_of(str(path), signature)
    layered = [n for n in found.layers if n]
    problems = [] if layered == truth.layers else [f"layers {layered} against {truth.layers}"]
    return problems + compare(truth.group_shares(), truth.row_shares(), found.groups, found.rows, rows=[])


def test_a_signature_that_fits_its_stack_is_kept():
    """Kept, and rightly: the independent truth finds every layer and every group within 3 points."""
    cal = calibrate("embedded-hf-deepseek-v3-cuda", truth_trace=str(H200_DEMO))
    assert cal.chosen == "embedded-hf-deepseek-v3-cuda" and cal.candidates[0].agrees
    assert not _truth_problems(H200_DEMO, "embedded-hf-deepseek-v3-cuda")


def test_a_signature_from_another_stack_gives_way_to_the_structure():
    """Given way, and rightly: by the independent truth the shipped signature finds no layer of
    the V3-width trace, and the structure finds them all with every group within 3 points."""
    cal = calibrate("embedded-hf-deepseek-v3-cuda", truth_trace=str(V3_WIDTHS))
    shipped, structure = cal.candidates
    assert not shipped.agrees and structure.agrees and cal.chosen == "generic"
    assert cal.reason.startswith("embedded-hf-deepseek-v3-cuda disagrees with the calibration")
    assert "using generic" in cal.reason
    assert _truth_problems(V3_WIDTHS, "embedded-hf-deepseek-v3-cuda")[0] == "layers [] against [4, 4]"
    assert not _truth_problems(V3_WIDTHS, "generic")


def test_capture_traces_calibrate_the_decode_trace_itself(tmp_path):
    decode = real_trace("amd/sglang_qwen3-8b_mi300x_decode/sglang_Qwen3-8B_decode.json.gz")
    captures = real_trace("amd/sglang_qwen3-8b_mi300x_decode/capture_traces")
    out = tmp_path / "cal"
    assert main(["calibrate", "--signature", "sglang-qwen3-dense-mi300", "--decode", decode,
                 "--capture-trace", captures, "--out", str(out)]) == 0
    saved = json.loads((out / "calibration.json").read_text())
    assert saved["chosen"] == "generic" and "named by its capture traces" in saved["truth"]
    shipped, structure = saved["candidates"]
    assert not shipped["agrees"] and structure["agrees"] and structure["layers_found"] == [36]
    assert "**sglang-qwen3-dense-mi300 disagrees" in (out / "calibration.md").read_text()


def test_calibrate_needs_a_truth(capsys):
    assert main(["calibrate", "--signature", "generic"]) == 2
    assert "give either --truth TRACE or --decode TRACE with --capture-trace" in capsys.readouterr().err
