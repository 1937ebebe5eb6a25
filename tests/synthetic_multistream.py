"""SYNTHETIC CUDA-graph decode steps whose layers hop streams, with every kernel's true layer and row.

What a captured graph does with a shared expert on a side stream (the recorded H100 trace in
tests/data/accuracy/h100 shows it): at each MoE layer's fork the shared experts run on one stream
while the router, the dispatch, the routed experts and the combine run on another, and after the
join the next layers carry on on whichever stream the graph gave the longer branch. Here the first
two layers run on stream A; layer 1's routed branch runs on stream B, where the attention of the
later layers follows; every shared expert runs on the stream the routed branch left. Each kernel's
layer, group and module are written down as it is emitted: the known answers.
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

STREAM_A, STREAM_B = 7, 13
NORM = "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, unsigned int)"
QKV = "nvjet_sm90_tst_192x8_64x8_2x1_v_bz_TNT"
ROTARY = "void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<false, 64u>(int)"
CORE = "void flashinfer::BatchDecodeWithPagedKVCacheKernel<128u, __nv_bfloat16>(int)"
O_PROJ = "nvjet_sm90_tst_128x8_64x12_2x1_v_bz_splitK_TNT"
GATE_UP = "nvjet_sm90_tst_256x8_64x6_4x1_v_bz_TNT"
ACT = "void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &silu>(__nv_bfloat16*, int)"
DOWN = "nvjet_sm90_tst_128x8_64x12_2x1_v_bz_TNT"
ROUTER = "void dsv3_router_gemm_kernel<__nv_bfloat16, 256, 7168, 128>(float*)"
TOPK = "void moe_fused_gate_kernel<float, 256, 8, 4>(void*)"
DISPATCH = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>) dispatch"
EXPERT_UP = "void deep_gemm::fp8_gemm_kernel<(deep_gemm::GemmType)2, 4096u>(float*) up"
EXPERT_ACT = "_silu_and_mul_post_quant_kernel"
EXPERT_DOWN = "void deep_gemm::fp8_gemm_kernel<(deep_gemm::GemmType)2, 7168u>(float*) down"
COMBINE = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>) combine"
SHARED_UP = "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT shared up"
SHARED_DOWN = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT shared down"
EMBEDDING = "void at::native::indexSelectSmallIndex<c10::BFloat16, long>(int)"
LM_HEAD = "nvjet_sm90_tst_384x8_64x4_2x1_v_bz_TNT lm_head"
SPANNING = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>) spanning"
SPANNING_STREAM = 99


@dataclass
class Truth:
    """Per step, each kernel's (name, stream, layer or -1, group, module), in emission order."""

    kernels: list[list[tuple[str, int, int, str, str]]] = field(default_factory=list)

    def busy_us(self, durations: dict[str, float], **match) -> float:
        """Total duration, over all steps, of the kernels whose truth fields equal `match`."""
        keys = ("name", "stream", "layer", "group", "module")
        return sum(durations[k[0]] for step in self.kernels for k in step
                   if all(k[keys.index(key)] == value for key, value in match.items()))


DURATIONS_US = {
    NORM: 3.0, QKV: 12.0, ROTARY: 2.0, CORE: 30.0, O_PROJ: 10.0, GATE_UP: 40.0, ACT: 2.5, DOWN: 20.0,
    ROUTER: 4.0, TOPK: 3.5, DISPATCH: 25.0, EXPERT_UP: 60.0, EXPERT_ACT: 3.0, EXPERT_DOWN: 35.0, COMBINE: 28.0,
    SHARED_UP: 8.0, SHARED_DOWN: 6.0, EMBEDDING: 2.0, LM_HEAD: 50.0,
}


class _Writer:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.clock: dict[int, float] = {}
        self.step: list[tuple[str, int, int, str, str]] = []

    def run(self, name: str, stream: int, layer: int, group: str, module: str, after: float | None = None) -> float:
        start = max(self.clock[stream], after if after is not None else 0.0)
        dur = DURATIONS_US[name]
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": start,
                            "dur": dur, "args": {"stream": stream, "correlation": self.correlation, "device": 0}})
        self.clock[stream] = start + dur + 0.6
        self.step.append((name, stream, layer, group, module))
        return start + dur


def write_trace(path: Path, steps: int = 2, layers: int = 4, dense: int = 1, hop_at: int = 1,
                streams: tuple[int, ...] = (STREAM_A, STREAM_B), carry_on: str = "routed",
                routed_delay_us: float = 1.5, shared_delay_us: float = 0.0, spanning: bool = False) -> Truth:
    """A SYNTHETIC trace of `steps` graph replays (one cudaGraphLaunch each); MoE layers from
    `dense` on. From layer `hop_at` on, each MoE layer's routed branch runs on the next stream of
    `streams` (two streams: stream B for good; more: a stream of its own per layer, as a graph with
    many branch streams runs it) and its shared experts on the stream the layer began on. After the
    join the next layer carries on on the routed branch's stream (`carry_on="routed"`) or on the
    shared experts' (`"shared"`). The routed branch starts `routed_delay_us` after the fork, the
    shared experts `shared_delay_us` after it (late enough, they outlast the routed branch).
    `spanning`: a collective on a stream of its own runs beside every layer of the step (from the
    first layer's attention to the last layer's end); its truth is the communication row of layer 0."""
    w = _Writer()
    w.clock = {stream: 1000.0 for stream in streams}
    truth = Truth()
    for step in range(steps):
        w.correlation = 500 + step
        w.step = []
        now = max(w.clock.values()) + 100.0
        w.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1,
                         "ts": now - 20.0, "dur": 5.0, "args": {"correlation": w.correlation}})
        main, turn = streams[0], 0
        t = w.run(EMBEDDING, main, -1, "other", "embedding / input prep", after=now)
        for layer in range(layers):
            moe = layer >= dense
            t = w.run(NORM, main, layer, "attention", "input_layernorm", after=t)
            t = w.run(QKV, main, layer, "attention", "qkv_proj", after=t)
            t = w.run(ROTARY, main, layer, "attention", "rotary_emb", after=t)
            t = w.run(CORE, main, layer, "attention", "attn_core", after=t)
            t = w.run(O_PROJ, main, layer, "attention", "o_proj", after=t)
            t = w.run(NORM, main, layer, "gate" if moe else "mlp", "post_attention_layernorm", after=t)
            if not moe:
                t = w.run(GATE_UP, main, layer, "mlp", "gate_up_proj", after=t)
                t = w.run(ACT, main, layer, "mlp", "act", after=t)
                t = w.run(DOWN, main, layer, "mlp", "down_proj", after=t)
                continue
            # the fork: routed branch on `routed`, shared experts on the other stream
            if layer >= hop_at:  # the graph's branch streams in turn
                routed = streams[1 + turn % (len(streams) - 1)]
                side = main if main != routed else streams[0]
                turn += 1
            else:
                routed, side = main, next(x for x in streams if x != main)
            fork = t
            s = w.run(SHARED_UP, side, layer, "combine/share overlap", "shared_experts", after=fork + shared_delay_us)
            s = w.run(ACT, side, layer, "combine/share overlap", "shared_experts", after=s)
            s = w.run(SHARED_DOWN, side, layer, "combine/share overlap", "shared_experts", after=s)
            r = w.run(ROUTER, routed, layer, "gate", "router", after=fork + routed_delay_us)
            r = w.run(TOPK, routed, layer, "gate", "topk", after=r)
            r = w.run(DISPATCH, routed, layer, "moe", "dispatch", after=r)
            r = w.run(EXPERT_UP, routed, layer, "moe", "up_gate_gemm", after=r)
            r = w.run(EXPERT_ACT, routed, layer, "moe", "silu", after=r)
            r = w.run(EXPERT_DOWN, routed, layer, "moe", "down_gemm", after=r)
            r = w.run(COMBINE, routed, layer, "moe", "combine", after=r)
            t = max(r, s)  # the join
            main = routed if carry_on == "routed" else side
        if spanning:  # written after the layers, so its duration reaches to their end
            begin = w.step[1]  # the first layer's first kernel (after the embedding)
            start = next(e["ts"] for e in w.events if e["name"] == begin[0] and e["tid"] == begin[1]
                         and e["args"]["correlation"] == w.correlation) + 1.0
            w.events.append({"ph": "X", "cat": "kernel", "name": SPANNING, "pid": 0, "tid": SPANNING_STREAM,
                             "ts": start, "dur": t - start - 1.0,
                             "args": {"stream": SPANNING_STREAM, "correlation": w.correlation, "device": 0}})
            w.step.append((SPANNING, SPANNING_STREAM, 0, "communication", "all_reduce"))
        t = w.run(NORM, streams[0], -1, "other", "lm_head / sampling", after=t)
        w.run(LM_HEAD, streams[0], -1, "other", "lm_head / sampling", after=t)
        truth.kernels.append(w.step)
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "SYNTHETIC H100"}], "traceEvents": w.events}
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    return truth
