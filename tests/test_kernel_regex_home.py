"""A kernel regex has one home: the generic signature's expert-GEMM and collective families take the
names of kernel_classes.yaml's expert_gemm and allreduce entries from there (Family.classes), and
their own `match` only adds names beyond them (analysis/attribution/signature.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from analysis.attribution.signature import Family, load_signature

ROOT = Path(__file__).resolve().parents[1]
CLASSES = ROOT / "analysis" / "data" / "rules" / "kernel_classes.yaml"
GENERIC = ROOT / "analysis" / "data" / "signatures" / "generic.yaml"


def _alternatives(regex: str) -> set[str]:
    return {part.lower() for part in regex.removeprefix("(?i)").split("|")}


def test_a_family_that_takes_a_class_repeats_none_of_its_regex():
    classes = yaml.safe_load(CLASSES.read_text())["classes"]
    families = [f for f in yaml.safe_load(GENERIC.read_text())["families"] if f.get("classes")]
    assert {f["family"] for f in families} >= {"moe_gemm", "nccl"}
    for family in families:
        class_parts = set().union(*(_alternatives(c["match"]) for c in classes if c["class"] in family["classes"]))
        assert not _alternatives(family.get("match", "")) & class_parts, family["family"]


@pytest.mark.parametrize("name,family", [
    ("void cutlass_moe_mm_sm90<cutlass::float_e4m3_t>(Params)", "moe_gemm"),  # only the class's regex has it
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4", "moe_gemm"),
    ("fused_moe_kernel", "moe_gemm"),
    ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<0u, 7168u, (deep_gemm::GemmType)1>(float*)", "moe_gemm"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "nccl"),
    ("void gloo::allreduce_kernel(float*)", "nccl"),  # the class's, not the family's own
    ("cross_device_ar_kernel", "nccl"),  # the family's own addition
    ("rms_norm_kernel<8u>(float*)", "norm"),
])
def test_generic_families_hold_their_classes_names(name, family):
    found = load_signature("generic").family_of(name)
    assert found is not None and found.family == family


def test_a_family_needs_a_regex_or_a_class():
    import msgspec

    with pytest.raises(msgspec.ValidationError, match="needs `match` or `classes`"):
        msgspec.convert({"family": "empty", "group": "other"}, Family)
    assert msgspec.convert({"family": "experts", "group": "moe", "classes": ["expert_gemm"]}, Family).holds(
        "fused_moe_kernel")
