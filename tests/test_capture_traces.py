"""CUDA-graph capture traces: used to name replayed kernels, or a problem that says why not.

The real pair is SGLang's Qwen3-8B decode on an MI300X with its capture trace (shared/traces/real,
SOURCES.md). Variants of that capture are written here with a part removed (launches, module
ranges, kernel names), each named for what it lacks.
"""
from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter

import pytest

from analysis.attribution.rank.agreement import shares
from analysis.pipeline import AnalysisOptions, analyze
from analysis.attribution.capture import capture_files, load_capture
from conftest import ROOT, real_trace

REPLAY = "amd/sglang_qwen3-8b_mi300x_decode/sglang_Qwen3-8B_decode.json.gz"
CAPTURE_DIR = "amd/sglang_qwen3-8b_mi300x_decode/capture_traces"
CAPTURE = CAPTURE_DIR + "/bs_32_rank0.json.gz"


def _shares(result):
    return Counter(shares(result.kernel_rows, result.step_rows).groups)


def _rewrite(src: str, dst, keep):
    doc = json.loads(gzip.decompress(open(src, "rb").read()))
    doc["traceEvents"] = [e for e in (keep(ev) for ev in doc["traceEvents"]) if e is not None]
    with gzip.open(dst, "wt") as fh:
        json.dump(doc, fh)
    return str(dst)


def test_capture_folder_names_every_replayed_kernel_and_agrees_with_the_structure():
    replay, folder = real_trace(REPLAY), real_trace(CAPTURE_DIR)
    with_capture = analyze([replay], options=AnalysisOptions(capture_traces=[folder]))
    step = with_capture.step_rows[0]
    assert step.note.startswith("attributed by capture; bs_32_rank0.json.gz (bs 32, 544 launches): 544 of 544")
    assert step.layers_found == 36 and step.moe_layers_found == 0 and not with_capture.problems
    assert Counter(r.source for r in with_capture.kernel_rows) == {"capture": step.kernels}
    by_structure = analyze([replay])
    assert by_structure.step_rows[0].note.startswith("attributed by structure")
    a, b = _shares(with_capture), _shares(by_structure)
    assert all(abs(a[g] - b[g]) <= 1.0 for g in set(a) | set(b)), (a, b)


def test_capture_file_metadata_from_names_annotations_and_execution_details(tmp_path):
    src = real_trace(CAPTURE)
    assert (load_capture(capture_files([src])[0]).batch_size, load_capture(capture_files([src])[0]).rank) == (32, 0)
    # vLLM's naming: the batch comes from the capture_<N>_<MODE> annotation, or execution_details.json
    vllm = tmp_path / "graph_capture_rank_1.1773709742341309550.pt.trace.json.gz"

    def annotate(ev):
        if ev.get("cat") == "user_annotation":
            ev = dict(ev, name="capture_48_FULL")
        return ev

    cap = load_capture(capture_files([_rewrite(src, vllm, annotate)])[0])
    assert (cap.batch_size, cap.mode, cap.rank) == (48, "FULL", 1)
    (tmp_path / "execution_details.json").write_text(json.dumps([{"file": vllm.name, "batch_size": 64, "mode": "FULL"}]))
    cap = load_capture(capture_files([str(tmp_path)])[0])
    assert (cap.batch_size, cap.mode) == (64, "FULL")


def test_a_capture_of_another_graph_is_a_problem_not_silence(tmp_path):
    """CUDA launches carry no kernel name: with fewer launches than replayed kernels, order says nothing."""
    dropped = {"n": 0}

    def cuda_like_minus_launches(ev):
        if ev.get("cat") in ("cuda_runtime", "cuda_driver") and "Launch" in ev.get("name", ""):
            args = {k: v for k, v in (ev.get("args") or {}).items() if k != "kernel"}
            dropped["n"] += 1
            if dropped["n"] % 50 == 0:
                return None
            return dict(ev, args=args)
        return ev

    capture = _rewrite(real_trace(CAPTURE), tmp_path / "bs_32_rank0.json.gz", cuda_like_minus_launches)
    result = analyze([real_trace(REPLAY)], options=AnalysisOptions(capture_traces=[capture]))
    step = result.step_rows[0]
    assert step.note.startswith("attributed by structure") and step.layers_found == 36
    messages = [p.message for p in result.problems]
    assert any(m.startswith("capture trace not used for 1 of 1 steps: the step replays 544 kernels but no "
                            "capture launched as many (bs_32_rank0.json.gz: 534)") for m in messages), messages


def test_a_capture_without_module_ranges_is_a_problem(tmp_path):
    def no_modules(ev):
        return None if ev.get("cat") == "python_function" else ev

    capture = _rewrite(real_trace(CAPTURE), tmp_path / "bs_32_rank0.json.gz", no_modules)
    result = analyze([real_trace(REPLAY)], options=AnalysisOptions(capture_traces=[capture]))
    assert result.step_rows[0].note.startswith("attributed by structure")
    assert any("no decoder-layer nn.Module ranges in the capture" in p.message for p in result.problems)


def test_a_capture_given_with_an_eager_trace_is_reported(tmp_path):
    eager = tmp_path / "eager.json.gz"
    shutil.copy(real_trace("amd/sglang_qwen3-8b_mi300x_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz"), eager)
    result = analyze([str(eager)], options=AnalysisOptions(capture_traces=[real_trace(CAPTURE)]))
    assert result.step_rows[0].note.startswith("attributed by module_range")
    assert any("no step replays a CUDA graph" in p.message for p in result.problems)


def test_a_missing_capture_is_an_error(tmp_path):
    from analysis.errors import AnalysisError

    with pytest.raises(AnalysisError, match="nope.json.gz: no such capture trace"):
        analyze([real_trace(REPLAY)], options=AnalysisOptions(capture_traces=[str(tmp_path / "nope.json.gz")]))


def test_sglang_capture_files_are_matched_to_their_tp_rank():
    """SGLang 0.5.17 names its capture traces ...-TP-<rank>.json.gz: each rank of a multi-GPU decode
    reads its own (rank 1 took rank 0's before), also through a folder."""
    from analysis.pipeline import AnalysisOptions, analyze

    ep = ROOT / "tests" / "data" / "sglang-real" / "ep"
    traces = sorted(str(p) for p in ep.glob("*h100x2-deepep-ll-graph-TP-*.trace.json.gz"))
    result = analyze(traces, options=AnalysisOptions(capture_traces=[str(ep / "capture-deepep-graph")]))
    used = {}
    for problem in result.problems:
        if "capture trace not used" in problem.message:
            used[problem.rank] = problem.message.split(": ")[1].split(" ")[0]
    assert used == {"TP0-EP0": "cuda_graph_capture-DecodeCudaGraphRunner-TP-0.json.gz",
                    "TP1-EP1": "cuda_graph_capture-DecodeCudaGraphRunner-TP-1.json.gz"}
