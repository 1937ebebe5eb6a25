"""Learn a signature template from a trace that has nn.Module ranges.

Why: an eager or CPU trace names every kernel by module, but a CUDA-graph trace of the same stack
does not. Learning turns the first into a signature for the second: each run of kernels that one
module launched becomes a template entry that matches the names seen there, weighted by how
characteristic each name is of that module (a name seen mostly in the experts scores higher
there than in attention), so the alignment puts module borders where the names change.
"""
from __future__ import annotations

import difflib
import re
from collections import Counter, defaultdict
from functools import lru_cache

import msgspec

from analysis.attribution.rank.attribute import RankOptions, attribute_rank
from analysis.attribution.signature import Signature
from analysis.attribution.rows import SECTION_LAYER, UNATTRIBUTED, KernelRow
from analysis.ingest.trace_model import RankTrace
from analysis.rules import load_rules
from analysis.rules_schema import NameKeys

Block = tuple[str, str]  # (group, module)
BODY_WEIGHT = 0.9
FIRST_LAST_SHARE = 0.9  # a block's first (last) kernel gets its own slot when this share of instances agree


@lru_cache(maxsize=1)
def _key_rules() -> list[tuple[re.Pattern[str], str]]:
    return [(re.compile(r.pattern), r.key) for r in load_rules("name_keys.yaml", NameKeys)]


@lru_cache(maxsize=100_000)
def name_key(name: str) -> str:
    """The regex a learned template uses for a kernel name: its family where names vary by tile."""
    for pattern, key in _key_rules():
        if pattern.search(name):
            return key
    return re.escape(name)


def _alternation(keys) -> str:
    return "^(?:" + "|".join(sorted(_bare(k) for k in keys)) + ")$"


def _exact(key: str) -> str:
    return "^" + _bare(key) + "$"


def _bare(key: str) -> str:
    return key[1:] if key.startswith("^") else key


def _layers(rows: list[KernelRow], main_stream: int) -> list[list[KernelRow]]:
    by_layer: dict[tuple[int, int], list[KernelRow]] = defaultdict(list)
    for r in rows:
        if r.section == SECTION_LAYER and r.stream == main_stream and r.group != UNATTRIBUTED:
            by_layer[(r.step, r.layer)].append(r)
    return [sorted(v, key=lambda r: r.start_us) for _, v in sorted(by_layer.items())]


def _blocks(layer: list[KernelRow]) -> list[tuple[Block, list[str]]]:
    out: list[tuple[Block, list[str]]] = []
    for r in layer:
        key = (r.group, r.module)
        if out and out[-1][0] == key:
            out[-1][1].append(name_key(r.kernel_name))
        else:
            out.append((key, [name_key(r.kernel_name)]))
    return out


def _merge_orders(orders: list[list[Block]]) -> list[Block]:
    """One block order covering every layer kind (which kind launches a block: _layer_kind_of)."""
    merged = list(orders[0])
    for other in orders[1:]:
        matcher = difflib.SequenceMatcher(a=merged, b=other, autojunk=False)
        result: list[Block] = []
        for tag, a0, a1, b0, b1 in matcher.get_opcodes():
            # An alternative branch (dense MLP instead of gate + experts) goes first: each kind's
            # own blocks then keep their order, and neither can take the other's kernels.
            if tag in ("insert", "replace"):
                result.extend(other[b0:b1])
            result.extend(merged[a0:a1])
        merged = result
    return merged


def _layer_kind_of(block: Block, orders: list[list[Block]]) -> str:
    """all, or dense / moe for blocks only layers of that kind launch."""
    if len(orders) != 2 or all(block in o for o in orders):
        return "all"
    is_moe = [any(g in ("moe", "gate") for g, _ in o) for o in orders]
    if is_moe[0] == is_moe[1]:
        return "all"
    holder = next(i for i, o in enumerate(orders) if block in o)
    return "moe" if is_moe[holder] else "dense"


def learn_signature(trace: RankTrace, base: Signature, name: str, description: str,
                    steps: set[int] | None = None) -> dict:
    """A signature (as a YAML-ready dict) learned from `trace`'s module ranges under `base`'s map
    (the standard role map, module_map.yaml, when `base` has none: the rows of the seed table).

    `steps` limits learning to those step indices (to check the result on the others).
    """
    if not trace.module_ranges:
        raise ValueError("learning needs nn.Module ranges in the trace (record it with with_stack=True)")
    rows, _steps = attribute_rank(trace, base, None, RankOptions(attribution="modules"))
    if steps is not None:
        rows = [r for r in rows if r.step in steps]
        if not rows:
            raise ValueError(f"no kernels in steps {sorted(steps)}")
    main = Counter(r.stream for r in rows).most_common(1)[0][0]
    layers = _layers(rows, main)
    if not layers:
        raise ValueError("no layer kernels named by module ranges: check the base signature's `layer` class")
    kinds: dict[tuple[Block, ...], list[list[tuple[Block, list[str]]]]] = defaultdict(list)
    for layer in layers:
        blocks = _blocks(layer)
        kinds[tuple(b for b, _ in blocks)].append(blocks)
    # Keep the (at most two: dense, MoE) layer kinds seen in every step; rarer orders are boundary effects.
    common = sorted(kinds.items(), key=lambda kv: -len(kv[1]))
    learned_steps = len({r.step for r in rows})
    orders = [list(k) for k, v in common if len(v) >= learned_steps][:2] or [list(common[0][0])]
    block_order = _merge_orders(orders)
    # Name frequencies per block position (the n-th occurrence of a block in the layer).
    names_at: dict[int, Counter] = defaultdict(Counter)
    firsts: dict[int, Counter] = defaultdict(Counter)
    lasts: dict[int, Counter] = defaultdict(Counter)
    for order_blocks in (blk for k, v in kinds.items() if list(k) in orders for blk in v):
        cursor = 0
        for key, names in order_blocks:
            while cursor < len(block_order) and block_order[cursor] != key:
                cursor += 1
            if cursor == len(block_order):
                break
            names_at[cursor].update(names)
            firsts[cursor][names[0]] += 1
            if len(names) > 1:
                lasts[cursor][names[-1]] += 1
            cursor += 1
    totals = {i: sum(c.values()) for i, c in names_at.items()}
    share = {i: {n: c / totals[i] for n, c in names_at[i].items()} for i in names_at}
    outside = {section: Counter(name_key(r.kernel_name) for r in rows if r.section == section and r.stream == main)
               for section in ("pre", "post")}
    best = Counter()
    for shares in [*share.values(), *(_shares(c) for c in outside.values())]:
        for n, s in shares.items():
            best[n] = max(best[n], s)
    anchor_name, anchor_pos = _choose_anchor(layers, names_at)
    entries: list[dict] = []
    for i, (group, module) in enumerate(block_order):
        if i not in names_at:
            continue
        keys = sorted(names_at[i])
        # Body slots score below a block's first / last slots (0.9 at most), so a kernel both could
        # take goes to the slot that keeps the block structure (MoE add, then residual add).
        weights = {k: round(max(0.05, BODY_WEIGHT * share[i][k] / best[k]), 3) for k in keys}
        kind = _layer_kind_of((group, module), orders)
        body = {"group": group, "module": module, "kernel": module, "repeat": True, "optional": True,
                "in_layers": kind, "match": _alternation(keys), "weights": weights}
        instances = sum(firsts[i].values())
        first = _agreed(firsts[i], instances)
        last = _agreed(lasts[i], instances)
        block = [dict(body)]
        if i == anchor_pos:
            anchor = {"group": group, "module": module, "kernel": _short(anchor_name), "anchor": True,
                      "in_layers": kind, "match": _exact(anchor_name)}
            block = [dict(body), anchor, dict(body)]
        if first is not None and not (i == anchor_pos and first == anchor_name):
            block.insert(0, {"group": group, "module": module, "kernel": module, "optional": True,
                             "in_layers": kind, "match": _exact(first)})
        if last is not None and not (i == anchor_pos and last == anchor_name):
            block.append({"group": group, "module": module, "kernel": module, "optional": True,
                          "in_layers": kind, "match": _exact(last)})
        entries += block
    learned = {"name": name, "description": description, "layer": entries,
               "pre": _outside_entries(outside["pre"], best, "embedding / input prep"),
               "post": _outside_entries(outside["post"], best, "lm_head / sampling")}
    if base.module_ranges is not None:  # else traces with ranges use the standard map (module_map.yaml)
        learned["module_ranges"] = _without_none(msgspec.to_builtins(base.module_ranges))
    return learned


def _without_none(value):
    """Plain data with the keys whose value is None left out (a learned file stays short)."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _agreed(counts: Counter, instances: int) -> str | None:
    """The key most instances start (end) with, when nearly all agree."""
    if not counts or not instances:
        return None
    key, n = counts.most_common(1)[0]
    return key if n >= FIRST_LAST_SHARE * instances else None


def _shares(names: Counter) -> dict[str, float]:
    total = sum(names.values())
    return {n: c / total for n, c in names.items()} if total else {}


def _outside_entries(names: Counter, best_share: Counter, module: str) -> list[dict]:
    """Kernels seen before / after the layers, weighted against the layers' blocks; then a catch-all."""
    catch_all = {"group": "other", "module": module, "kernel": "(any)", "match": ".", "optional": True, "repeat": True}
    if not names:
        return [catch_all]
    weights = {n: round(max(0.05, s / best_share[n]), 3) for n, s in _shares(names).items()}
    learned = {"group": "other", "module": module, "kernel": module, "optional": True, "repeat": True,
               "match": _alternation(names), "weights": weights}
    return [learned, catch_all]


def _choose_anchor(layers: list[list[KernelRow]], names_at: dict[int, Counter]) -> tuple[str, int]:
    """A kernel name launched exactly once in every layer, preferring attention's."""
    once = None
    for layer in layers:
        counts = Counter(name_key(r.kernel_name) for r in layer)
        names = {n for n, c in counts.items() if c == 1}
        once = names if once is None else once & names
    if not once:
        raise ValueError("no kernel is launched exactly once per layer: cannot choose an anchor")
    groups = {name_key(r.kernel_name): r.group for r in layers[0]}
    copies = ("Memcpy", "Memset")  # copies and memsets are launched by many modules: poor anchors
    anchor = sorted(once, key=lambda k: (k.startswith(copies), groups.get(k) != "attention", k))[0]
    pos = next(i for i, c in sorted(names_at.items()) if anchor in c)
    return anchor, pos


def _short(key: str) -> str:
    """The label of a name key (an escaped name or a family regex): the name it matches, whole, as
    the kernel column carries it (module_attribution.name_label)."""
    from analysis.attribution.module_attribution import name_label

    return name_label(re.sub(r"\\(.)", r"\1", key).strip("^$.*"))
