"""Layers found once per chain shape (analysis/attribution/structure.py, _chain_shape / _layout).

A chain whose kernels differ from another's only in names the layer search compares for equality
(cuBLAS picks another GEMM tile, so another kernel name, for another batch size) shares that chain's
layout. What is checked: a chain read after such a look-alike (the layout taken from the cache) gets
exactly what it gets read first, with every cache empty; each kernel keeps its own name as its
label (a collective its own collective's role); and chains that differ in what the search does read
(a kernel's class, which names are equal, a memset before a GEMM) do not share a layout. The chain is a real SGLang decode step (Qwen3-30B-A3B,
48 MoE layers, B300); the variants rename its kernels.
"""
from __future__ import annotations

import msgspec
import pytest

from analysis.attribution import structure
from analysis.attribution.steps import segment_steps
from analysis.attribution.structure import cut_structural
from analysis.ingest.trace_loader import load_trace
from benchmarks.real_traces import QWEN3_DECODE
from tests.conftest import real_trace


def _clear() -> None:
    structure._layer_plan.cache_clear()
    structure._layout.cache_clear()


def _read(kernels):
    """(section, layer, group, module, kernel label, role, rule) per kernel, and the cut's totals."""
    cut = cut_structural(kernels)
    return ([(s.section, s.unit, s.group, s.module, s.kernel, s.role, s.rule) for s in cut.slots],
            cut.units_found, cut.moe_layers, cut.detail)


def _cold(kernels):
    _clear()
    return _read(kernels)


def _after(first_kernels, then_kernels):
    """`then_kernels` read with every cache empty (alone), and read right after `first_kernels`: (alone,
    the first read, the read after it, how many layouts the read after it made)."""
    alone = _cold(then_kernels)
    _clear()
    first = _read(first_kernels)
    misses = structure._layout.cache_info().misses
    after = _read(then_kernels)
    return alone, first, after, structure._layout.cache_info().misses - misses


def _renamed(kernels, rename):
    return [msgspec.structs.replace(k, name=rename(k.name)) for k in kernels]


@pytest.fixture(scope="module")
def step():
    trace = load_trace(real_trace(QWEN3_DECODE))
    (only,) = segment_steps(trace, 2000.0)
    return only.kernels


def _gemm_with_batch(name: str) -> str:
    return f"{name}_b17" if name.startswith("nvjet") else name


def test_a_look_alike_chain_reads_as_it_reads_alone(step):
    alone, first, shared, made = _after(step, _renamed(step, _gemm_with_batch))
    assert made == 0  # the layout came from the cache
    assert shared == alone
    assert alone[1] == 48 and alone[2] == 48
    labels = {s[4] for s in shared[0]}
    assert any(label.endswith("_b17") for label in labels)  # each kernel keeps its own name
    assert not any(label.startswith("nvjet") and not label.endswith("_b17") for label in labels)
    assert [s[:4] + s[5:] for s in shared[0]] == [s[:4] + s[5:] for s in first[0]]


@pytest.mark.parametrize("what", ["class", "equality"])
def test_chains_that_differ_in_what_the_search_reads_share_no_layout(step, what):
    gemms = [i for i, k in enumerate(step) if k.name.startswith("nvjet")]
    if what == "class":  # the MoE finalize becomes an elementwise kernel: the MoE layers are read anew
        finalize = {k.name for k in step if structure.class_of_name(k.name) == "moe_finalize"}
        assert finalize and structure.class_of_name("vectorized_elementwise_kernel_add") == "elementwise"
        variant = _renamed(step, lambda n: "vectorized_elementwise_kernel_add" if n in finalize else n)
    else:  # one layer's GEMM no longer has the name the other layers' have
        variant = list(step)
        variant[gemms[len(gemms) // 2]] = msgspec.structs.replace(step[gemms[len(gemms) // 2]], name="nvjet_other")
    alone, first, after, made = _after(step, variant)
    assert made == 1  # its own layout
    assert after == alone
    if what == "class":  # had it shared the step's layout, its roles would be the step's
        assert [s[5] for s in after[0]] != [s[5] for s in first[0]]


def test_a_memset_before_a_gemm_is_part_of_the_shape():
    """A memset right before a GEMM joins the GEMM's unit; a copy (the same class) does not."""
    gemm = "nvjet_sm103_tst_64x16_64x16_4x1_v_bz_TNT"
    copy, memset = "Memcpy DtoD (Device -> Device)", "Memset (Device)"
    assert structure.class_of_name(copy) == structure.class_of_name(memset) == "memory"
    with_copy = structure._chain_shape(((copy, gemm), None, None))
    with_memset = structure._chain_shape(((memset, gemm), None, None))
    assert with_copy != with_memset
    assert [(u.kind, u.lo, u.hi) for u in structure._units_of(with_copy)] == [("memory", 0, 0), ("gemm", 1, 1)]
    assert [(u.kind, u.lo, u.hi) for u in structure._units_of(with_memset)] == [("gemm", 0, 1)]


def _with_collective(step, name: str):
    """The step with a collective launched right after each layer's MoE finalize (SYNTHETIC: a tensor-
    parallel all-reduce of the expert output, zero long, on the finalize's stream)."""
    out = []
    for k in step:
        out.append(k)
        if structure.class_of_name(k.name) == "moe_finalize":
            out.append(msgspec.structs.replace(k, name=name, start_us=k.start_us + k.dur_us, dur_us=0.0))
    return out


def test_a_look_alike_chain_names_each_collective_by_its_own_name(step):
    """An all-reduce and a reduce-scatter are one class, so chains that differ only there share a
    layout (and the plan's slots where the names agree); each is still read as its own collective."""
    alone, first, shared, made = _after(_with_collective(step, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),
                                        _with_collective(step, "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL"))
    assert made == 0  # the layout came from the cache
    assert shared == alone
    def roles(read):  # of the collectives inside layers (the last layer's comes after the final norm)
        return [s[5] for s in read[0] if s[4].startswith("ncclDevKernel") and s[1] >= 0]

    assert roles(first) == ["all_reduce"] * 47
    assert roles(shared) == ["reduce_scatter"] * 47
