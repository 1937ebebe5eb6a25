"""Expert load per MoE layer: how many tokens the busiest expert got against the mean.

Why: a long dispatch or combine on one layer is either waiting for a slow peer or moving more
tokens; the expert load of that layer tells which. The numbers come from SGLang's expert-distribution
recorder, recorded over the profiled window by the run (harness/sglang/expert_load.py turns its
torch dump into this JSON file, `expert_load.json`, so the analysis needs no torch):

    {"format": "moe-harness expert load 1", "source": "...", "mode": "stat", "forward_passes": N,
     "ep_size": E, "layers": [{"layer": 3, "tokens_per_expert": [...], "tokens_per_rank": [...]}]}

`tokens_per_expert` counts (token, expert) selections over the window, summed over the ranks;
`tokens_per_rank` the same per EP rank hosting the experts, empty where the placement is unknown.
Layers whose experts got no token (dense layers) are left out.
"""
from __future__ import annotations

from pathlib import Path

import msgspec

from analysis.errors import AnalysisError, shown_path
from analysis.io.input_files import CONFIG_LIMIT_BYTES, InputFileError, read_input

FORMAT = "moe-harness expert load 1"
FILE_NAME = "expert_load.json"


class _LayerIn(msgspec.Struct, forbid_unknown_fields=True):
    layer: int
    tokens_per_expert: list[int]
    tokens_per_rank: list[int] = []


class _FileIn(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    layers: list[_LayerIn]
    source: str = ""
    mode: str = ""
    forward_passes: int | None = None
    ep_size: int | None = None


class ExpertLoadLayer(msgspec.Struct):
    layer: int
    experts: int
    max_tokens: int  # tokens of the busiest expert over the window
    busiest_expert: int
    mean_tokens: float  # mean over the layer's experts
    imbalance: float  # max / mean: 1 = perfectly even
    rank_tokens: list[int] = []  # per EP rank, where the placement is known


class ExpertLoad(msgspec.Struct):
    source: str
    mode: str
    forward_passes: int | None
    ep_size: int | None
    layers: list[ExpertLoadLayer]


def summarize(layer: int, tokens_per_expert: list[int], tokens_per_rank: list[int]) -> ExpertLoadLayer | None:
    total = sum(tokens_per_expert)
    if not tokens_per_expert or total == 0:
        return None
    top = max(range(len(tokens_per_expert)), key=tokens_per_expert.__getitem__)
    mean = total / len(tokens_per_expert)
    return ExpertLoadLayer(layer=layer, experts=len(tokens_per_expert), max_tokens=tokens_per_expert[top],
                           busiest_expert=top, mean_tokens=mean, imbalance=tokens_per_expert[top] / mean,
                           rank_tokens=list(tokens_per_rank))


def load_expert_load(path: str | Path) -> ExpertLoad:
    """Read an expert_load.json; a malformed file is an AnalysisError naming it."""
    path = Path(path)
    try:
        data = read_input(path, CONFIG_LIMIT_BYTES, "an expert load file")
        if not data:
            raise InputFileError(path, "empty file")
        raw = msgspec.json.decode(data, type=_FileIn)
    except InputFileError as exc:
        raise AnalysisError(f"{exc.path}: cannot read the expert load: {exc.problem}") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise AnalysisError(f"{shown_path(path)}: not an expert load file: {exc}") from None
    except RecursionError:
        raise AnalysisError(f"{shown_path(path)}: not an expert load file: nested too deeply") from None
    if raw.format != FORMAT:
        raise AnalysisError(f"{path}: expert load format {raw.format!r}, expected {FORMAT!r}")
    layers = []
    for item in raw.layers:
        if any(t < 0 for t in item.tokens_per_expert) or any(t < 0 for t in item.tokens_per_rank):
            raise AnalysisError(f"{path}: layer {item.layer}: negative token count")
        if item.tokens_per_rank and sum(item.tokens_per_rank) != sum(item.tokens_per_expert):
            raise AnalysisError(f"{path}: layer {item.layer}: tokens per rank sum to {sum(item.tokens_per_rank)}, "
                                f"tokens per expert to {sum(item.tokens_per_expert)}")
        row = summarize(item.layer, item.tokens_per_expert, item.tokens_per_rank)
        if row is not None:
            layers.append(row)
    return ExpertLoad(source=raw.source, mode=raw.mode, forward_passes=raw.forward_passes, ep_size=raw.ep_size,
                      layers=sorted(layers, key=lambda r: r.layer))


def expert_load_doc(counts: list[list[list[int]]], ep_size: int, placement_known: bool, source: str) -> dict:
    """This file's document from a recorder's counts [passes][layers][experts] (SGLang's
    logical_count): summed over the passes, per layer; tokens_per_rank where the experts sit in the
    contiguous default placement (placement_known: no flag moved them) and divide evenly over the
    EP ranks (expert e on rank e // (experts / ep_size))."""
    layers = len(counts[0]) if counts else 0
    experts = len(counts[0][0]) if layers else 0
    by_rank = placement_known and ep_size > 1 and experts % ep_size == 0
    out = []
    for layer in range(layers):
        per_expert = [sum(p[layer][e] for p in counts) for e in range(experts)]
        per_rank = ([sum(per_expert[r * (experts // ep_size):(r + 1) * (experts // ep_size)]) for r in range(ep_size)]
                    if by_rank else [])
        out.append({"layer": layer, "tokens_per_expert": per_expert, "tokens_per_rank": per_rank})
    return {"format": FORMAT, "source": source, "mode": "stat", "forward_passes": len(counts),
            "ep_size": ep_size, "layers": out}


def write_expert_load(folder: str | Path, counts: list[list[list[int]]], ep_size: int, placement_known: bool,
                      source: str) -> Path:
    """FILE_NAME in folder (written aside, on disk, then moved in) from a recorder's counts (expert_load_doc)."""
    import json

    from analysis.io.atomic_files import write_atomically

    doc = expert_load_doc(counts, ep_size, placement_known, source)
    return write_atomically(Path(folder) / FILE_NAME, json.dumps(doc) + "\n", durable=True)
