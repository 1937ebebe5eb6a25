"""The D4 table's SOL settings read off a scenario, so scenario runs get SOL columns unasked.

Only where the scenario says enough (docs/sol.md, "From a scenario"):
- model: analysis.model, else model.name, must have SOL shapes (analysis/data/models/<name>.yaml `shapes:`:
  deepseek-v3, and deepseek-v3-wide4 for the embedded wide-gpu preset); for the embedded engine the
  shapes must also equal the preset with the scenario's model overrides, else no SOL (the CPU demo's
  deepseek-v3-tiny has no shapes file and gets none);
- hardware: cluster.gpu_type, a built-in peaks file (h800, h100, h200, b200); the embedded engine's analysis
  (harness/engines/embedded/analyse.py) swaps in the GPU the engine reports when it names another one
  (hardware_for_device);
- parallelism (SGLang): with dp_attention, attention tp = tp / dp and dp = dp; without it dp must be 1
  and attention tp = tp; ep = ep;
- batch per rank = ceil(workload.batch_size / dp); KV length = input_len + warmup_steps (the cache when
  profiling can start; warm-up ends a few steps later at most);
- MTP: speculative.num_draft_tokens - 1 draft tokens (a verify pass checks num_draft_tokens per request);
- weights fp8 (DeepSeek-V3's released checkpoint) for SGLang, bf16 for the embedded engine in bfloat16;
  KV cache fp8 when extra_args sets --kv-cache-dtype fp8*, else bf16;
- MLA form: absorbed for SGLang, expanded for the embedded engine (transformers keeps a per-head K/V
  cache and adds residuals outside the norms; docs/sol.md).
"""
from __future__ import annotations

import math

from analysis.api import AnalysisError, check_input, list_builtins, sol_settings
from harness.scenario import EmbeddedEngine, Scenario, embedded_model_config


def _kv_dtype(extra_args: list[str]) -> str:
    for i, arg in enumerate(extra_args):
        value = arg.split("=", 1)[1] if arg.startswith("--kv-cache-dtype=") else (
            extra_args[i + 1] if arg == "--kv-cache-dtype" and i + 1 < len(extra_args) else None)
        if value is not None:
            return "fp8" if value.startswith("fp8") else "bf16"
    return "bf16"


def sol_settings_for(scenario: Scenario) -> tuple[object | None, str]:
    """(analysis's SolSettings, "") or (None, why the scenario gives no SOL columns)."""
    model = scenario.analysis.model or scenario.model.name
    try:
        check_input("sol_shapes", model)
    except AnalysisError:
        return None, f"model {model!r} has no SOL shapes (the SOL model covers deepseek-v3 and deepseek-v3-wide4)"
    gpu = (scenario.cluster.gpu_type or "").lower()
    known = list_builtins("hardware")
    if gpu not in known:
        return None, f"cluster.gpu_type {scenario.cluster.gpu_type!r} has no peaks file (known: {', '.join(known)})"
    engine, w = scenario.engine, scenario.workload
    engine_config = None
    if isinstance(engine, EmbeddedEngine):
        if engine.dtype != "bfloat16":
            return None, f"embedded engine dtype {engine.dtype} is neither fp8 nor bf16"
        engine_config = embedded_model_config(scenario)  # its shapes must be the model's (sol_settings checks)
        tp, dp, ep, draft, weights, kv, form = 1, 1, 1, 0, "bf16", "bf16", "expanded"
    else:
        if engine.dp > 1 and not engine.dp_attention:
            return None, "engine.dp > 1 without dp_attention (replicated engines) is not modelled"
        dp = engine.dp if engine.dp_attention else 1
        tp, ep = engine.tp // dp, engine.ep
        draft = engine.speculative.num_draft_tokens - 1 if engine.speculative else 0
        weights, kv, form = "fp8", _kv_dtype(engine.extra_args), "absorbed"
    try:
        return sol_settings(gpu, model, engine_config=engine_config, batch_per_rank=math.ceil(w.batch_size / dp),
                            kv_len=w.input_len + w.warmup_steps, tp=tp, dp=dp, ep=ep, mtp_draft_tokens=draft, weight_dtype=weights, kv_dtype=kv,
                            mla_form=form), ""
    except AnalysisError as exc:
        return None, str(exc)


def hardware_for_device(device_name: str | None) -> str | None:
    """The built-in peaks file a GPU's reported name points to ("NVIDIA H200" -> "h200"), else None."""
    import re

    if not device_name:
        return None
    words = set(re.findall(r"[a-z]+\d+", device_name.lower()))
    matches = [name for name in list_builtins("hardware") if name in words]
    return matches[0] if len(matches) == 1 else None
