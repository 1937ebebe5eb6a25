"""Record eager decode traces of transformers MoE models (random weights) with nn.Module ranges.

Why: the accuracy suite needs ground truth the analysis was never tuned on. Each trace is an eager
decode of a transformers MoE model built from a config object (nothing is downloaded), profiled with
stacks and module ranges, so every kernel (or, on the CPU, every operator) lies inside the
nn.Module ranges that name it. The analysis is judged by stripping those ranges and comparing.

The prefill and one warm-up decode step run outside the profiled window; only decode steps are
profiled. A step is either wrapped in `record_function("step[DECODE bs=N]")` (as the embedded
engine does) or left as a plain top-level model call (as a user's own script would record).

One trace:

    python benchmarks/accuracy/record_traces.py one --family deepseek_v3 --hidden 256 --layers 4 \
        --dense-layers 1 --experts 32 --top-k 4 --batch 4 --steps 3 --experts-impl grouped_mm \
        --name dsv3-cpu-example --out-dir OUT

A named corpus (the cases the bundled fixtures were recorded with), slimmed into OUT:

    python benchmarks/accuracy/record_traces.py corpus cpu --out-dir tests/data/accuracy/cpu
    python benchmarks/accuracy/record_traces.py corpus gpu --out-dir tests/data/accuracy/h200  # one H200

Each trace gets a `<name>.meta.json` beside it (versions, device, shapes, arguments, layer counts),
from which `write_suite.py` builds the manifest. Needs only torch and transformers.
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository
from slim_trace import slim_trace_file  # noqa: E402

from harness.engines.embedded.cache_keyword import cache_keyword  # noqa: E402  (standard library only)

FAMILIES = ("deepseek_v3", "qwen3_moe", "mixtral", "qwen2_moe", "gpt_oss")


@dataclass
class TraceCase:
    """One recording: model shape, decode workload and profiler options."""

    name: str
    family: str = "deepseek_v3"
    hidden: int = 256
    layers: int = 4
    dense_layers: int = 1  # DeepseekV3 first_k_dense_replace; Qwen mlp_only_layers = the first N
    experts: int = 32
    top_k: int = 4
    expert_width: int = 64  # moe_intermediate_size (Mixtral / GPT-OSS: intermediate_size)
    dense_width: int = 512  # intermediate_size of dense MLPs
    heads: int = 8
    kv_heads: int = 8
    vocab: int = 1024
    batch: int = 4
    prompt_len: int = 16
    steps: int = 3
    device: str = "cpu"
    dtype: str = "float32"
    experts_impl: str = "grouped_mm"  # eager (per-expert loop) | grouped_mm | batched_mm
    attn_impl: str = "sdpa"  # sdpa | eager (GPT-OSS supports eager only)
    step_annotation: bool = True
    threads: int = 1
    seed: int = 0
    wide: bool = False  # DeepseekV3 at DeepSeek-V3's own widths (hidden 7168, MLA 1536/512, 128 heads)
    extra: dict[str, Any] = field(default_factory=dict)  # further config keyword arguments


def _dense_layer_list(case: TraceCase) -> list[int]:
    return list(range(case.dense_layers))


def build_config(case: TraceCase):
    """The transformers config of `case` (random weights come from it; nothing is downloaded)."""
    import transformers

    common = dict(
        use_cache=True,
        experts_implementation=case.experts_impl,
        attn_implementation=case.attn_impl,
    )
    if case.family == "deepseek_v3":
        if case.wide:
            shape = dict(
                vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
                num_attention_heads=128, num_key_value_heads=128, q_lora_rank=1536, kv_lora_rank=512,
                qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_group=8, topk_group=4,
            )
        else:
            shape = dict(
                vocab_size=case.vocab, hidden_size=case.hidden, intermediate_size=case.dense_width,
                moe_intermediate_size=case.expert_width, num_attention_heads=case.heads,
                num_key_value_heads=case.heads, q_lora_rank=max(32, case.hidden * 3 // 8),
                kv_lora_rank=max(32, case.hidden // 4), qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
                n_group=min(4, case.experts // case.top_k) or 1, topk_group=min(2, max(1, case.experts // case.top_k // 2)),
            )
        shape.update(
            num_hidden_layers=case.layers, first_k_dense_replace=case.dense_layers, n_routed_experts=case.experts,
            n_shared_experts=1, num_experts_per_tok=case.top_k, max_position_embeddings=4096, num_mtp_layers=0,
        )
        cls = transformers.DeepseekV3Config
    elif case.family in ("qwen3_moe", "qwen2_moe"):
        shape = dict(
            vocab_size=case.vocab, hidden_size=case.hidden, intermediate_size=case.dense_width,
            moe_intermediate_size=case.expert_width, num_hidden_layers=case.layers,
            num_attention_heads=case.heads, num_key_value_heads=case.kv_heads, num_experts=case.experts,
            num_experts_per_tok=case.top_k, decoder_sparse_step=1, mlp_only_layers=_dense_layer_list(case),
            max_position_embeddings=4096,
        )
        if case.family == "qwen3_moe":
            shape["head_dim"] = case.hidden // case.heads
            cls = transformers.Qwen3MoeConfig
        else:
            shape["shared_expert_intermediate_size"] = case.expert_width * 2
            cls = transformers.Qwen2MoeConfig
    elif case.family == "mixtral":
        shape = dict(
            vocab_size=case.vocab, hidden_size=case.hidden, intermediate_size=case.expert_width,
            num_hidden_layers=case.layers, num_attention_heads=case.heads, num_key_value_heads=case.kv_heads,
            num_local_experts=case.experts, num_experts_per_tok=case.top_k, max_position_embeddings=4096,
            sliding_window=None,
        )
        cls = transformers.MixtralConfig
    elif case.family == "gpt_oss":
        shape = dict(
            vocab_size=case.vocab, hidden_size=case.hidden, intermediate_size=case.expert_width,
            num_hidden_layers=case.layers, num_attention_heads=case.heads, num_key_value_heads=case.kv_heads,
            head_dim=case.hidden // case.heads, num_local_experts=case.experts, num_experts_per_tok=case.top_k,
            sliding_window=8, max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
        )
        cls = transformers.GptOssConfig
    else:
        raise ValueError(f"unknown family {case.family!r}; one of {FAMILIES}")
    if case.family in ("mixtral", "gpt_oss") and case.dense_layers:
        raise ValueError(f"{case.family} has no dense layers; use --dense-layers 0")
    shape.update(case.extra)
    return cls(**shape, **common)


def model_class(family: str):
    import transformers

    return {
        "deepseek_v3": transformers.DeepseekV3ForCausalLM,
        "qwen3_moe": transformers.Qwen3MoeForCausalLM,
        "mixtral": transformers.MixtralForCausalLM,
        "qwen2_moe": transformers.Qwen2MoeForCausalLM,
        "gpt_oss": transformers.GptOssForCausalLM,
    }[family]


def layer_counts(case: TraceCase, model) -> dict[str, int]:
    """Total, dense and MoE decoder layers, read from the built model (not from the arguments)."""
    layers = model.model.layers
    moe = 0
    for layer in layers:
        mlp = getattr(layer, "mlp", None)
        if mlp is not None and hasattr(mlp, "experts"):
            moe += 1
    return {"layers_total": len(layers), "layers_dense": len(layers) - moe, "layers_moe": moe}


def _config_summary(config) -> dict[str, Any]:
    keys = (
        "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
        "first_k_dense_replace", "mlp_only_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
        "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts",
        "n_shared_experts", "num_experts", "num_local_experts", "num_experts_per_tok", "n_group", "topk_group",
        "shared_expert_intermediate_size", "layer_types", "sliding_window",
    )
    out = {}
    for key in keys:
        value = getattr(config, key, None)
        if value is not None:
            out[key] = value
    return out


def module_call_names(model, run_step) -> list[tuple[str, str]]:
    """(class name, qualified name) of every module call of one decode step, in call order.

    The profiler names a module range `Class_N`, N counting instances of Class in the order they are
    first called inside the profiled window; replaying that rule over this list maps each range name
    to the module's qualified name (e.g. Linear_3 -> model.layers.0.self_attn.q_b_proj).
    """
    import torch

    qualified = {id(m): name for name, m in model.named_modules()}
    calls: list[tuple[str, str]] = []

    def hook(module, args):
        calls.append((type(module).__name__, qualified.get(id(module), "?")))

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        run_step()
    finally:
        handle.remove()
    return calls


def profiler_module_names(calls: list[tuple[str, str]]) -> tuple[list[str], dict[str, str]]:
    """The profiler's `Class_N` name of each call, and the map from those names to qualified names."""
    per_class: dict[str, int] = {}
    by_qualified: dict[str, str] = {}
    sequence = []
    for cls, name in calls:
        if name not in by_qualified:
            by_qualified[name] = f"{cls}_{per_class.get(cls, 0)}"
            per_class[cls] = per_class.get(cls, 0) + 1
        sequence.append(by_qualified[name])
    return sequence, {v: k for k, v in by_qualified.items()}


def first_seen_module_ranges(trace_path: str) -> list[str]:
    """Distinct nn.Module range names of a trace in order of first start (parents first)."""
    from slim_trace import MODULE_PREFIX, read_trace

    ranges = sorted(
        (e["ts"], -e.get("dur", 0), e["name"][len(MODULE_PREFIX):]) for e in read_trace(trace_path)["traceEvents"]
        if e.get("cat") == "python_function" and str(e.get("name", "")).startswith(MODULE_PREFIX)
    )
    return list(dict.fromkeys(name for _, _, name in ranges))


def loader_counts(path: str) -> dict[str, int] | None:
    """What the project's loader sees in a trace, or None where the project is not importable."""
    try:
        from analysis.ingest.trace_loader import load_trace
    except ImportError:
        return None
    trace = load_trace(path)
    return {
        "kernels": len(trace.kernels),
        "module_ranges": len(trace.module_ranges),
        "cpu_annotations": len(trace.cpu_annotations),
        "gpu_annotations": len(trace.gpu_annotations),
        "launches": len(trace.launches),
    }


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def export_slim(prof, out_dir: str, file_name: str, keep_raw_as: str | None = None) -> dict[str, Any]:
    """The profiler's trace, slimmed into out_dir/file_name, checked to hold what the loader sees in
    the raw one (else RuntimeError); with keep_raw_as, the raw trace gzipped beside it. Returns its sizes."""
    with tempfile.TemporaryDirectory(prefix="acc-trace-") as work:
        raw = os.path.join(work, "raw.json")
        prof.export_chrome_trace(raw)
        raw_bytes = os.path.getsize(raw)
        stats = slim_trace_file(raw, os.path.join(out_dir, file_name))
        counts = loader_counts(raw)
        counts_slim = loader_counts(os.path.join(out_dir, file_name))
        if counts != counts_slim:
            raise RuntimeError(f"slimming changed what the loader sees: raw {counts}, slim {counts_slim}")
        if keep_raw_as:
            with open(raw, "rb") as src, gzip.open(os.path.join(out_dir, keep_raw_as), "wb") as dst:
                shutil.copyfileobj(src, dst)
    return {"raw_json_bytes": raw_bytes, "bytes": stats["bytes_out"], "raw_events": stats["events_in"],
            "slim_events": stats["events_out"], "loader_counts": counts}


def record_case(case: TraceCase, out_dir: str, keep_raw: bool = False, command: str | None = None) -> dict[str, Any]:
    """Build, prefill, warm up, profile `case.steps` decode steps; write the slimmed trace and its meta."""
    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.manual_seed(case.seed)
    if case.threads:
        torch.set_num_threads(case.threads)
    device = torch.device(case.device)
    dtype = getattr(torch, case.dtype)
    config = build_config(case)
    started = time.perf_counter()
    previous_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with device:
            model = model_class(case.family)(config).eval()
    finally:
        torch.set_default_dtype(previous_dtype)
    build_s = time.perf_counter() - started
    counts = layer_counts(case, model)
    generator = torch.Generator().manual_seed(case.seed)
    prompts = torch.randint(0, config.vocab_size, (case.batch, case.prompt_len), generator=generator).to(device)

    with torch.inference_mode():
        cache = transformers.DynamicCache(config=config)
        with_cache = {cache_keyword(model.forward): cache}  # past_key_values before transformers 5.24
        out = model(input_ids=prompts, use_cache=True, **with_cache)
        tokens = out.logits[:, -1].argmax(-1, keepdim=True)
        out = model(input_ids=tokens, use_cache=True, **with_cache)  # warm-up decode step
        tokens = out.logits[:, -1].argmax(-1, keepdim=True)
        _sync(device)

        activities = [ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        step_ms: list[float] = []
        with profile(activities=activities, record_shapes=False, with_stack=True, with_modules=True) as prof:
            for _ in range(case.steps):
                t0 = time.perf_counter()
                scope = (
                    record_function(f"step[DECODE bs={case.batch}]") if case.step_annotation
                    else contextlib.nullcontext()
                )
                with scope:
                    out = model(input_ids=tokens, use_cache=True, **with_cache)
                    tokens = out.logits[:, -1].argmax(-1, keepdim=True)
                _sync(device)
                step_ms.append((time.perf_counter() - t0) * 1e3)

        def one_more_step():
            model(input_ids=tokens, use_cache=True, **with_cache)

        calls = module_call_names(model, one_more_step)  # same call order as each profiled step

    os.makedirs(out_dir, exist_ok=True)
    file_name = f"{case.name}-TP-0-DECODE.trace.json.gz"
    exported = export_slim(prof, out_dir, file_name, keep_raw_as=f"{case.name}.raw.json.gz" if keep_raw else None)

    call_sequence, module_names = profiler_module_names(calls)
    # Routing changes between steps (a per-expert loop calls act_fn once per hit expert), so compare
    # the order in which names first appear, which is what the numbering follows.
    names_match = first_seen_module_ranges(os.path.join(out_dir, file_name)) == list(dict.fromkeys(call_sequence))
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model_name()
    meta = {
        "file": file_name,
        "name": case.name,
        "family": case.family,
        "model_class": model_class(case.family).__name__,
        "recorded_with": {
            "script": "benchmarks/accuracy/record_traces.py",
            "command": command,
            "hardware": ("1x " + device_name) if device.type == "cuda" else f"CPU ({device_name}), {case.threads} thread(s)",
            "device": device.type,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
            "cuda": torch.version.cuda if device.type == "cuda" else None,
        },
        "case": asdict(case),
        "config": _config_summary(config),
        "steps": case.steps,
        "batch_size": case.batch,
        "step_annotation": case.step_annotation,
        "experts_implementation": model.config._experts_implementation,
        "attention_implementation": model.config._attn_implementation,
        **counts,
        "module_names_verified": names_match,  # the trace's ranges follow the replayed call order
        "module_names": module_names,
        "step_ms": [round(ms, 3) for ms in step_ms],
        "build_s": round(build_s, 1),
        "loader_counts": exported["loader_counts"],  # from the unslimmed trace (None: project not importable there)
        "raw_json_bytes": exported["raw_json_bytes"],
        "slim_events": exported["slim_events"],
        "raw_events": exported["raw_events"],
        "bytes": exported["bytes"],
    }
    with open(os.path.join(out_dir, f"{case.name}.meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
    del model, cache
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return meta


def _cpu(name: str, **kw) -> TraceCase:
    return TraceCase(name=name, device="cpu", dtype="float32", **kw)


def _gpu(name: str, **kw) -> TraceCase:
    kw.setdefault("steps", 2)
    return TraceCase(name=name, device="cuda", dtype="bfloat16", threads=0, **kw)


# The bundled corpus. Names: family-device-shape-experts-batch-experts_impl-attn[-noann].
CORPUS: dict[str, list[TraceCase]] = {
    "cpu": [
        _cpu("dsv3-cpu-l4d1-e32k4-bs4-grouped-sdpa", hidden=256, layers=4, dense_layers=1, experts=32, top_k=4, batch=4),
        _cpu("dsv3-cpu-l4d1-e32k4-bs4-loop-sdpa-noann", hidden=256, layers=4, dense_layers=1, experts=32, top_k=4,
             batch=4, experts_impl="eager", step_annotation=False),
        _cpu("dsv3-cpu-l6d2-e16k2-bs1-grouped-sdpa-noann", hidden=128, layers=6, dense_layers=2, experts=16, top_k=2,
             batch=1, expert_width=32, dense_width=256, heads=4, step_annotation=False),
        _cpu("qwen3moe-cpu-l4d0-e16k4-bs4-grouped-sdpa", family="qwen3_moe", hidden=128, layers=4, dense_layers=0,
             experts=16, top_k=4, batch=4, expert_width=64, heads=4, kv_heads=2),
        _cpu("mixtral-cpu-l3-e8k2-bs4-loop-sdpa-noann", family="mixtral", hidden=128, layers=3, dense_layers=0,
             experts=8, top_k=2, batch=4, expert_width=128, heads=4, kv_heads=2, experts_impl="eager",
             step_annotation=False),
        _cpu("dsv3-cpu-l3d1-e64k8-bs16-grouped-sdpa", hidden=128, layers=3, dense_layers=1, experts=64, top_k=8,
             batch=16, expert_width=32, dense_width=256, heads=4, steps=2),
        _cpu("dsv3-cpu-l3d1-e8k2-bs16-loop-sdpa", hidden=128, layers=3, dense_layers=1, experts=8, top_k=2, batch=16,
             expert_width=32, dense_width=256, heads=4, experts_impl="eager", steps=2),
        _cpu("dsv3-cpu-l4d1-e32k4-bs1-grouped-eagerattn", hidden=256, layers=4, dense_layers=1, experts=32, top_k=4,
             batch=1, attn_impl="eager"),
        _cpu("dsv3-cpu-l6d2-e64k6-bs4-loop-sdpa", hidden=128, layers=6, dense_layers=2, experts=64, top_k=6, batch=4,
             expert_width=32, dense_width=256, heads=4, experts_impl="eager", steps=2),
        _cpu("qwen3moe-cpu-l4d1-e32k4-bs16-loop-sdpa-noann", family="qwen3_moe", hidden=128, layers=4, dense_layers=1,
             experts=32, top_k=4, batch=16, expert_width=64, heads=4, kv_heads=2, experts_impl="eager",
             step_annotation=False, steps=2),
        _cpu("qwen2moe-cpu-l3d0-e16k4-bs4-grouped-sdpa", family="qwen2_moe", hidden=128, layers=3, dense_layers=0,
             experts=16, top_k=4, batch=4, expert_width=64, heads=4, kv_heads=2),
        _cpu("gptoss-cpu-l4-e16k4-bs4-grouped-eagerattn-noann", family="gpt_oss", hidden=128, layers=4,
             dense_layers=0, experts=16, top_k=4, batch=4, expert_width=128, heads=4, kv_heads=2, attn_impl="eager",
             step_annotation=False, prompt_len=12),
        _cpu("mixtral-cpu-l4-e8k2-bs16-batched-sdpa", family="mixtral", hidden=128, layers=4, dense_layers=0,
             experts=8, top_k=2, batch=16, expert_width=128, heads=4, kv_heads=2, experts_impl="batched_mm", steps=2),
    ],
    # DeepseekV3 at V3 widths (hidden 7168, MLA 1536/512, 128 heads, expert width 2048), 4 layers (1 dense +
    # 3 MoE), 64 routed experts top-8: ~11 B parameters, fits one H200 in bfloat16; plus two small models.
    "gpu": [
        _gpu("dsv3wide-h200-l4d1-e64k8-bs8-grouped-sdpa", wide=True, layers=4, dense_layers=1, experts=64, top_k=8,
             batch=8, prompt_len=64),
        _gpu("dsv3wide-h200-l4d1-e64k8-bs32-grouped-sdpa-noann", wide=True, layers=4, dense_layers=1, experts=64,
             top_k=8, batch=32, prompt_len=64, step_annotation=False),
        _gpu("dsv3wide-h200-l4d1-e64k8-bs8-loop-sdpa-noann", wide=True, layers=4, dense_layers=1, experts=64,
             top_k=8, batch=8, prompt_len=64, experts_impl="eager", step_annotation=False),
        _gpu("dsv3wide-h200-l4d1-e64k8-bs32-loop-sdpa", wide=True, layers=4, dense_layers=1, experts=64, top_k=8,
             batch=32, prompt_len=64, experts_impl="eager"),
        _gpu("qwen3moe-h200-l4d0-e64k8-bs16-grouped-sdpa", family="qwen3_moe", hidden=2048, layers=4,
             dense_layers=0, experts=64, top_k=8, batch=16, expert_width=768, dense_width=6144, heads=32,
             kv_heads=4, vocab=32000, prompt_len=64),
        _gpu("mixtral-h200-l4-e8k2-bs16-loop-sdpa-noann", family="mixtral", hidden=4096, layers=4, dense_layers=0,
             experts=8, top_k=2, batch=16, expert_width=14336, heads=32, kv_heads=8, vocab=32000, prompt_len=64,
             experts_impl="eager", step_annotation=False),
    ],
}


def _release_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _add_case_args(parser: argparse.ArgumentParser) -> None:
    defaults = TraceCase(name="")
    parser.add_argument("--name", required=True, help="trace name (the file is NAME-TP-0-DECODE.trace.json.gz)")
    parser.add_argument("--family", choices=FAMILIES, default=defaults.family)
    for flag in ("hidden", "layers", "dense_layers", "experts", "top_k", "expert_width", "dense_width", "heads",
                 "kv_heads", "vocab", "batch", "prompt_len", "steps", "threads", "seed"):
        parser.add_argument("--" + flag.replace("_", "-"), type=int, default=getattr(defaults, flag))
    parser.add_argument("--device", default=defaults.device)
    parser.add_argument("--dtype", default=defaults.dtype)
    parser.add_argument("--experts-impl", default=defaults.experts_impl,
                        help="eager (per-expert loop), grouped_mm or batched_mm (transformers' integrations/moe.py)")
    parser.add_argument("--attn-impl", default=defaults.attn_impl)
    parser.add_argument("--no-step-annotation", dest="step_annotation", action="store_false",
                        help="plain top-level model calls, no record_function step ranges")
    parser.add_argument("--wide", action="store_true", help="DeepseekV3 at DeepSeek-V3's own widths")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("one", help="record one trace from command-line options")
    _add_case_args(one)
    corpus = sub.add_parser("corpus", help="record a named corpus (or some of its cases)")
    corpus.add_argument("corpus", choices=sorted(CORPUS))
    corpus.add_argument("--only", nargs="*", help="case names (default: all)")
    corpus.add_argument("--list", action="store_true", help="print the case names and exit")
    for p in (one, corpus):
        p.add_argument("--out-dir", required=True)
        p.add_argument("--keep-raw", action="store_true", help="also keep the unslimmed trace")
    args = parser.parse_args(argv)
    command = "python benchmarks/accuracy/record_traces.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    if args.cmd == "one":
        fields = {k: v for k, v in vars(args).items() if k in TraceCase.__dataclass_fields__}
        cases = [TraceCase(**fields)]
    else:
        cases = CORPUS[args.corpus]
        if args.list:
            print("\n".join(c.name for c in cases))
            return
        if args.only:
            unknown = set(args.only) - {c.name for c in cases}
            if unknown:
                raise SystemExit(f"unknown case(s): {sorted(unknown)}")
            cases = [c for c in cases if c.name in args.only]
    failures = []
    for case in cases:
        this_command = command if args.cmd == "one" else (
            f"python benchmarks/accuracy/record_traces.py corpus {args.corpus} --only {case.name} --out-dir OUT")
        try:
            meta = record_case(case, args.out_dir, keep_raw=args.keep_raw, command=this_command)
        except Exception as exc:  # one broken family must not lose the others' traces
            failures.append(case.name)
            print(f"FAILED {case.name}: {type(exc).__name__}: {exc}", flush=True)
            _release_memory()
            continue
        print(f"{meta['file']}: {meta['layers_total']} layers ({meta['layers_dense']} dense), "
              f"{meta['steps']} steps, step ms {meta['step_ms']}, {meta['raw_json_bytes']} raw -> "
              f"{meta['bytes']} bytes", flush=True)
    if failures:
        raise SystemExit(f"{len(failures)} case(s) failed: {failures}")


if __name__ == "__main__":
    main()
