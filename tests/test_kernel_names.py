"""Family and readable name on real kernel names (from shared/traces/real) and seed-style names."""
from pathlib import Path

import pytest

from analysis.ingest.kernel_names import kernel_family, readable_name, split_signature, unmangle_prefix
from analysis.ingest.trace_loader import load_trace
from conftest import real_trace

QWEN_B300 = "nvidia/sglang_qwen3-30b-a3b_b300/1782799835.6885648-TP-0-DECODE.trace.json.gz"
DS_TRAIN = "nvidia/deepseek-v3_train_h800/train.json"
GPT_OSS = "nvidia/vllm_gpt-oss-120b_b200_eager/eager_trace.json.gz"
MI300 = "amd/sglang_qwen3-8b_mi300x_decode/sglang_Qwen3-8B_decode.json.gz"


def _names(rel):
    return {k.name for k in load_trace(real_trace(rel)).kernels}


def test_every_real_nvidia_kernel_gets_a_known_family_and_a_short_name():
    names = _names(QWEN_B300) | _names(DS_TRAIN) | _names(GPT_OSS)
    unknown = sorted(n for n in names if kernel_family(n) == "other")
    assert unknown == []
    for name in names:
        short = readable_name(name)
        assert 0 < len(short) <= 80
        assert not short.startswith("void ")


@pytest.mark.parametrize("path,needle,family,readable", [
    (QWEN_B300, "nvjet_sm103_tst_32x64_64x16_4x1_v_bz_splitK_TNN", "cuBLAS", "nvjet_sm103_tst_32x64_64x16_4x1_v_bz_splitK_TNN"),
    (QWEN_B300, "cublasLt::splitKreduce_kernel", "cuBLAS", "splitKreduce_kernel"),
    (QWEN_B300, "fmhaSm100fKernel_QkvBfloat16OBfloat16H128PagedKvCausalP64MultiCtas", "TRT-LLM MLA/FMHA", None),
    (QWEN_B300, "flashinfernormkernelsfused_add_rmsnorm", "FlashInfer", "FusedAddRMSNormKernel (CuTe DSL)"),
    (QWEN_B300, "routingIndicesDynBlockKernel", "TRT-LLM gen", "routingIndicesDynBlockKernel"),
    (QWEN_B300, "fused_qknorm_warp", "sgl-kernel", "fused_qknorm_warp (128l, true, bf16)"),
    (DS_TRAIN, "dpsk::ep::internode::combine<", "DeepEP", "internode::combine (false, 8, bf16, 8, 2, 16, 24)"),
    (DS_TRAIN, "dpsk::ep::internode::dispatch<false, 8, true, 8>", "DeepEP", "internode::dispatch (false, 8, true, 8)"),
    (DS_TRAIN, "dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>", "DeepSeek internal", "fp8_ptp128c::GemmKernel"),
    (DS_TRAIN, "flash::FlashAttnBwd<", "FlashAttention", "FlashAttnBwd"),
    (DS_TRAIN, "sm90_xmma_gemm_bf16bf16", "cuBLAS", None),
    (DS_TRAIN, "_copy_tensor_kernel", "Triton", "_copy_tensor_kernel"),
    (DS_TRAIN, "layer_norm::ln_fwd_kernel", "Apex/TE layer_norm", "ln_fwd_kernel"),
    (DS_TRAIN, "DistributionNormal", "ATen", "distribution_elementwise_grid_stride_kernel"),
    (GPT_OSS, "ncclDevKernel_AllGather_RING_LL", "NCCL", "ncclDevKernel_AllGather_RING_LL"),
    (GPT_OSS, "multimem_all_reduce_kernel", "PyTorch symmetric memory", "multimem_all_reduce_kernel (BFloat16, 16)"),
    (GPT_OSS, "triton_poi_fused_add", "Triton", None),
    (GPT_OSS, "vllm::fused_add_rms_norm_kernel", "vLLM", "fused_add_rms_norm_kernel (BFloat16, 8)"),
    (MI300, "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x32x64", "hipBLASLt/Tensile", "Tensile GEMM (MT256x32x64)"),
    (MI300, "_ZN5aiter24add_rmsnorm_quant_kernel", "AITER", "add_rmsnorm_quant_kernel"),
    (MI300, "create_flashinfer_kv_indices_triton", "Triton", "create_flashinfer_kv_indices_triton"),
])
def test_real_names(path, needle, family, readable):
    (name,) = sorted(n for n in _names(path) if needle in n)[:1]
    assert kernel_family(name) == family
    if readable is not None:
        assert readable_name(name) == readable


def test_aten_elementwise_names_show_functor_and_dtype():
    names = _names(QWEN_B300) | _names(MI300)
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<long>, std::array<char*, 1ul> >(int, at::native::FillFunctor<long>, std::array<char*, 1ul>)"
    assert readable_name(fill) == "vectorized_elementwise_kernel (FillFunctor<long>)"
    copies = [n for n in names if "unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda" in n and "lambda(long)" in n]
    assert copies and readable_name(copies[0]) == "unrolled_elementwise_kernel (direct_copy, long)"


def test_seed_style_signatures():
    gemv = ("std::enable_if<!T7, void>::type internal::gemvx::kernel<int, int, __nv_bfloat16, __nv_bfloat16, "
            "__nv_bfloat16, float, (bool)0, (bool)1, (bool)1, (bool)0, (int)7, (bool)0, cublasGemvParamsEx<int, "
            "cublasGemvTensorStridedBatched<const __nv_bfloat16>>>(T13)")
    assert split_signature(gemv)[0] == "internal::gemvx::kernel"
    assert kernel_family(gemv) == "cuBLAS"
    assert readable_name(gemv) == "gemvx::kernel"
    silu = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::<unnamed>::silu_kernel(at::TensorIteratorBase &)"
            "::[lambda() (instance 1)]::operator ()() const::[lambda() (instance 6)]::operator ()() const::"
            "[lambda(c10::BFloat16) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)")
    assert kernel_family(silu) == "ATen"
    assert readable_name(silu) == "vectorized_elementwise_kernel (silu_kernel, BFloat16)"
    fa3 = "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<int, float>>>(T1::Params)"
    assert kernel_family(fa3) == "FlashAttention"
    assert readable_name(fa3) == "FlashAttnFwdSm90 (int, float)"
    assert kernel_family("void deep_gemm::sm90_fp8_gemm_1d2d_impl<0u, 4096u>(float*)") == "DeepGEMM"
    assert kernel_family("void deep_ep::internode_ll::dispatch<false, 3>(void*)") == "DeepEP"
    assert readable_name("void deep_ep::internode_ll::dispatch<false, 3>(void*)") == "internode_ll::dispatch (false, 3)"
    assert kernel_family("void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64>>(Params)") == "FlashMLA"
    assert kernel_family("aten::mm") == "ATen CPU op"
    assert kernel_family("totally_unknown::thing<int>(int)") == "other"


def test_unmangle_prefix():
    assert unmangle_prefix("_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16E") == "sgl_hip::activation::act_and_mul_kernel"
    assert unmangle_prefix("plain_name") == "plain_name"


def test_mangled_cutlass3_grouped_gemm_reads_as_grouped_gemmuniversal():
    """The experts' GEMM of the H200 demo_gpu trace: CUPTI left it mangled (two nested wrappers)."""
    import gzip
    import json

    trace = Path(__file__).parent / "data" / "embedded-h200-demo_gpu-TP-0-DECODE.trace.json.gz"
    names = {e["name"] for e in json.load(gzip.open(trace))["traceEvents"]
             if e.get("cat") == "kernel" and "GroupProblemShape" in e["name"]}
    assert names and all(n.startswith("_ZN7cutlass13device_kernel") for n in names)
    assert {readable_name(n) for n in names} == {"GemmUniversal (grouped)"}
    assert {kernel_family(n) for n in names} == {"CUTLASS"}


def test_sglangs_custom_all_reduce_is_sgl_kernel_and_vllms_is_vllm():
    """The two custom all-reduce kernels share a name and differ by namespace: SGLang's (recorded on two
    H200 nodes, tests/data/sglang-real/ray-run) was filed under vLLM by the bare name."""
    trace = next((Path(__file__).parent / "data/sglang-real/ray-run/sglang_dsv3_4l_2x2_deepep-20261126-124934/traces")
                 .glob("*TP-0-EP-0-DECODE.trace.json.gz"))
    (name,) = sorted({k.name for k in load_trace(trace).kernels if "cross_device_reduce" in k.name})[:1]
    assert name.startswith("void sglang::cross_device_reduce") and kernel_family(name) == "sgl-kernel"
    assert kernel_family(name.replace("sglang::", "vllm::")) == "vLLM"
