"""Step windows inside step windows: SGLang 0.5.17 wraps an MTP draft extend twice (the speculative
worker's `draft_extend` range around the forward's `step[DRAFT_EXTEND_V2 bs=N]`).

Without Python stacks the analysis cut steps from those annotations, and the outer range's kernels
before and after the inner one became a draft-extend step of their own: 0 layers in half of the
draft-extend steps, 1 in the other half, `layer_count` and `kernel_durations` failing. The real case
below is SGLang's own eager MTP trace (tests/data/sglang-real/eager) with its Python ranges dropped, as a
trace recorded without stacks has it; the module ranges of the same file say what the steps are.
The synthetic cases (named so; their answers are written by hand) pin the rule's edges.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from analysis.attribution.steps import segment_steps
from analysis.ingest.trace_model import Kernel, Range, RankId, RankTrace
from analysis.pipeline import AnalysisOptions, analyze

EAGER_MTP = (Path(__file__).resolve().parent / "data" / "sglang-real" / "eager"
             / "sglang-0.5.17-dsv3-4l-fp8-h200-eager-mtp-TP-0-decode.trace.json.gz")


def _without_stacks(src: Path, dst: Path) -> Path:
    data = json.loads(gzip.decompress(src.read_bytes()))
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") != "python_function"]
    dst.write_bytes(gzip.compress(json.dumps(data).encode()))
    return dst


def test_real_mtp_trace_without_stacks_has_the_steps_its_module_ranges_have(tmp_path):
    stripped = _without_stacks(EAGER_MTP, tmp_path / "mtp-nostack-TP-0-decode.trace.json.gz")
    with_stacks = analyze([str(EAGER_MTP)], options=AnalysisOptions(run="stacks"))
    without = analyze([str(stripped)], options=AnalysisOptions(run="nostack"))
    forwards = [(s.stage, s.layers_found, s.batch_size) for s in with_stacks.step_rows]
    assert forwards == [("target_verify", 4, 16), ("draft_extend", 1, 16)] * 4
    # without stacks: the same forwards, each once, and EAGLE's draft phase (no draft-model pass with one
    # speculative step) a step of its own before each verify
    assert [(s.stage, s.layers_found, s.batch_size) for s in without.step_rows] == \
        [("draft", 0, None), ("target_verify", 4, 16), ("draft_extend", 1, 16)] * 4
    assert all(s.status == "ok" for s in without.step_rows)
    assert not without.failed_checks, [c.name for c in without.failed_checks]
    # each draft extend's kernels in one step: as many as the module ranges put in it
    kernels = lambda result: [s.kernels for s in result.step_rows if s.stage == "draft_extend"]  # noqa: E731
    assert all(n >= 55 for n in kernels(without)), kernels(without)


def _kernel(t: float, corr: int) -> Kernel:
    return Kernel("k", 7, t, 1.0, corr, "cudaLaunchKernel")


def _trace(cpu: list[Range], gpu: list[Range], kernel_times: list[float]) -> RankTrace:
    """SYNTHETIC: kernels launched at the same time they ran (launch call = kernel start - 0.5)."""
    from analysis.ingest.trace_model import Launch

    kernels = [_kernel(t, i) for i, t in enumerate(kernel_times)]
    launches = [Launch("cudaLaunchKernel", t - 0.5, 1, i) for i, t in enumerate(kernel_times)]
    return RankTrace("synthetic", RankId(), None, kernels, gpu, cpu, [], launches)


def _cut(trace: RankTrace) -> list[tuple[str, int]]:
    return [(s.label, len(s.kernels)) for s in segment_steps(trace)]


def test_synthetic_one_inner_window_takes_the_outer_ones_kernels():
    cpu = [Range("draft_extend", 0, 100, 1), Range("step[DRAFT_EXTEND_V2 bs=16]", 20, 60, 1)]
    assert _cut(_trace(cpu, [], [5, 10, 30, 50, 90, 95])) == [("step[DRAFT_EXTEND_V2 bs=16]", 6)]


def test_synthetic_several_inner_windows_stay_steps_and_share_the_outer_edges():
    """0.5.23 labels each draft forward `step[DRAFT ...]`: inside one `draft` range, each stays a step;
    the outer's kernels before the first join the first, after the last join the last."""
    cpu = [Range("draft", 0, 100, 1), Range("step[DRAFT bs=4]", 10, 30, 1), Range("step[DRAFT bs=4]", 50, 30, 1)]
    assert _cut(_trace(cpu, [], [2, 15, 20, 45, 55, 60, 90])) == [("step[DRAFT bs=4]", 4), ("step[DRAFT bs=4]", 3)]


def test_synthetic_windows_side_by_side_are_left_as_they_are():
    cpu = [Range("draft", 0, 10, 1), Range("step[TARGET_VERIFY bs=8]", 12, 30, 1),
           Range("draft_extend", 45, 40, 1), Range("step[DRAFT_EXTEND_V2 bs=8]", 50, 30, 1)]
    assert _cut(_trace(cpu, [], [2, 15, 20, 46, 55, 60, 84])) == [
        ("draft", 1), ("step[TARGET_VERIFY bs=8]", 2), ("step[DRAFT_EXTEND_V2 bs=8]", 4)]


def test_synthetic_gpu_windows_of_one_step_on_several_streams_stay_one_step():
    """SGLang writes a step's GPU annotation on each stream it used: a shorter same-named window inside
    the main stream's is the same step, not a nested one (seen on real DeepEP CUDA-graph decodes)."""
    gpu = [Range("step[DECODE bs=16]", 0, 100, 70), Range("step[DECODE bs=16]", 30, 20, 470),
           Range("step[DECODE bs=16]", 60, 10, 472), Range("step[DECODE bs=16]", 200, 100, 70),
           Range("step[DECODE bs=16]", 230, 20, 470)]
    assert _cut(_trace([], gpu, [5, 35, 65, 95, 205, 240, 290])) == [
        ("step[DECODE bs=16]", 4), ("step[DECODE bs=16]", 3)]


def _labelled_trace(path: Path, label: str) -> Path:
    """SYNTHETIC: three steps under `label`, each four kernels no attention core is among (answers by hand)."""
    from synthetic_deepseek import _Writer

    w = _Writer()
    for _ in range(3):
        start = w.t
        for name in ("void at::native::vectorized_elementwise_kernel<4>", "Memcpy HtoD (Pageable -> Device)",
                     "void at::native::index_elementwise_kernel<128>", "void at::native::reduce_kernel<512>"):
            w.kernel(name, 2.0, 7)
        w.annotation(label, start - 1.0, w.t)
        w.t += 100.0
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": w.events}).encode()))
    return path


def test_only_a_draft_phase_may_hold_no_layer(tmp_path):
    """A decode step without a layer is a problem the table names; an MTP draft phase without one is what
    EAGLE with one speculative step runs (no draft-model pass), and says so."""
    from analysis.errors import AnalysisError

    with pytest.raises(AnalysisError, match="no layers found in any of the 3 decode steps"):
        analyze([str(_labelled_trace(tmp_path / "d-TP-0-decode.trace.json.gz", "step[DECODE bs=1]"))],
                options=AnalysisOptions(run="decode"))
    draft = analyze([str(_labelled_trace(tmp_path / "m-TP-0-decode.trace.json.gz", "draft"))],
                    options=AnalysisOptions(run="draft"))
    assert {s.status for s in draft.step_rows} == {"ok"} and {s.layers_found for s in draft.step_rows} == {0}
    assert all("no draft-model pass" in s.note for s in draft.step_rows)
