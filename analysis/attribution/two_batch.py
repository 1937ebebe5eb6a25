"""Two-batch overlap (TBO) read from the kernels alone: each micro-batch's kernels put back in the
order one micro-batch alone would run them, so the structural cut names them as it names any step,
and each MoE layer is the model's layer holding both micro-batches.

Why: under SGLang's two-batch overlap (sglang/srt/batch_overlap/), every MoE layer's batch is split
in two micro-batches A and B, each layer's operations are cut into stages at their yields, and B runs
two stages behind A on the same stream. Cut at attention cores, such a step holds twice the MoE
layers, each holding pieces of the other micro-batch: B's attention preparation between A's dispatch
send and receive, B's attention core between A's combine send and receive. Read without this, a
5-layer model has 8 layers, a combine is named dispatch and B's norms the experts.

What is relied on (decode and target-verify strategy of DeepSeek layers, sglang 0.5.x
operations_strategy.py; stages per MoE layer: [output of the layer before, input norm, attention
preparation] [attention core, post-attention norm, gate, top-k] [dispatch send, shared experts]
[dispatch receive, experts, combine send] [combine receive]):
- every MoE micro-layer launches DeepEP's low-latency dispatch and combine in two phases each (send,
  then receive through the hook), on one stream, in the order dispatch, dispatch, combine, combine;
- the attention core of the next micro-layer lies between a combine's send and receive, for every
  micro-layer but the last (never so without TBO: that is the test);
- between a dispatch's send and receive lie, in order: the shared experts of that micro-layer (up to
  their last GEMM), the output of the micro-layer before it, and from its first norm on the attention
  preparation of the micro-layer after it.
Dense layers before the first MoE layer run on the whole batch and are left where they are.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from msgspec.structs import replace

from analysis.ingest.kernel_classes import class_of_name
from analysis.attribution.layers import LayerCut, Slot
from analysis.attribution.module_attribution import kernel_label
from analysis.attribution.roles import row_of
from analysis.attribution.rows import SECTION_LAYER, SECTION_POST, SECTION_PRE
from analysis.attribution.structure import chain_positions
from analysis.ingest.trace_model import Kernel

_LOW_LATENCY = ("internode_ll::", "low_latency_")
_MAX_GAP_US = 50.0  # a moved kernel keeps the gap to its successor in time, at most this
TBO_NOTE = "two-batch overlap:"  # how a step's note starts its detail (tables/tbo_overlap.py reads it)
BEFORE_LAYERS_RULE = "structure_rules.yaml:outside.before_layers"
BETWEEN_LAYERS_RULE = "structure_rules.yaml:moe.after_experts"  # small kernels between layers: the residual's
SHARED_STREAM = -2  # where the retimed shared experts run (no real stream has a negative number)
# why a namer that reads module ranges or a capture trace leaves a TBO step to the structural cut
TWO_BATCH_WHY_NOT = ("two-batch overlap: the MoE layers' decoder-layer module ranges are missing, "
                     "named by the kernels' structure")


@dataclass(frozen=True)
class TwoBatchOrder:
    """The step's kernels (indices into its start-ordered list) in the order of one micro-batch after
    the other, and where the MoE micro-layers begin."""

    order: list[int]
    micro_layers: int        # MoE micro-layers: two per MoE layer (A, then B)
    first_dispatch: int      # index of the first micro-layer's dispatch send
    moe_start: int           # index of the first kernel of the first MoE micro-layer (its attention preparation)
    shared: frozenset[int]   # the shared experts' kernels (run on the main line under TBO)
    main: frozenset[int]     # the kernels of the step's one line across streams (structure's chain)


@functools.lru_cache(maxsize=100_000)
def is_two_phase(name: str) -> bool:
    """A DeepEP low-latency dispatch or combine (launched twice a layer: send, receive)."""
    return any(marker in name for marker in _LOW_LATENCY) and class_of_name(name) in ("dispatch", "combine")


def two_batch_order(kernels: list[Kernel]) -> TwoBatchOrder | None:
    """The micro-batch order of a two-batch-overlapped step, or None where the step is not one."""
    deep = [i for i, k in enumerate(kernels) if is_two_phase(k.name)]
    if len(deep) < 8 or len(deep) % 8:
        return None
    main = sorted(chain_positions(kernels), key=lambda i: kernels[i].start_us)  # one line, across streams
    position = {k: p for p, k in enumerate(main)}
    if any(i not in position for i in deep):
        return None
    quartets = []
    for q in range(0, len(deep), 4):
        four = sorted(deep[q:q + 4], key=lambda i: kernels[i].start_us)
        if [class_of_name(kernels[i].name) for i in four] != ["dispatch", "dispatch", "combine", "combine"]:
            return None
        quartets.append([position[i] for i in four])
    cores = [p for p, i in enumerate(main) if class_of_name(kernels[i].name) == "attn_core"]
    n = len(quartets)
    for q, (_, _, c_send, c_recv) in enumerate(quartets):
        inside = sum(1 for p in cores if c_send < p < c_recv)
        if inside != (1 if q < n - 1 else 0):
            return None
    blocks, shared = _blocks(kernels, main, quartets)
    # micro-layer 0 begins as many main kernels before its attention core as micro-layer 1 does (their
    # operations are the same): its preparation and what precedes the core in the block of micro-layer 1
    core_set = set(cores)
    core0 = max((p for p in cores if p < quartets[0][0]), default=None)
    core1 = next((j for j, p in enumerate(blocks[2]) if p in core_set), None)
    if core0 is None or core1 is None or core0 - core1 < 0:
        return None
    moe_start = main[core0 - core1]
    order_main = [p for block in blocks for p in block]
    if sorted(order_main) != list(range(len(main))):
        return None
    return TwoBatchOrder(_with_side_streams(kernels, main, order_main), n, main[quartets[0][0]], moe_start,
                         frozenset(main[p] for p in shared), frozenset(main))


def _blocks(kernels: list[Kernel], main: list[int], quartets: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """Main-stream positions: the head (up to the first dispatch send), each micro-layer's own
    kernels in one micro-batch's order, and the tail (after the last combine receive); and the
    positions of the shared experts."""
    n = len(quartets)
    shared: list[list[int]] = []
    output: list[list[int]] = [[] for _ in range(n)]
    prepare: list[list[int]] = [[] for _ in range(n + 1)]
    for q, (d_send, d_recv, _, _) in enumerate(quartets):
        window = list(range(d_send + 1, d_recv))
        classes = [class_of_name(kernels[main[p]].name) for p in window]
        norm_at = next((j for j, c in enumerate(classes) if c == "norm"), len(window)) if q < n - 1 else len(window)
        last_gemm = max((j for j, c in enumerate(classes[:norm_at]) if c == "gemm"), default=-1)
        shared.append(window[:last_gemm + 1])
        rest = window[last_gemm + 1:norm_at]
        if q == 0:  # no micro-layer before the first: what stands there is B's first stage
            prepare[q + 1] += rest
        else:
            output[q - 1] += rest
        prepare[q + 1] += window[norm_at:]
    blocks = [list(range(0, quartets[0][0]))]
    for q, (d_send, d_recv, c_send, c_recv) in enumerate(quartets):
        block = list(prepare[q])
        if q:
            before = quartets[q - 1]
            block += range(before[2] + 1, before[3])      # attention core, gate and top-k
            block += range(before[3] + 1, d_send)         # what comes before the dispatch
        block += [d_send, *shared[q], d_recv, *range(d_recv + 1, c_send), c_send]
        if q == n - 1:
            block += range(c_send + 1, c_recv)            # nothing is expected here
        block += [c_recv, *output[q]]
        blocks.append(block)
    blocks.append(list(range(quartets[-1][3] + 1, len(main))))
    return blocks, [p for block in shared for p in block]


def _with_side_streams(kernels: list[Kernel], main: list[int], order_main: list[int]) -> list[int]:
    """Step indices in the new order: each kernel off the main stream follows the main-stream kernel
    that started last before it (the one it was launched beside)."""
    position = {i: p for p, i in enumerate(main)}
    attached: dict[int, list[int]] = {p: [] for p in range(len(main))}
    p = 0
    for i in sorted(range(len(kernels)), key=lambda i: kernels[i].start_us):
        if i in position:
            p = position[i]
        else:
            attached[p].append(i)
    order: list[int] = []
    for p in order_main:
        order.append(main[p])
        order += attached[p]
    return order


def retimed(kernels: list[Kernel], plan: TwoBatchOrder, order: list[int]) -> list[Kernel]:
    """The kernels laid out one after another in the plan's order, each main-stream kernel with its
    attached side-stream kernels at their real offsets, durations and real gaps kept: what a namer
    reading start times sees. The shared experts go beside their dispatch on a stream of their own,
    where SGLang runs them without TBO (its alternate stream), so they read as the shared experts they
    are; what follows them on the main stream starts as they end. `order`: a part of the plan's order;
    the result is in that order."""
    on_main = sorted((i for i in plan.main if i not in plan.shared), key=lambda i: kernels[i].start_us)
    gap_after = {i: min(_MAX_GAP_US, max(0.1, kernels[j].start_us - kernels[i].end_us))
                 for i, j in zip(on_main, on_main[1:])}
    # each shared-expert block runs under the main-stream kernel before it (the dispatch send), which
    # the namer sees lasting as long (only the namer sees these times: the rows keep the real ones)
    under: dict[int, float] = {}
    anchor = None
    for i in order:
        if i in plan.shared and anchor is not None:
            under[anchor] = under.get(anchor, 1.0) + kernels[i].dur_us + 0.1
        elif i in plan.main:
            anchor = i
    out: list[Kernel] = []
    clock = side_clock = 0.0
    anchor_start = anchor_new = anchor_dur = 0.0
    for i in order:
        k = kernels[i]
        if i in plan.shared:
            side_clock = max(side_clock, anchor_new + 0.5)
            out.append(replace(k, start_us=side_clock, stream=SHARED_STREAM))
            side_clock += k.dur_us + 0.1
        elif i in plan.main:
            anchor_start, anchor_new = k.start_us, clock
            dur = anchor_dur = max(k.dur_us, under.get(i, 0.0))
            out.append(replace(k, start_us=clock, dur_us=dur))
            clock += dur + gap_after.get(i, 0.1)
        else:  # beside its main-stream kernel, always overlapping it: the line the cut reads stays one
            # whatever a step's launch timing (a side kernel that started after its neighbour ended would
            # join the line in one step and not in the next)
            new = anchor_new + min(max(0.0, k.start_us - anchor_start), 0.5 * anchor_dur)
            out.append(replace(k, start_us=new))
            clock = max(clock, new + k.dur_us)
    return out


def _cut_part(kernels: list[Kernel], plan: TwoBatchOrder, order: list[int], cut_of) -> tuple[LayerCut | None, list[int]]:
    """`cut_of` on a part of the plan's order, retimed; and each inner position's step index."""
    moved = retimed(kernels, plan, order)
    by_start = sorted(range(len(moved)), key=lambda j: moved[j].start_us)
    return cut_of([moved[j] for j in by_start]), [order[j] for j in by_start]


def two_batch_cut(kernels: list[Kernel], plan: TwoBatchOrder, cut_of) -> LayerCut | None:
    """`cut_of` (the structural cut) on the kernels in micro-batch order, mapped back to the step's
    order; layer units are the model's layers, each MoE one holding micro-batch 0 and 1.

    The dense layers before the first MoE layer (the whole batch) are cut apart from the micro-layers
    (half of it each): their GEMMs are other kernels (tiles for another token count), and the cut
    reads where a layer begins from what every layer's kernels before its attention share."""
    split = plan.order.index(plan.moe_start)
    head_order, tbo_order = plan.order[:split], plan.order[split:]
    tbo, tbo_original = _cut_part(kernels, plan, tbo_order, cut_of)
    if tbo is None:
        return None
    # the dense layers are cut with micro-layer 0's attention after them, so the last of them ends
    # where a layer begins; only the dense layers' kernels are taken from that cut
    head_set = set(head_order)
    with_next = tbo_order[:tbo_order.index(plan.first_dispatch)]
    head, head_original = _cut_part(kernels, plan, head_order + with_next, cut_of) if head_order else (None, [])
    core0 = next((j for j, i in enumerate(head_original) if i not in head_set
                  and class_of_name(kernels[i].name) == "attn_core"), None) if head is not None else None
    dense = head.slots[core0].unit if core0 is not None and head.slots[core0].section == SECTION_LAYER else 0
    if head is not None and core0 is None:
        head = None
    slots: list[Slot | None] = [None] * len(kernels)
    first_moe = dense if dense else None  # micro-layer 0's unit: what comes between opens it
    between = row_of("residual_add")

    def opening(slot: Slot) -> Slot:
        """After the dense layers, before the micro-layers (the batch's split, a gather): the first MoE
        layer's prologue, as what comes between a dense and a MoE layer is without TBO."""
        return Slot(SECTION_LAYER, first_moe, between.group, between.module, slot.kernel, slot.source,
                    role="residual_add", rule=BETWEEN_LAYERS_RULE)
    for pos, slot in enumerate(head.slots if head is not None else []):
        i = head_original[pos]
        if i not in head_set:
            continue  # micro-layer 0's: named by the micro-layers' cut
        if first_moe is not None and (slot.section == SECTION_POST or
                                      (slot.section == SECTION_LAYER and slot.unit >= first_moe)):
            slot = opening(slot)
        slots[i] = slot
    if head is None:
        embedding = row_of("embedding")
        for i in head_order:
            slots[i] = Slot(SECTION_PRE, -1, embedding.group, embedding.module, kernel_label(kernels[i]),
                            "structure", role="embedding", rule=BEFORE_LAYERS_RULE)
    for pos, slot in enumerate(tbo.slots):
        if slot.section == SECTION_LAYER:
            slot = replace(slot, unit=dense + slot.unit)
        elif slot.section == SECTION_PRE and first_moe is not None:
            slot = opening(slot)
        slots[tbo_original[pos]] = slot
    if any(s is None for s in slots):
        return None
    unit_layers = {u: (u, 0) if u < dense else (dense + (u - dense) // 2, (u - dense) % 2)
                   for u in {s.unit for s in slots if s.section == SECTION_LAYER}}
    layers = len({layer for layer, _ in unit_layers.values()})
    chain = None
    if tbo.chain is not None and (head is None or head.chain is not None):
        chain = ([head_original[p] for p in (head.chain if head is not None else []) if head_original[p] in head_set]
                 + [tbo_original[p] for p in tbo.chain])
    # the micro-layers' own cut counts its attention cores as layers ("6 layers by attention cores"
    # for a step of 4): the note says what the step holds instead
    detail = (f"{TBO_NOTE} {plan.micro_layers} MoE micro-layers read as {plan.micro_layers // 2} layers "
              f"of two micro-batches, after {dense} dense layer{'' if dense == 1 else 's'}")
    return LayerCut(slots, layers, detail, moe_layers=plan.micro_layers // 2, chain=chain, unit_layers=unit_layers)
