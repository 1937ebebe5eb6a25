"""Notes under the D4 table where a derived figure cannot be right, each naming its likely cause.

Why: a row at 749% of its speed of light, or a routed-experts row measured on a gate that sends every
token to the same experts, reads like a finding and is an artefact. Above 100% of SOL the kernels did
less work than the SOL model counts: for the routed experts, the model's touched experts (uniform
routing) against a skewed load; elsewhere, SOL settings that differ from what ran. A degenerate expert
load (the dummy weights' gate) is said beside the table whether or not SOL was asked for.
Thresholds: derived_notes.yaml.
"""
from __future__ import annotations

import functools
import math
from pathlib import Path

from analysis.attribution.stages import EXTEND
from analysis.io.data_files import read_yaml_file

THRESHOLDS_FILE = Path(__file__).with_name("derived_notes.yaml")
EXPERT_TERMS = ("experts_up_gate", "experts_down")


@functools.lru_cache(maxsize=1)
def _limits() -> dict:
    return read_yaml_file(THRESHOLDS_FILE, dict[str, dict])


def uniform_busiest_ratio(experts: int, mean_tokens: float) -> float:
    """About what the busiest of `experts` experts holds over the mean when tokens pick them uniformly
    (the largest of Poisson counts: mean + sqrt(2 mean ln E), over the mean)."""
    if mean_tokens <= 0 or experts < 2:
        return 1.0
    return 1.0 + math.sqrt(2.0 * math.log(experts) / mean_tokens)


def degenerate_layers(expert_load) -> tuple[int, int, float]:
    """(degenerate MoE layers, MoE layers, median busiest / mean) of an expert load."""
    factor = float(_limits()["expert_load"]["over_uniform"])
    layers = expert_load.layers if expert_load is not None else []
    bad = sum(1 for r in layers if r.imbalance > factor * uniform_busiest_ratio(r.experts, r.mean_tokens))
    ratios = sorted(r.imbalance for r in layers)
    return bad, len(layers), ratios[len(ratios) // 2] if ratios else 0.0


def expert_load_note(column) -> str | None:
    bad, total, median = degenerate_layers(column.expert_load)
    if not total or bad < float(_limits()["expert_load"]["layers_share"]) * total:
        return None
    return (f"{column.name}: EXPERT LOAD DEGENERATE in {bad} of {total} MoE layers (busiest expert {median:.1f}x the "
            f"mean tokens, median over the layers; uniform routing would give about "
            f"{uniform_busiest_ratio(column.expert_load.layers[0].experts, column.expert_load.layers[0].mean_tokens):.1f}x): "
            "the gate sends most tokens to a few experts, as random (dummy) weights do; the routed experts' rows "
            "are not what a trained model's balanced routing gives (SGLang's --ep-dispatch-algorithm fake spreads "
            "the tokens for a benchmark)")


def sol_notes(column) -> list[str]:
    """What is above 100% of SOL, and why it may be."""
    if column.sol is None:
        return []
    if column.stage == EXTEND:  # analysis/tables/d4_sol.py left the cells empty
        return [f"{column.name}: NO SOL FOR PREFILL: the SOL model counts a decode step (each request one new token "
                "against its KV length: --batch-per-rank, --kv-len); this table's steps are prefill (extend), whose "
                "kernels compute whole prompts, so its SOL cells are left empty"]
    limit = float(_limits()["sol"]["over_pct"])
    over = [r for r in column.rows if r.sol_pct is not None and r.sol_pct > limit]
    if not over:
        return []
    experts = [r for r in over if r.sol_term in EXPERT_TERMS]
    others = [r for r in over if r.sol_term not in EXPERT_TERMS]
    notes = []
    if experts:
        listed = ", ".join(f"{r.group} / {r.module} {r.sol_pct:.0f}%" for r in experts)
        touched, local = _touched_experts(column.sol)
        why = (f"the SOL model reads the weights of the experts uniform routing would touch ({touched:.1f} of "
               f"{local:g} on a rank per layer); ")
        bad, total, median = degenerate_layers(column.expert_load)
        if total and bad:
            why += (f"the expert load puts the busiest expert at {median:.1f}x the mean tokens ({bad} of {total} MoE "
                    "layers degenerate): fewer experts' weights were read than it assumes")
        elif total:
            why += "the expert load looks even, so check the SOL settings (--batch-per-rank, --ep, --dp)"
        else:
            why += ("with skewed routing (random dummy weights send every token to the same experts) fewer weights "
                    "are read than it assumes; --expert-load shows the routing")
        notes.append(f"{column.name}: ABOVE SOL: {listed}: {why}")
    if others:
        listed = ", ".join(f"{r.group} / {r.module} {r.sol_pct:.0f}%" for r in others)
        notes.append(f"{column.name}: ABOVE SOL: {listed}: the kernels did less work than the SOL model counts for "
                     f"its settings ({column.sol.describe()}): check them against the run (--tp, --dp, --ep, "
                     "--batch-per-rank, --kv-len, --weight-dtype)")
    return notes


def _touched_experts(settings) -> tuple[float, float]:
    from analysis.sol.estimate import touched_experts
    from analysis.sol.model_shapes import load_model_shapes

    return touched_experts(load_model_shapes(settings.model), settings.deployment)
