"""Kernels named by what ran them rather than where they start: copies from another thread, and a
shared-expert block on its own stream. Synthetic inputs, answers known by construction (the real
traces that needed both are judged in test_prefill_pd.py)."""
from __future__ import annotations

from analysis.attribution.layers import Slot
from analysis.attribution.off_thread import split_off_thread_copies
from analysis.attribution.shared_stream import MAX_RUN, join_shared_blocks
from analysis.ingest.trace_model import Kernel


def _k(name, stream, start, corr, kind="kernel"):
    return Kernel(name, stream, float(start), 1.0, corr, "cudaLaunchKernel", kind)


def test_copies_launched_by_a_thread_that_launched_no_kernel_are_split_off():
    kernels = [_k("gemm", 7, 0, 1), _k("Memcpy DtoH", 9, 1, 2, "memcpy"), _k("norm", 7, 2, 3),
               _k("Memcpy DtoH", 7, 3, 4, "memcpy"), _k("Memcpy HtoD", 9, 4, 5, "memcpy")]
    tid = {1: 100, 2: 200, 3: 100, 4: 100}  # 5: no launch record
    own, side = split_off_thread_copies(kernels, tid.get)
    assert [k.correlation for k in side] == [2]  # the step's own thread's copy stays, and so does one of no record
    assert [k.correlation for k in own] == [1, 3, 4, 5]


def test_nothing_is_split_off_where_the_kernels_name_no_thread():
    kernels = [_k("gemm", 7, 0, 1), _k("Memcpy DtoH", 9, 1, 2, "memcpy")]
    assert split_off_thread_copies(kernels, {2: 200}.get) == (kernels, [])


def _slot(unit, group, module, source="structure"):
    return Slot("layer", unit, group, module, module, source)


SHARED = ("combine/share overlap", "shared_experts")


def test_a_run_between_two_shared_expert_kernels_on_their_stream_joins_the_block():
    kernels = [_k("quant", 74, 0, 1), _k("gemm", 74, 1, 2), _k("topk", 70, 2, 3), _k("act_and_mul", 74, 3, 4),
               _k("quant", 74, 4, 5), _k("gemm", 74, 5, 6), _k("layout", 70, 6, 7)]
    slots = [_slot(0, *SHARED), _slot(0, *SHARED), _slot(0, "gate", "topk"), _slot(0, "moe", "silu"),
             _slot(0, "moe", "dispatch"), _slot(0, *SHARED), _slot(0, "moe", "dispatch")]
    assert join_shared_blocks(kernels, slots) == 2
    assert [(s.group, s.module) for s in slots] == [SHARED, SHARED, ("gate", "topk"), SHARED, SHARED, SHARED,
                                                    ("moe", "dispatch")]


def test_the_block_is_not_extended_across_layers_communication_or_a_long_run():
    # another layer unit between them
    kernels = [_k("gemm", 74, 0, 1), _k("act", 74, 1, 2), _k("gemm", 74, 2, 3)]
    slots = [_slot(0, *SHARED), _slot(1, "moe", "silu"), _slot(1, *SHARED)]
    assert join_shared_blocks(kernels, slots) == 0
    # a DeepEP kernel between them keeps its row
    kernels = [_k("gemm", 74, 0, 1), _k("void deep_ep::internode_ll::dispatch<true>", 74, 1, 2), _k("gemm", 74, 2, 3)]
    slots = [_slot(0, *SHARED), _slot(0, "moe", "dispatch"), _slot(0, *SHARED)]
    assert join_shared_blocks(kernels, slots) == 0
    # more than MAX_RUN kernels between them is not one block's inside
    n = MAX_RUN + 1
    kernels = [_k("gemm", 74, 0, 0)] + [_k("x", 74, i + 1, i + 1) for i in range(n)] + [_k("gemm", 74, n + 1, n + 1)]
    slots = [_slot(0, *SHARED)] + [_slot(0, "moe", "silu") for _ in range(n)] + [_slot(0, *SHARED)]
    assert join_shared_blocks(kernels, slots) == 0
    # a module range's name (another source) is never overruled
    kernels = [_k("gemm", 74, 0, 1), _k("act", 74, 1, 2), _k("gemm", 74, 2, 3)]
    slots = [_slot(0, *SHARED), _slot(0, "moe", "silu", "module_range"), _slot(0, *SHARED)]
    assert join_shared_blocks(kernels, slots) == 0
