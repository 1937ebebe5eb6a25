"""Record a DeepSeek-shaped expert-parallel decode on several GPUs: eager (with module ranges) and CUDA graph.

Why: real DeepSeek-V3 serving splits the routed experts across GPUs and moves tokens with an
all-to-all; the analysis must attribute dispatch, expert GEMMs and combine on such traces, also
when they are CUDA-graph replays with no module ranges. This builds that stack from transformers'
DeepseekV3 pieces (MLA attention, RMSNorm, MLP, top-k router) plus explicit nn.Modules for the
expert-parallel path, so an eager trace names every kernel, and the graph trace of the same model
and batch has the same kernels (its ground truth is that eager trace).

Per MoE layer, on every rank: router + grouped top-k (DeepseekV3TopkRouter) -> AllToAllDispatch
(tokens laid out in fixed-capacity per-expert slots, `all_to_all_single`) -> LocalExperts (`torch.bmm`
over [local_experts, capacity, hidden], SiLU-and-multiply, `torch.bmm` down) -> AllToAllCombine
(`all_to_all_single` back, weighted sum over top-k) + shared experts (DeepseekV3MLP) + residual.
Fixed shapes and no host synchronisation, so one decode step can be captured in a CUDA graph. The KV
cache is a static latent cache (index_copy_ at a position tensor); the prompt's positions are filled
with random latents instead of a prefill.

    python benchmarks/accuracy/record_ep_decode.py --world-size 2 --device cuda --preset v3 \
        --batch 8 32 --out-dir OUT
    python benchmarks/accuracy/record_ep_decode.py --world-size 2 --device cpu --preset tiny --out-dir OUT

One process per rank (torch.multiprocessing), NCCL on GPUs, gloo on the CPU (no graph there). NVLink
multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 are
set for every process).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import sys
import time
from typing import Any

NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(NO_MULTICAST_ENV)  # before torch / NCCL load, inherited by every spawned rank

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from record_traces import export_slim, first_seen_module_ranges, module_call_names, profiler_module_names  # noqa: E402
from torch import nn  # noqa: E402

from harness.engines.embedded.cache_keyword import cache_keyword  # noqa: E402  (standard library only)

# DeepSeek-V3's own widths; 4 layers (1 dense + 3 MoE), 64 routed experts, top-8 from 4 of 8 groups.
PRESETS: dict[str, dict[str, Any]] = {
    "v3": dict(
        vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
        num_attention_heads=128, num_key_value_heads=128, q_lora_rank=1536, kv_lora_rank=512,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, num_hidden_layers=4, first_k_dense_replace=1,
        n_routed_experts=64, num_experts_per_tok=8, n_group=8, topk_group=4, n_shared_experts=1,
    ),
    "tiny": dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, num_hidden_layers=4, first_k_dense_replace=1,
        n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
    ),
}


class StaticLatentCache:
    """MLA's compressed KV (latent and rotary key) in fixed-length buffers, written with index_copy_.

    Called by DeepseekV3Attention as `update(kv_nope, k_rot, layer_idx)`; returns the whole buffers, and
    the model's mask hides the positions not yet written, so shapes never change (graph-capturable).
    """

    def __init__(self, layers: int, batch: int, max_len: int, kv_lora_rank: int, rope_dim: int, device, dtype):
        self.latent = [torch.randn(batch, 1, max_len, kv_lora_rank, device=device, dtype=dtype) for _ in range(layers)]
        self.rope_key = [torch.randn(batch, 1, max_len, rope_dim, device=device, dtype=dtype) for _ in range(layers)]
        self.positions: torch.Tensor | None = None  # set by the model before each forward

    def update(self, kv_nope: torch.Tensor, k_rot: torch.Tensor, layer_idx: int, *args, **kwargs):
        self.latent[layer_idx].index_copy_(2, self.positions, kv_nope)
        self.rope_key[layer_idx].index_copy_(2, self.positions, k_rot)
        return self.latent[layer_idx], self.rope_key[layer_idx]


class AllToAllDispatch(nn.Module):
    """Send each (token, chosen expert) pair to the rank holding the expert, in fixed-capacity slots.

    Layout of the send buffer: [world, local_experts, capacity, hidden]; a pair's slot is its expert's
    slot block plus its order among this rank's pairs for that expert (a cumulative sum, no host sync).
    Capacity = tokens on this rank, so nothing is dropped.
    """

    def __init__(self, experts: int, world: int, group=None):
        super().__init__()
        self.experts = experts
        self.world = world
        self.local_experts = experts // world
        self.group = group

    def forward(self, hidden: torch.Tensor, topk_indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, top_k = topk_indices.shape
        capacity = tokens
        expert_ids = topk_indices.reshape(-1)
        one_hot = torch.zeros(tokens * top_k, self.experts, device=hidden.device, dtype=torch.int32)
        one_hot.scatter_(1, expert_ids.unsqueeze(1), 1)
        order = (one_hot.cumsum(0) * one_hot).sum(1) - 1  # rank of each pair among pairs for its expert
        slots = expert_ids * capacity + order  # expert e's block is [e * capacity, (e + 1) * capacity)
        send = hidden.new_zeros(self.experts * capacity, hidden.shape[-1])
        send.index_copy_(0, slots, hidden.unsqueeze(1).expand(-1, top_k, -1).reshape(-1, hidden.shape[-1]))
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        return recv.view(self.world, self.local_experts, capacity, hidden.shape[-1]), slots


class LocalExperts(nn.Module):
    """This rank's routed experts as batched GEMMs over their fixed-capacity slots."""

    def __init__(self, local_experts: int, hidden: int, width: int, act_fn: nn.Module):
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.randn(local_experts, hidden, 2 * width) * hidden ** -0.5)
        self.down_proj = nn.Parameter(torch.randn(local_experts, width, hidden) * width ** -0.5)
        self.act_fn = act_fn

    def forward(self, received: torch.Tensor) -> torch.Tensor:
        world, local_experts, capacity, hidden = received.shape
        x = received.transpose(0, 1).reshape(local_experts, world * capacity, hidden)
        gate, up = torch.bmm(x, self.gate_up_proj).chunk(2, dim=-1)
        y = torch.bmm(self.act_fn(gate) * up, self.down_proj)
        return y.view(local_experts, world, capacity, hidden).transpose(0, 1).contiguous()


class AllToAllCombine(nn.Module):
    """Return expert outputs to the tokens' ranks and sum them with the router weights."""

    def __init__(self, group=None):
        super().__init__()
        self.group = group

    def forward(self, expert_out: torch.Tensor, slots: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        hidden = expert_out.shape[-1]
        send = expert_out.reshape(-1, hidden)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        tokens, top_k = topk_weights.shape
        picked = recv.index_select(0, slots).view(tokens, top_k, hidden)
        return (picked * topk_weights.unsqueeze(-1).to(picked.dtype)).sum(dim=1)


class ExpertParallelMoE(nn.Module):
    """DeepSeek-V3 MoE block with its routed experts split across ranks."""

    def __init__(self, config, world: int):
        super().__init__()
        from transformers.activations import ACT2FN
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MLP, DeepseekV3TopkRouter

        self.gate = DeepseekV3TopkRouter(config)
        nn.init.normal_(self.gate.weight, std=config.hidden_size ** -0.5)
        self.dispatch = AllToAllDispatch(config.n_routed_experts, world)
        self.experts = LocalExperts(config.n_routed_experts // world, config.hidden_size,
                                    config.moe_intermediate_size, ACT2FN[config.hidden_act])
        self.combine = AllToAllCombine()
        self.shared_experts = DeepseekV3MLP(config, intermediate_size=config.moe_intermediate_size * config.n_shared_experts)
        self.side_stream: torch.cuda.Stream | None = None  # set: the shared experts overlap the routed path

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        shape = hidden_states.shape
        flat = hidden_states.reshape(-1, shape[-1])
        if self.side_stream is not None:
            # As SGLang's dual-stream MoE: the shared experts on a second stream, joined after combine.
            # Captured in a CUDA graph, the replay may run such branches on streams of the graph's own.
            self.side_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side_stream):
                shared = self.shared_experts(flat)
        _, topk_weights, topk_indices = self.gate(flat)
        received, slots = self.dispatch(flat, topk_indices)
        expert_out = self.experts(received)
        routed = self.combine(expert_out, slots, topk_weights)
        if self.side_stream is not None:
            torch.cuda.current_stream().wait_stream(self.side_stream)
            return (routed + shared).view(shape)
        return (routed + self.shared_experts(flat)).view(shape)


class ExpertParallelDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx: int, world: int):
        super().__init__()
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
            DeepseekV3Attention, DeepseekV3MLP, DeepseekV3RMSNorm)

        self.input_layernorm = DeepseekV3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.self_attn = DeepseekV3Attention(config, layer_idx)
        self.cache_keyword = cache_keyword(self.self_attn.forward)  # past_key_values before transformers 5.24
        self.post_attention_layernorm = DeepseekV3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = DeepseekV3MLP(config) if layer_idx < config.first_k_dense_replace else ExpertParallelMoE(config, world)

    def forward(self, hidden_states, position_embeddings, attention_mask, cache):
        attn_out, _ = self.self_attn(self.input_layernorm(hidden_states), position_embeddings=position_embeddings,
                                     attention_mask=attention_mask, **{self.cache_keyword: cache})
        hidden_states = hidden_states + attn_out
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class ExpertParallelDeepseekV3(nn.Module):
    """Embedding, DeepSeek-V3 decoder layers (dense first, then expert-parallel MoE), norm, LM head."""

    def __init__(self, config, world: int):
        super().__init__()
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RMSNorm, DeepseekV3RotaryEmbedding

        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.rotary_emb = DeepseekV3RotaryEmbedding(config)
        self.layers = nn.ModuleList(ExpertParallelDecoderLayer(config, i, world) for i in range(config.num_hidden_layers))
        self.norm = DeepseekV3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, cache: StaticLatentCache) -> torch.Tensor:
        """input_ids [batch, q]; positions [q] (the same for every sequence); returns next tokens [batch, 1]."""
        cache.positions = positions
        hidden = self.embed_tokens(input_ids)
        position_ids = positions.unsqueeze(0).expand(input_ids.shape[0], -1)
        position_embeddings = self.rotary_emb(hidden, position_ids)
        max_len = cache.latent[0].shape[2]
        key_pos = torch.arange(max_len, device=input_ids.device)
        mask = (key_pos.unsqueeze(0) <= positions.unsqueeze(1)).view(1, 1, positions.shape[0], max_len)
        for layer in self.layers:
            hidden = layer(hidden, position_embeddings, mask, cache)
        logits = self.lm_head(self.norm(hidden[:, -1:]))
        return logits.argmax(-1)


def build_config(preset: str):
    from transformers import DeepseekV3Config

    return DeepseekV3Config(**PRESETS[preset], max_position_embeddings=4096, num_mtp_layers=0,
                            attn_implementation="sdpa", use_cache=True)


def _profile_steps(run_step, steps: int, batch: int, on_gpu: bool):
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    step_ms = []
    with profile(activities=activities, record_shapes=False, with_stack=True, with_modules=True) as prof:
        for _ in range(steps):
            t0 = time.perf_counter()
            with record_function(f"step[DECODE bs={batch}]"):
                run_step()
            if on_gpu:
                torch.cuda.synchronize()
            step_ms.append(round((time.perf_counter() - t0) * 1e3, 3))
    return prof, step_ms


def run_rank(rank: int, args: argparse.Namespace, command: str) -> None:
    on_gpu = args.device == "cuda"
    os.environ.update(NO_MULTICAST_ENV)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    if on_gpu:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group("nccl", rank=rank, world_size=args.world_size, device_id=device,
                                timeout=datetime.timedelta(seconds=args.comm_timeout_s))
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
        dist.init_process_group("gloo", rank=rank, world_size=args.world_size)
    import transformers

    dtype = torch.bfloat16 if on_gpu else torch.float32
    config = build_config(args.preset)
    torch.manual_seed(args.seed)  # the same non-expert weights on every rank ...
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with device:
            model = ExpertParallelDeepseekV3(config, args.world_size).eval()
            torch.manual_seed(args.seed + 1 + rank)  # ... and each rank its own experts
            for layer in model.layers:
                if isinstance(layer.mlp, ExpertParallelMoE):
                    for p in layer.mlp.experts.parameters():
                        p.data.normal_(0.0, p.shape[1] ** -0.5)
    finally:
        torch.set_default_dtype(previous)
    if args.shared_stream and on_gpu:
        side = torch.cuda.Stream(device=device)
        for layer in model.layers:
            if isinstance(layer.mlp, ExpertParallelMoE):
                layer.mlp.side_stream = side
    name_base = (f"dsv3ep-{args.tag}-e{config.n_routed_experts}k{config.num_experts_per_tok}"
                 + ("-sidestream" if args.shared_stream and on_gpu else ""))
    world = args.world_size
    hardware = (f"{world}x {torch.cuda.get_device_name(device)}" if on_gpu else f"{world} CPU processes (gloo)")
    layers_moe = config.num_hidden_layers - config.first_k_dense_replace
    os.makedirs(args.out_dir, exist_ok=True)

    def write_meta(file_name: str, batch: int, graph: bool, ground_truth: str | None, export: dict, step_ms) -> None:
        meta = {
            "file": file_name, "name": file_name.split("-TP-")[0], "family": "deepseek_v3_ep",
            "model_class": "ExpertParallelDeepseekV3",
            "recorded_with": {
                "script": "benchmarks/accuracy/record_ep_decode.py", "command": command, "hardware": hardware,
                "device": device.type, "torch": torch.__version__, "transformers": transformers.__version__,
                "python": platform.python_version(), "cuda": torch.version.cuda if on_gpu else None,
                "backend": dist.get_backend(),
            },
            "case": {"preset": args.preset, "batch": batch, "dtype": str(dtype).replace("torch.", ""),
                     "max_len": args.max_len, "prompt_len": args.prompt_len, "capacity": batch},
            "config": {k: v for k, v in PRESETS[args.preset].items()},
            "rank": rank, "world_size": world, "local_experts": config.n_routed_experts // world,
            "steps": args.steps, "batch_size": batch, "step_annotation": True,
            "experts_implementation": "bmm over fixed-capacity slots, all_to_all_single dispatch / combine",
            "attention_implementation": "sdpa", "layers_total": config.num_hidden_layers,
            "layers_dense": config.first_k_dense_replace, "layers_moe": layers_moe,
            "module_ranges": not graph, "cuda_graph": graph, "ground_truth": ground_truth,
            "step_ms": step_ms, **export,
        }
        with open(os.path.join(args.out_dir, f"{meta['name']}-r{rank}.meta.json"), "w") as fh:
            json.dump(meta, fh, indent=1)

    # Every eager trace is written before any graph is captured, so a capture problem loses no ground truth.
    states: dict[int, tuple] = {}
    for batch in args.batch:
        torch.manual_seed(args.seed + 100 + rank)
        cache = StaticLatentCache(config.num_hidden_layers, batch, args.max_len, config.kv_lora_rank,
                                  config.qk_rope_head_dim, device, dtype)
        tokens = torch.randint(0, config.vocab_size, (batch, 1), device=device)
        position = torch.tensor([args.prompt_len], device=device)  # the prompt is already in the cache

        def eager_step(tokens=tokens, position=position, cache=cache):
            next_tokens = model(tokens, position, cache)
            tokens.copy_(next_tokens)
            position.add_(1)

        with torch.inference_mode():
            eager_step()  # warm-up: kernels chosen, communicators up
            if on_gpu:
                torch.cuda.synchronize()
            dist.barrier()
            prof, step_ms = _profile_steps(eager_step, args.steps, batch, on_gpu)
            eager_name = f"{name_base}-bs{batch}-eager-TP-{rank}-EP-{rank}-DECODE.trace.json.gz"
            export = export_slim(prof, args.out_dir, eager_name)
            # Map the profiler's Class_N range names to module names (a forward at the same position: it
            # rewrites the same cache slot and leaves tokens and position as they are).
            calls = module_call_names(model, lambda: model(tokens, position, cache))
            sequence, export["module_names"] = profiler_module_names(calls)
            export["module_names_verified"] = (
                first_seen_module_ranges(os.path.join(args.out_dir, eager_name)) == list(dict.fromkeys(sequence)))
            write_meta(eager_name, batch, False, None, export, step_ms)
            print(f"rank {rank}: {eager_name} step ms {step_ms}", flush=True)
        states[batch] = (eager_step, eager_name)

    for batch, (eager_step, eager_name) in states.items() if on_gpu and not args.no_graph else ():
        with torch.inference_mode():
            # Capture one decode step (its own token and position updates included), then replay it.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    eager_step()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            dist.barrier()
            graph = torch.cuda.CUDAGraph()
            # thread_local: calls from NCCL's watchdog thread during the capture must not invalidate it
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                eager_step()
            torch.cuda.synchronize()
            dist.barrier()
            graph.replay()  # one unprofiled replay
            torch.cuda.synchronize()
            dist.barrier()
            print(f"rank {rank}: bs {batch} graph captured and replayed", flush=True)
            prof, step_ms = _profile_steps(graph.replay, args.steps, batch, on_gpu)
            graph_name = f"{name_base}-bs{batch}-graph-TP-{rank}-EP-{rank}-DECODE.trace.json.gz"
            write_meta(graph_name, batch, True, eager_name, export_slim(prof, args.out_dir, graph_name), step_ms)
            print(f"rank {rank}: {graph_name} step ms {step_ms}", flush=True)
            del graph
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="v3")
    parser.add_argument("--batch", type=int, nargs="+", default=[8], help="sequences per rank (one trace set each)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--prompt-len", type=int, default=64, help="positions already in the KV cache")
    parser.add_argument("--max-len", type=int, default=96, help="static KV cache length")
    parser.add_argument("--tag", default=None, help="hardware tag in file names (default: h200x2 on GPU, cpu)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-graph", action="store_true", help="eager traces only")
    parser.add_argument("--shared-stream", action="store_true",
                        help="GPU: the shared experts on a side stream, overlapping dispatch, experts and combine")
    parser.add_argument("--comm-timeout-s", type=int, default=120, help="NCCL timeout: a hung collective fails")
    parser.add_argument("--port", type=int, default=29517)
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args(argv)
    args.tag = args.tag or ("h200x2" if args.device == "cuda" else "cpu")
    if args.prompt_len + 2 * args.steps + 4 > args.max_len:  # eager + replayed steps, 4 warm-up / capture steps
        parser.error("--max-len must exceed --prompt-len by twice the decode steps plus 4")
    if PRESETS[args.preset]["n_routed_experts"] % args.world_size:
        parser.error("the routed experts must split evenly across ranks")
    if args.device == "cuda" and torch.cuda.device_count() < args.world_size:
        raise SystemExit(f"{args.world_size} ranks need {args.world_size} GPUs; torch sees {torch.cuda.device_count()}")
    command = "python benchmarks/accuracy/record_ep_decode.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    import torch.multiprocessing as mp

    mp.spawn(run_rank, args=(args, command), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
