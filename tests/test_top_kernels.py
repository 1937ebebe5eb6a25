"""Top kernels on a real trace and on KernelRows with known answers."""
import pytest

from analysis.attribution.rows import KernelRow
from analysis.report.top_kernels import samples_from_rows, samples_from_traces, top_kernels
from analysis.ingest.trace_loader import load_trace
from conftest import real_trace

QWEN_B300 = "nvidia/sglang_qwen3-30b-a3b_b300/1782799835.6885648-TP-0-DECODE.trace.json.gz"


def test_top_kernels_of_real_qwen3_moe_decode_trace():
    trace = load_trace(real_trace(QWEN_B300))
    result = top_kernels(samples_from_traces([trace]), top_n=5)
    assert list(result.top) == ["decode"]
    top = result.top["decode"]
    total = sum(k.dur_us for k in trace.kernels)
    assert result.stage_total_us["decode"] == pytest.approx(total)
    # the MoE swiGLU batched GEMM (48 layers, one launch each) leads, as the raw trace shows
    first = top[0]
    assert first.name.startswith("bmm_Bfloat16_Bfloat16Bfloat16_Fp32_t128x8x128u2_s6")
    assert first.count == 48 and first.family == "TRT-LLM gen"
    durs = [k.dur_us for k in trace.kernels if k.name == first.name]
    assert first.total_us == pytest.approx(sum(durs))
    assert first.share_pct == pytest.approx(100 * sum(durs) / total)
    assert [k.rank for k in top] == [1, 2, 3, 4, 5]
    assert all(a.total_us >= b.total_us for a, b in zip(top, top[1:]))
    assert sum(f.share_pct for f in result.families["decode"]) == pytest.approx(100.0)


def _row(stage, name, dur, step=0):
    return KernelRow(run="r", rank="TP0", step=step, stage=stage, section="layer", layer=0, micro_batch=0,
                     group="g", module="m", kernel="k", kernel_name=name, stream=7, start_us=0.0,
                     busy_us=dur, exposed_us=dur, source="signature")


def test_top_kernels_per_stage_with_known_answers():
    rows = [_row("decode", "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<long>>(int)", d, step=s)
            for s, d in ((0, 1.0), (0, 3.0), (1, 2.0))]
    rows += [_row("decode", "nvjet_tst_64x8_64x16_2x1_v_bz_TNT", 10.0, step=1)]
    rows += [_row("extend", "nvjet_tst_256x128_64x4_2x1_v_bz_TNN", 50.0)]
    result = top_kernels(samples_from_rows(rows))
    decode = result.top["decode"]
    assert [k.readable for k in decode] == ["nvjet_tst_64x8_64x16_2x1_v_bz_TNT", "vectorized_elementwise_kernel (FillFunctor<long>)"]
    fill = decode[1]
    assert (fill.count, fill.total_us, fill.mean_us, fill.median_us) == (3, 6.0, 2.0, 2.0)
    assert fill.share_pct == pytest.approx(100 * 6 / 16)
    assert fill.per_step == pytest.approx(1.5)  # 3 launches over 2 steps
    assert fill.family == "ATen"
    assert result.top["extend"][0].share_pct == pytest.approx(100.0)


def test_variants_with_the_same_readable_name_stay_apart():
    rows = [_row("decode", "void deep_ep::internode_ll::combine<7168>(void*)", 5.0),
            _row("decode", "void deep_ep::internode_ll::combine<4096>(void*)", 4.0)]
    top = top_kernels(samples_from_rows(rows)).top["decode"]
    assert [k.readable for k in top] == ["internode_ll::combine (7168)", "internode_ll::combine (4096)"]
    rows = [_row("decode", "void foo::bar<" + "x, " * 20 + "y>(int)", 5.0),
            _row("decode", "void foo::bar<" + "z, " * 20 + "y>(int)", 4.0)]
    top = top_kernels(samples_from_rows(rows)).top["decode"]
    assert [k.readable for k in top] == ["bar", "bar #2"]
