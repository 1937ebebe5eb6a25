"""The step's own batch shape from SGLang's detailed annotations (0.5.19+), read from its labels.

The labels are made by the releases' own code: 0.5.23's `build_detailed_annotation_suffix`
(srt/model_executor/step_span_utils.py) and `build_step_span_name` (srt/utils/profile_utils.py),
read out of its wheel and run on a stand-in batch, so a change of the label's format fails here. The
harness asks for them exactly where a release's ProfileReq has the field. A SYNTHETIC trace with
such labels checks that the SOL columns then use the measured batch and KV length.
"""
from __future__ import annotations

import ast
import enum
import sys
import types
import zipfile
from types import SimpleNamespace

import pytest

from analysis.pipeline import AnalysisOptions, analyze, render_markdown
from analysis.attribution.signature import load_signature
from analysis.attribution.steps import label_aggregates, stage_of, _batch_of
from analysis.sol.estimate import Deployment, SolSettings
from harness.sglang.profile import start_profile_body
from harness.sglang.version import load_version, supported_versions
from harness.sglang.wheel_source import release_wheel
from synthetic_deepseek import write_rank_trace


def _source(version: str, member: str) -> str:
    with zipfile.ZipFile(release_wheel(load_version(version))) as zf:
        return zf.read(member).decode("utf-8")


def _profile_req_fields(version: str) -> set[str]:
    tree = ast.parse(_source(version, "sglang/srt/managers/io_struct.py"))
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "ProfileReq")
    return {s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}


@pytest.mark.parametrize("version", supported_versions())
def test_detailed_annotations_are_asked_for_exactly_where_the_release_has_the_field(version):
    has = "detailed_annotations" in _profile_req_fields(version)
    asked = bool(load_version(version).profile.get("detailed_annotations"))
    assert asked == has, version
    body = start_profile_body("/tmp/p", 3, "p", "v2", "decode", detailed_annotations=asked)
    assert ("detailed_annotations" in body) == has and set(body) <= _profile_req_fields(version)


class _Mode(enum.Enum):
    EXTEND, DECODE, MIXED, IDLE, TARGET_VERIFY, DRAFT_EXTEND_V2 = range(6)


class _Lengths(list):
    def tolist(self):
        return list(self)


@pytest.fixture(scope="module")
def release_0_5_23_labels():
    """0.5.23's own label builder, run on stand-in batches (its imports stubbed: ForwardMode only)."""
    stub = {name: types.ModuleType(name) for name in
            ("sglang", "sglang.srt", "sglang.srt.model_executor", "sglang.srt.model_executor.forward_batch_info")}
    stub["sglang.srt.model_executor.forward_batch_info"].ForwardMode = _Mode
    saved = {name: sys.modules.get(name) for name in stub}
    sys.modules.update(stub)
    try:
        spans: dict = {"__name__": "step_span_utils"}
        exec(compile(_source("0.5.23", "sglang/srt/model_executor/step_span_utils.py"), "step_span_utils.py", "exec"),
             spans)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    profile_utils = _source("0.5.23", "sglang/srt/utils/profile_utils.py")
    fn = next(n for n in ast.walk(ast.parse(profile_utils)) if isinstance(n, ast.FunctionDef)
              and n.name == "build_step_span_name")
    names = {"ForwardMode": _Mode, "ForwardBatch": object, "detailed_annotations_enabled": lambda: True,
             "build_detailed_annotation_suffix": spans["build_detailed_annotation_suffix"]}
    exec(compile(ast.get_source_segment(profile_utils, fn), "profile_utils.py", "exec"), names)
    return names["build_step_span_name"]


def _batch(mode, seq_lens, width=None):
    spec = SimpleNamespace(num_tokens_per_req=width) if width else None
    return SimpleNamespace(forward_mode=mode, batch_size=len(seq_lens), seq_lens_cpu=_Lengths(seq_lens),
                           spec_info=spec, extend_num_tokens=sum(seq_lens), extend_seq_lens_cpu=_Lengths(seq_lens),
                           extend_prefix_lens_cpu=_Lengths([0] * len(seq_lens)))


def test_the_labels_0_5_23_writes_give_the_steps_batch_kv_and_pass(release_0_5_23_labels):
    build = release_0_5_23_labels
    decode = build(_batch(_Mode.DECODE, [100, 250, 400]), forward_id=41)
    verify = build(_batch(_Mode.TARGET_VERIFY, [1000, 2000], width=3), forward_id=42)
    extend = build(_batch(_Mode.EXTEND, [64, 128]), forward_id=43)
    plain = build(_batch(_Mode.DECODE, [100]), detailed_annotations=False)
    assert (stage_of(decode), _batch_of(decode)) == ("decode", 3)
    assert label_aggregates(decode) == {"query_tokens": 3, "kv_tokens": 750, "forward_id": 41}
    assert (stage_of(verify), _batch_of(verify)) == ("target_verify", 2)
    assert label_aggregates(verify) == {"query_tokens": 6, "kv_tokens": 3000, "forward_id": 42}
    assert label_aggregates(extend) == {"query_tokens": 192, "kv_tokens": 192, "forward_id": 43}
    assert label_aggregates(plain) == {} and _batch_of(plain) == 1


def test_measured_batch_and_kv_length_replace_the_given_ones_in_the_sol_columns(tmp_path):
    """SYNTHETIC steps labelled as 0.5.23 labels them with detailed annotations (bs 16, KV lengths
    summing to 16 x 3000): steps.csv carries them, and the SOL columns use KV length 3000, not 1024."""
    sig = load_signature("sglang-sm90-deepep-ll")
    path = tmp_path / "run-TP-0-DECODE.trace.json.gz"
    labels = {"decode": "DECODE bs=16 g_sq=16 g_sqsq=16 g_sqsk=48000 g_sk=48000 forward_id=7"}
    write_rank_trace(path, sig, num_layers=4, dense_layers=1, steps=2, labels=labels)
    given = SolSettings(hardware="h200", deployment=Deployment(batch_per_rank=8, kv_len=1024))
    result = analyze([str(path)], signature=sig.name, options=AnalysisOptions(layers=4, sol=given))
    assert {(s.batch_size, s.query_tokens, s.kv_tokens, s.forward_id) for s in result.step_rows} == {(16, 16, 48000, 7)}
    shape = result.d4.measured_shape
    assert (shape.batch_per_rank, shape.kv_len, shape.steps) == (16, 3000, 2)
    assert (result.d4.sol.deployment.batch_per_rank, result.d4.sol.deployment.kv_len) == (16, 3000)
    text = render_markdown([result.d4])
    assert "batch 16.0 per rank, KV length 3000.0 per request" in text and "batch 16 per rank, KV length 3000" in text
    without = tmp_path / "plain-TP-0-DECODE.trace.json.gz"
    write_rank_trace(without, sig, num_layers=4, dense_layers=1, steps=2)
    plain = analyze([str(without)], signature=sig.name, options=AnalysisOptions(layers=4, sol=given))
    assert plain.d4.measured_shape is None and plain.d4.sol.deployment.kv_len == 1024
