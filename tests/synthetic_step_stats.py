"""SYNTHETIC dense decode steps whose durations differ from step to step, with every D4 statistic known.

Why: the D4 column reports each row's mean, median and p90 over steps, and the time before and after
the layers (`before layers`, `after layers`). On fixtures whose steps are all alike the mean, median,
p90 and max are one number, so a median computed as the mean, a p90 taken as the max, or `after
layers` ten times too large all pass. Here every kernel of step k lasts its base duration times
FACTORS[k], and the factors are chosen so that the four statistics differ:

    sorted factors 1 2 2 3 3 4 4 5 6 10:  mean 4, median (3 + 4) / 2 = 3.5,
    p90 the 9th of the 10 (nearest rank) = 6, max 10

The steps are written out of order, so a statistic that takes a step by its position is wrong too.
Before the layers each step runs the embedding (PRE_BASE_US x factor), after them the final norm,
the LM head and the argmax (POST_BASE_US x factor): two distinct known times, neither a layer's.

Kernel names are those of tests/synthetic_llama.py (a Llama-class decode on ROCm, one graph replay
per step, 4 layers); durations are made up, whole microseconds, so every expected value is exact.
The known answers are written here by hand from these definitions, apart from the analysis.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from synthetic_llama import (ACT, ARGMAX, CORE, CORE_REDUCE, DOWN, EMBEDDING, GATE_UP, KV_WRITE, LM_HEAD, NORM,
                             O_PROJ, QKV, ROTARY, STREAM)

FACTORS = (4, 10, 1, 3, 6, 2, 5, 3, 2, 4)  # step k's durations are base x FACTORS[k]
MEAN, MEDIAN, P90, MAX = 4.0, 3.5, 6.0, 10.0  # of FACTORS, by hand (see the module's docstring)
STAT_FACTOR = {"mean": MEAN, "median": MEDIAN, "p90": P90}
LAYERS = 4

# One layer, in launch order: (kernel, D4 group, D4 module, base duration in us). The same in every
# layer, so a row's per-layer value in step k is its base x FACTORS[k].
LAYER = (
    (NORM, "attention", "input_layernorm", 6.0),
    (QKV, "attention", "qkv_proj", 12.0),
    (ROTARY, "attention", "rotary_emb", 3.0),
    (KV_WRITE, "attention", "attn_core", 2.0),
    (CORE, "attention", "attn_core", 20.0),
    (CORE_REDUCE, "attention", "attn_core", 4.0),
    (O_PROJ, "attention", "o_proj", 9.0),
    (NORM, "mlp", "post_attention_layernorm", 5.0),
    (GATE_UP, "mlp", "gate_up_proj", 16.0),
    (ACT, "mlp", "act", 7.0),
    (DOWN, "mlp", "down_proj", 14.0),
)
BEFORE = ((EMBEDDING, 25.0),)
AFTER = ((NORM, 5.0), (LM_HEAD, 300.0), (ARGMAX, 15.0))
PRE_BASE_US = sum(base for _name, base in BEFORE)  # 25 us
POST_BASE_US = sum(base for _name, base in AFTER)  # 320 us
GAP_US = 0.5


def module_base_us() -> dict[tuple[str, str], float]:
    """Base per-layer microseconds per (group, module): a module's kernels summed."""
    out: dict[tuple[str, str], float] = {}
    for _name, group, module, base in LAYER:
        out[(group, module)] = out.get((group, module), 0.0) + base
    return out


def write_trace(path: Path) -> None:
    """Write the SYNTHETIC trace: one graph launch per step, its kernels back to back on one stream."""
    events = []
    t = 1000.0
    for step, factor in enumerate(FACTORS):
        correlation = 100 + step
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "hipGraphLaunch", "pid": 1, "tid": 1,
                       "ts": t - 5.0, "dur": 3.0, "args": {"correlation": correlation}})
        kernels = [*BEFORE, *((name, base) for _ in range(LAYERS) for name, _g, _m, base in LAYER), *AFTER]
        for name, base in kernels:
            dur = base * factor
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": STREAM, "ts": t, "dur": dur,
                           "args": {"stream": STREAM, "correlation": correlation, "device": 0}})
            t += dur + GAP_US
        t += 200.0
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "SYNTHETIC MI300X"}], "traceEvents": events}
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
