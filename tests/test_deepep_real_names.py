"""DeepEP's low-latency kernels as a real build names them: DeepEP 9af0e0d (v1.2.1, the commit SGLang's
image builds) compiled on an H100 and run on one rank (tests/data/deepep/, docs/gpu-runs.md). Their
names differ from the examples the DeepEP signatures were written from (`dispatch<true, false, 7168>`
against `dispatch<true, 8, 7168>`): these hold the signatures' and the structural classes' patterns
to the names a real build emits. Names only: no two-rank trace with DeepEP exists yet, so where
these kernels sit in a step is not checked here."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.ingest.kernel_classes import class_of_name
from analysis.attribution.signature import load_signature

RECORD = json.loads((Path(__file__).parent / "data/deepep/h100-one-rank-low-latency.json").read_text())
KERNELS = RECORD["low_latency_roundtrip"]["kernels"]


def _real(kind: str) -> str:
    [name] = [k for k in KERNELS if f"internode_ll::{kind}<" in k]
    return name


def test_the_record_is_a_passing_round_trip_at_deepseek_v3_sizes():
    ll = RECORD["low_latency_roundtrip"]
    assert ll["passed"] and ll["graph_ok"]
    assert (ll["hidden"], ll["experts"], ll["topk"]) == (7168, 256, 8)
    assert RECORD["deepep_commit"].startswith("9af0e0d")
    assert all(v["count"] > 0 and v["mean_us"] > 0 for v in KERNELS.values())


@pytest.mark.parametrize("kind", ["dispatch", "combine"])
def test_structural_classes_name_the_real_kernels(kind):
    assert class_of_name(_real(kind)) == kind


@pytest.mark.parametrize("signature", ["sglang-sm90-deepep-ll", "sglang-sm100-deepep-ll"])
@pytest.mark.parametrize("kind", ["dispatch", "combine"])
def test_deepep_signatures_match_the_real_kernels_as_their_own_rows(signature, kind):
    sig = load_signature(signature)
    rows = [e for e in sig.layer + sig.side if e.regex.search(_real(kind))]
    assert rows and rows[0].module == kind, [(e.group, e.module) for e in rows]
