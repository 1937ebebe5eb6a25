"""The accuracy-suite corpus (tests/data/accuracy) is what its manifest says it is.

Why: the suite judges the analysis against each trace's own nn.Module ranges; if a fixture lost its
ranges in slimming, or the manifest's step or layer count were wrong, the suite would judge the
analysis against a wrong answer. These tests check the fixtures only, not the analysis.
"""
from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest
import yaml

from analysis.ingest.trace_loader import load_trace
from analysis.ingest.trace_model import Range
from benchmarks.accuracy.suite_cases import case_name

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "accuracy"
SCRIPTS = ROOT / "benchmarks" / "accuracy"
MAX_CORPUS_BYTES = 6_500_000
STEP_ANNOTATION_PREFIX = "step[DECODE"


def _suite() -> list[dict]:
    with open(CORPUS / "suite.yaml") as fh:
        return yaml.safe_load(fh)["traces"]


ENTRIES = _suite()


def _ids(entries: list[dict]) -> list[str]:
    return [case_name(e) for e in entries]


def outermost_ranges(ranges: list[Range]) -> list[Range]:
    """Module ranges not nested in another module range of the same thread."""
    tol_us = 0.01
    by_tid: dict[int, list[Range]] = {}
    for r in ranges:
        by_tid.setdefault(r.tid, []).append(r)
    top: list[Range] = []
    for items in by_tid.values():
        items.sort(key=lambda r: (r.start_us, -r.dur_us))
        end_us = float("-inf")
        for r in items:
            if r.start_us >= end_us - tol_us:
                top.append(r)
                end_us = r.end_us
            else:
                end_us = max(end_us, r.end_us)
    return sorted(top, key=lambda r: r.start_us)


def model_forward_ranges(ranges: list[Range]) -> list[Range]:
    """The outermost module ranges whose name repeats most: one per top-level model forward."""
    top = outermost_ranges(ranges)
    if not top:
        return []
    name, _ = Counter(r.name for r in top).most_common(1)[0]
    return [r for r in top if r.name == name]


def decoder_layers_per_step(ranges: list[Range], steps: list[Range]) -> list[int]:
    layers = [r for r in ranges if "DecoderLayer" in r.name]
    return [sum(1 for r in layers if s.start_us <= r.start_us and r.end_us <= s.end_us + 0.01) for s in steps]


def test_manifest_lists_every_trace_once_and_the_folder_is_small():
    files = [e["file"] for e in ENTRIES]
    assert len(files) == len(set(files))
    on_disk = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*.trace.json.gz")}
    assert on_disk == set(files), "traces on disk and in suite.yaml differ"
    total = sum(p.stat().st_size for p in CORPUS.rglob("*") if p.is_file())
    assert total < MAX_CORPUS_BYTES, f"tests/data/accuracy holds {total} bytes"
    for e in ENTRIES:
        assert e["layers"]["total"] == e["layers"]["dense"] + e["layers"]["moe"]
        if e["cuda_graph"]:
            assert e["ground_truth"] in files, f"{e['file']}: ground truth {e['ground_truth']} not in the suite"
            assert not e["module_ranges"]


@pytest.mark.parametrize("entry", ENTRIES, ids=_ids(ENTRIES))
def test_trace_loads_and_matches_its_manifest_entry(entry):
    path = CORPUS / entry["file"]
    trace = load_trace(str(path))
    with open(CORPUS / entry["meta"]) as fh:
        meta = json.load(fh)
    recorded = meta.get("loader_counts")
    if recorded is not None:  # what the loader saw in the unslimmed trace when it was recorded
        assert recorded == {
            "kernels": len(trace.kernels),
            "module_ranges": len(trace.module_ranges),
            "cpu_annotations": len(trace.cpu_annotations),
            "gpu_annotations": len(trace.gpu_annotations),
            "launches": len(trace.launches),
        }
    on_gpu = entry["recorded"]["device"] == "cuda"
    assert all(k.kind != "cpu_op" for k in trace.kernels) if on_gpu else all(k.kind == "cpu_op" for k in trace.kernels)

    step_annotations = [a for a in trace.cpu_annotations if a.name.startswith(STEP_ANNOTATION_PREFIX)]
    if entry["step_annotations"]:
        assert len(step_annotations) == entry["steps"]
        assert all(a.name == f"step[DECODE bs={entry['batch_size']}]" for a in step_annotations)
    else:
        assert not step_annotations

    if not entry["module_ranges"]:
        assert not trace.module_ranges
        assert any(k.launcher == "cudaGraphLaunch" for k in trace.kernels)
        return
    steps = model_forward_ranges(trace.module_ranges)
    assert len(steps) == entry["steps"]
    assert decoder_layers_per_step(trace.module_ranges, steps) == [entry["layers"]["total"]] * entry["steps"]
    names = {r.name.rsplit("_", 1)[0] for r in trace.module_ranges}
    assert any("Experts" in n or n.endswith("Dispatch") for n in names), sorted(names)
    assert meta["module_names_verified"], "module name map does not follow the trace's call order"


def _load_script(name: str):
    sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_slimming_keeps_what_the_loader_sees(tmp_path):
    """A fresh recording, unslimmed and slimmed: same kernels, module ranges, annotations, launches."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    record = _load_script("record_traces")
    case = record.TraceCase(name="slim-check", hidden=64, layers=2, dense_layers=1, experts=8, top_k=2,
                            expert_width=32, dense_width=64, heads=2, batch=2, prompt_len=4, steps=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        meta = record.record_case(case, str(tmp_path), keep_raw=True, command="test")
    # the cache goes in under the name this transformers takes (harness/engines/embedded/cache_keyword.py)
    assert not [str(w.message) for w in caught if "past_key_values" in str(w.message)]
    raw = record.loader_counts(str(tmp_path / "slim-check.raw.json.gz"))
    slim = record.loader_counts(str(tmp_path / meta["file"]))
    assert raw == slim and raw["module_ranges"] > 0 and raw["kernels"] > 0
    assert meta["module_names_verified"]
    assert meta["module_names"]["Linear_0"] == "model.layers.0.self_attn.q_a_proj"


def test_slimming_a_slimmed_trace_changes_nothing(tmp_path):
    slim = _load_script("slim_trace")
    src = CORPUS / ENTRIES[0]["file"]
    once = slim.read_trace(str(src))
    slim.slim_trace_file(str(src), str(tmp_path / "again.trace.json.gz"))
    assert slim.read_trace(str(tmp_path / "again.trace.json.gz")) == once


def test_slim_keeps_anchor_functions_and_drops_bookkeeping():
    slim = _load_script("slim_trace")
    keep = slim.keep_python_function
    assert keep("nn.Module: DeepseekV3Attention_0")
    assert keep("transformers/models/deepseek_v3/modeling_deepseek_v3.py(310): apply_rotary_pos_emb_interleave")
    assert keep("transformers/integrations/sdpa_attention.py(95): sdpa_attention_forward")
    assert keep("transformers/cache_utils.py(146): get_seq_length")
    assert keep("transformers/integrations/moe.py(424): grouped_mm_experts_forward")
    assert keep("<built-in method topk of type object at 0x7f6cba0cea40>")
    assert not keep("transformers/models/qwen3_moe/modeling_qwen3_moe.py(275): forward")
    assert not keep("<built-in method update of dict object at 0x7f6cba0cea40>")
    assert not keep("torch/nn/modules/module.py(1782): _call_impl")
