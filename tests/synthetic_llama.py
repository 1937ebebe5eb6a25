"""SYNTHETIC dense Llama-class decode steps (one HIP-graph replay each), with known layer counts.

Why: a real MI300X trace of a Llama-3.1-8B-shaped model (tests/real_traces.yaml) puts some layers'
attention cores after the next layer's QKV projection in its kernel order, which once cost a layer
silently. These fixtures break the layer order the same way at chosen layers, and run cascade
attention (two core kernels per layer) with and without such a break, so the rule that counts
layers is tested where it can fail. Kernel names follow that trace (ROCm: aiter norms, hipBLASLt
GEMMs, vLLM's paged attention); durations are made up.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

STREAM = 3
NORM = "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib"
QKV = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x16x128_MI16x16x1_SN_LDSB1_qkv"
ROTARY = "void rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*)"
KV_WRITE = "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)::StoreKVCacheParams)"
CORE = "void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, 128>(int)"
CORE_REDUCE = "void paged_attention_ll4mi_reduce_kernel<__hip_bfloat16, __hip_bfloat16, 128, 128, 256, 8>(int)"
O_PROJ = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x512_MI16x16x1_SN_LDSB1_o"
GATE_UP = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT32x16x512_MI16x16x1_SN_LDSB1_gu"
ACT = "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_PS4_i"
DOWN = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x16x256_MI16x16x1_SN_LDSB1_down"
EMBEDDING = "void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::BFloat16, long, unsigned int, 2, 2, -2>(int)"
LM_HEAD = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT32x16x512_MI16x16x1_SN_LDSB1_lm_head"
ARGMAX = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4> >(int)"


def layer_kernels(cascade: bool = False) -> list[str]:
    """One decoder layer, input norm first; cascade attention runs two core kernels, then one merge."""
    cores = [CORE, CORE] if cascade else [CORE]
    return [NORM, QKV, ROTARY, KV_WRITE, *cores, CORE_REDUCE, O_PROJ, NORM, GATE_UP, ACT, DOWN]


def step_kernels(num_layers: int = 32, interleaved: tuple[int, ...] = (), cascade: bool = False) -> list[str]:
    """One step's kernels in order. For each layer k in `interleaved`, layer k's attention core
    kernel(s) come right before layer k+1's, after layer k+1's QKV projection, rotary and KV write."""
    layers = [layer_kernels(cascade) for _ in range(num_layers)]
    cores = 2 if cascade else 1
    for k in sorted(interleaved, reverse=True):
        if not 0 <= k < num_layers - 1:
            raise ValueError(f"layer {k} has no next layer to interleave with")
        at = layers[k].index(CORE)
        moved = layers[k][at:at + cores]
        del layers[k][at:at + cores]
        nxt = layers[k + 1].index(CORE)
        layers[k + 1][nxt:nxt] = moved
    return [EMBEDDING, *(name for layer in layers for name in layer), NORM, LM_HEAD, ARGMAX]


def write_trace(path: Path, steps: int = 2, **kwargs) -> list[str]:
    """A SYNTHETIC trace: each step one hipGraphLaunch replaying step_kernels(**kwargs) on one stream."""
    names = step_kernels(**kwargs)
    events = []
    t = 1000.0
    for step in range(steps):
        correlation = 100 + step
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "hipGraphLaunch", "pid": 1, "tid": 1,
                       "ts": t - 5.0, "dur": 3.0, "args": {"correlation": correlation}})
        for i, name in enumerate(names):
            dur = 4.0 + (i * 7) % 13
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": STREAM, "ts": t, "dur": dur,
                           "args": {"stream": STREAM, "correlation": correlation, "device": 0}})
            t += dur + 0.5
        t += 200.0
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "SYNTHETIC MI300X"}], "traceEvents": events}
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    return names
