"""A communication kernel keeps its class's row wherever a namer put it (analysis/attribution/pinned_names.py).

The wrong names come from a namer double that answers like the real structural namer but moves one
DeepEP receive and one NCCL collective into the experts' row, as misplaced layer borders and long
receive waits did on real eager traces (issue: the production decode shape); the rows must keep
`moe / dispatch` and `communication / ...`. A stack's own signature and the trace's annotations are left
as they are.
"""
from __future__ import annotations

from pathlib import Path

from msgspec.structs import replace

from analysis.ingest.kernel_classes import class_of_name
from analysis.attribution.layers import Slot
from analysis.attribution.namers import Naming
from analysis.attribution.namers.kernels import StructureNamer
from analysis.attribution.pinned_names import pinned
from analysis.attribution.rank import attribute as attribute_module
from analysis.attribution.rank.attribute import RankOptions, attribute_rank
from analysis.attribution.signature import load_signature
from analysis.ingest.trace_loader import load_trace

EP = Path(__file__).resolve().parent / "data" / "sglang-real" / "ep"
GRAPH = EP / "sglang-0.5.17-dsv3-4l-fp8-h100x2-ep-noa2a-graph-TP-0-EP-0-decode.trace.json.gz"
DEEPEP = EP / "sglang-0.5.17-dsv3-4l-fp8-h100x2-deepep-ll-graph-TP-0-EP-0-decode.trace.json.gz"

EXPERTS = Slot("layer", 1, "moe", "experts", "k", "structure", role="experts", rule="structure_rules.yaml:routed.gemm")


def test_a_dispatch_named_experts_is_named_dispatch():
    out = pinned(EXPERTS, "void deep_ep::internode_ll::dispatch<true, false, 7168>(void*)")
    assert (out.group, out.module, out.role, out.rule) == ("moe", "dispatch", "dispatch", "kernel_classes.yaml:dispatch")
    out = pinned(EXPERTS, "void deep_ep::intranode::notify_dispatch(int const*, int*)")
    assert (out.group, out.module) == ("moe", "dispatch")
    out = pinned(EXPERTS, "void deep_ep::internode_ll::combine<false, 7168>(void*)")
    assert (out.group, out.module) == ("moe", "combine")


def test_a_collective_is_named_by_its_collective():
    assert (pinned(EXPERTS, "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)").module) == "reduce_scatter"
    assert (pinned(EXPERTS, "ncclDevKernel_AllGather_RING_LL(x)").module) == "all_gather"
    out = pinned(EXPERTS, "void cross_device_reduce_1stage<__nv_bfloat16, 2>(RankData*)")
    assert (out.group, out.module) == ("communication", "all_reduce")


def test_other_kernels_and_the_users_word_are_left_alone():
    assert pinned(EXPERTS, "void deep_gemm::sm90_fp8_gemm_1d2d_impl<1>()") is EXPERTS
    for source in ("signature", "annotation"):
        slot = replace(EXPERTS, source=source)
        assert pinned(slot, "void deep_ep::internode_ll::dispatch<true>()") is slot
    right = Slot("layer", 1, "moe", "dispatch", "k", "structure", role="dispatch")
    assert pinned(right, "void deep_ep::internode_ll::dispatch<true>()") is right


def _communication(name: str) -> bool:
    return class_of_name(name) in ("dispatch", "combine", "allreduce")


class _MisplacingNamer(StructureNamer):
    """The structural namer's answer with every DeepEP dispatch and collective moved into the experts."""

    def name(self, step):
        naming = super().name(step)
        slots = [replace(s, group="moe", module="experts", role="experts")
                 if s.section == "layer" and _communication(k.name) else s
                 for k, s in zip(step.kernels, naming.cut.slots)]
        return Naming(replace_cut(naming.cut, slots), naming.how)


def replace_cut(cut, slots):
    from dataclasses import replace as dc_replace
    return dc_replace(cut, slots=slots)


def test_rows_keep_the_class_whatever_the_namer_said(monkeypatch):
    monkeypatch.setattr(attribute_module, "namers_for", lambda *a, **k: [_MisplacingNamer()])
    for path in (DEEPEP, GRAPH):
        rows, _ = attribute_rank(load_trace(str(path)), load_signature("generic"), None, RankOptions())
        comm = [r for r in rows if r.section == "layer" and _communication(r.kernel_name)]
        assert comm, path.name
        assert {(r.group, r.module) for r in comm} <= {("moe", "dispatch"), ("moe", "combine"),
                                                        ("communication", "all_reduce"),
                                                        ("communication", "reduce_scatter"),
                                                        ("communication", "all_gather")}
        assert all(r.rule.startswith("kernel_classes.yaml:") for r in comm)
